#!/usr/bin/env python3
"""The layering rules of docs/architecture.md, checked from the #include lines (run by `make test`).

Each folder may include headers from the folders its rule names, and from nowhere else; a header is
found the way the compiler finds it (the including file's own folder first, then common/, then the
manager's folders: the Makefile's MANAGER_INC). A rule that allows only some headers of a folder
names them. A header named *_internal.h is its own folder's alone. Also: only the daemon names a
backend's constructor. Exit 1 with one line per breach."""
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
    "manager/workspace": ["common", "manager/control:control_limits.h"],
    "manager/backend": ["common", "manager/workspace:mount_plan.h"],
    "manager/core": ["common", "manager/control", "manager/records", "manager/observe", "manager/agentlink",
                     "manager/authority", "manager/workspace", "manager/backend"],
    "manager": ["common", "manager/core", "manager/front"],  # main.c: the command table
}
# Backend constructors: named only where the daemon picks the backend (and in the backends' tests).
CONSTRUCTOR = re.compile(r"\bbackend_[a-z]+_create\w*\s*\(")
CONSTRUCTOR_ALLOWED = {"manager/core/daemon.c"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def folder_of(path):
    return os.path.dirname(os.path.relpath(path, ROOT))


def search_path():
    return ["common"] + sorted(os.path.relpath(d, ROOT) for d in glob.glob(os.path.join(ROOT, "manager", "*", "")))


def resolve(including, header):
    """The folder and file of the header the compiler would open, or None (generated or system)."""
    for d in [folder_of(including)] + search_path():
        if os.path.isfile(os.path.join(ROOT, d, header)):
            return d, os.path.basename(header)
    return None


def allowed(rule, folder, header):
    return any(r == folder or r == f"{folder}:{header}" for r in rule)


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
            if found is None or found[0] == folder:
                continue
            if found[1].endswith("_internal.h"):
                breaches.append(f"{rel}: includes {found[0]}/{found[1]}, which only {found[0]}/ itself may use")
            elif not allowed(RULES.get(folder, []), *found):
                breaches.append(f"{rel}: includes {found[0]}/{found[1]}, which {folder}/ may not use")
        if CONSTRUCTOR.search(text) and rel not in CONSTRUCTOR_ALLOWED and not rel.startswith("manager/backend/"):
            breaches.append(f"{rel}: names a backend constructor; only {', '.join(sorted(CONSTRUCTOR_ALLOWED))} does")
    for b in breaches:
        print(f"layering: {b}")
    print(f"layering_check: {len(sources)} files, {len(breaches)} breach(es)")
    return 1 if breaches else 0


if __name__ == "__main__":
    sys.exit(main())
