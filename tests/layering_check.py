#!/usr/bin/env python3
"""The layering rules of docs/architecture.md, checked from the #include lines (run by `make test`).

Each folder may include headers from the folders its rule names, and from nowhere else; a header is
found the way the compiler finds it (the including file's own folder first, then common/, then the
manager's folders: the Makefile's MANAGER_INC, and sandbox-agent/ for manager/backend/ only). A rule
that allows only some headers of a folder names them. Also: only the daemon names a backend's
constructor, a header named *_internal.h is its own folder's alone (and a split file's, its parts' alone:
INTERNAL_USERS), and no two files of manager/core/, nor two parts of one split file, call each other,
directly or around a loop (a function defined in A and called in B is an edge B -> A). Exit 1 with one
line per breach."""
import fnmatch
import glob
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# folder -> the folders (or folder:header) it may include, besides itself.
RULES = {
    "common": [],
    "sandbox-agent": ["common"],
    "manager/control": ["common"],
    "manager/front": ["common", "manager/control"],
    "manager/records": ["common", "manager/control:control_limits.h"],
    "manager/observe": ["common"],
    "manager/agentlink": ["common"],
    "manager/authority": ["common"],
    "manager/egress": ["common"],
    "manager/workspace": ["common", "manager/control:control_limits.h"],
    # The process backend's sandbox init is read beside the agent's init, and built into the manager.
    "manager/backend": ["common", "manager/workspace:mount_plan.h", "sandbox-agent:sandbox_init.h"],
    "manager/core": ["common", "manager/control", "manager/records", "manager/observe", "manager/agentlink",
                     "manager/authority", "manager/egress", "manager/workspace", "manager/backend"],
    "manager": ["common", "manager/core", "manager/front"],  # main.c: the command table
}
# The headers a split file's parts share (issue 31): included by those parts only, so that what was one
# file's static stays that file's concern; and the parts call each other one way only (CALL_GROUPS).
INTERNAL_USERS = {
    "sandbox-agent/boundary_internal.h": "sandbox-agent/boundary_*.c",
    "sandbox-agent/journal_internal.h": "sandbox-agent/journal*.c",
    "sandbox-agent/serve_internal.h": "sandbox-agent/serve*.c",
    "manager/agentlink/agent_client_internal.h": "manager/agentlink/agent_[cr]*.c",
}
CALL_GROUPS = ["manager/core/*.c"] + list(INTERNAL_USERS.values())
# Backend constructors: named only where the daemon picks the backend (and in the backends' tests).
CONSTRUCTOR = re.compile(r"\bbackend_[a-z]+_create\w*\s*\(")
CONSTRUCTOR_ALLOWED = {"manager/core/daemon.c"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
# A function definition as this code writes it: not static, not indented, its body's brace on the
# next line. A call: a name and its parenthesis, once comments and strings are gone.
DEFINITION = re.compile(r"^(?!static\b)[A-Za-z][^\n;#]*?\b([a-z_][a-z0-9_]*)\s*\([^;{]*?\)\s*\n\{", re.M)
CALL = re.compile(r"\b([a-z_][a-z0-9_]*)\s*\(")


def folder_of(path):
    return os.path.dirname(os.path.relpath(path, ROOT))


def search_path(folder):
    managers = sorted(os.path.relpath(d, ROOT) for d in glob.glob(os.path.join(ROOT, "manager", "*", "")))
    # The Makefile adds -Isandbox-agent for the backend's objects (sandbox_init.h).
    return ["common"] + managers + (["sandbox-agent"] if folder == "manager/backend" else [])


def resolve(including, header):
    """The folder and file of the header the compiler would open, or None (generated or system)."""
    for d in [folder_of(including)] + search_path(folder_of(including)):
        if os.path.isfile(os.path.join(ROOT, d, header)):
            return d, os.path.basename(header)
    return None


def allowed(rule, folder, header):
    return any(r == folder or r == f"{folder}:{header}" for r in rule)


def code_only(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r'"(\\.|[^"\\\n])*"', '""', text)


def call_cycles(pattern):
    """Each cycle of calls between the .c files the pattern names, as a list of files (Tarjan's components)."""
    files = sorted(glob.glob(os.path.join(ROOT, pattern)))
    text = {f: code_only(open(f, encoding="utf-8").read()) for f in files}
    defined = {name: f for f in files for name in DEFINITION.findall(text[f])}
    edges = {f: sorted({defined[n] for n in CALL.findall(text[f]) if defined.get(n, f) != f}) for f in files}
    index, low, stack, cycles = {}, {}, [], []

    def visit(f):
        index[f] = low[f] = len(index)
        stack.append(f)
        for g in edges[f]:
            if g not in index:
                visit(g)
                low[f] = min(low[f], low[g])
            elif g in stack:
                low[f] = min(low[f], index[g])
        if low[f] == index[f]:
            part = []
            while not part or part[-1] != f:
                part.append(stack.pop())
            if len(part) > 1:
                cycles.append(sorted(os.path.basename(p) for p in part))

    for f in files:
        if f not in index:
            visit(f)
    return cycles


def main():
    breaches = []
    sources = [p for pat in ("common/*.[ch]", "sandbox-agent/*.[ch]", "manager/*.[ch]", "manager/*/*.[ch]")
               for p in glob.glob(os.path.join(ROOT, pat))]
    folders = {folder_of(p) for p in sources}
    for f in sorted(folders - RULES.keys()):
        breaches.append(f"{f}/: a folder with no layering rule (add it to tests/layering_check.py and docs/architecture.md)")
    for path in sorted(sources):
        rel, folder = os.path.relpath(path, ROOT), folder_of(path)
        text = open(path, encoding="utf-8").read()
        for header in INCLUDE.findall(text):
            found = resolve(path, header)
            if found is None:
                continue
            users = INTERNAL_USERS.get(f"{found[0]}/{found[1]}")
            if users is not None and not fnmatch.fnmatch(rel, users):
                breaches.append(f"{rel}: includes {found[0]}/{found[1]}, which only {users} may use")
            elif found[0] == folder:
                continue
            elif found[1].endswith("_internal.h"):
                breaches.append(f"{rel}: includes {found[0]}/{found[1]}, which only {found[0]}/ itself may use")
            elif not allowed(RULES.get(folder, []), *found):
                breaches.append(f"{rel}: includes {found[0]}/{found[1]}, which {folder}/ may not use")
        if CONSTRUCTOR.search(text) and rel not in CONSTRUCTOR_ALLOWED and not rel.startswith("manager/backend/"):
            breaches.append(f"{rel}: names a backend constructor; only {', '.join(sorted(CONSTRUCTOR_ALLOWED))} does")
    for group in CALL_GROUPS:
        for cycle in call_cycles(group):
            breaches.append(f"{group}: {', '.join(cycle)} call each other around a loop; one of them must "
                            "not call back (a caller above both, as recovery.c is for start-up)")
    for header, users in INTERNAL_USERS.items():
        if not os.path.isfile(os.path.join(ROOT, header)):
            breaches.append(f"{header}: named in INTERNAL_USERS but gone (update tests/layering_check.py)")
    for b in breaches:
        print(f"layering: {b}")
    print(f"layering_check: {len(sources)} files, {len(breaches)} breach(es)")
    return 1 if breaches else 0


if __name__ == "__main__":
    sys.exit(main())
