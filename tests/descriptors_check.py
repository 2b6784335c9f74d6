#!/usr/bin/env python3
"""Every descriptor the two programs make is close-on-exec from its first instant (run by `make test`).

A descriptor made without close-on-exec and marked later leaves a window in which another thread's
fork or clone hands it to a child; one never marked reaches whatever that process executes. The
rule (docs/isolation.md, "Descriptors") is checked here on the call itself, in common/,
sandbox-agent/ and manager/ (comments removed): each call that makes a descriptor must carry its
close-on-exec flag among its arguments, and the calls that cannot carry one are refused (`dup`,
`pipe`, `accept`, `creat`, `mkstemp`, `epoll_create`, `fcntl(F_DUPFD)`). `fopen`'s mode holds "e", and
every `struct open_how` (openat2) holds O_CLOEXEC in its flags. Not checked, since the kernel or the
library makes them close-on-exec always: pidfd_open, clone3's pidfd, landlock_create_ruleset, opendir.
`dup2` clears the flag on purpose: it is allowed onto 0, 1 and 2, and elsewhere only in the
children named in EXCEPTIONS, each with why. Exit 1 with one line per breach."""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FOLDERS = ["common", "sandbox-agent", "manager"]

# call -> the flag one of its arguments must hold (None: the call is refused; it cannot carry one).
FLAG = {
    "open": "O_CLOEXEC", "openat": "O_CLOEXEC", "pipe2": "O_CLOEXEC", "dup3": "O_CLOEXEC",
    "mkostemp": "O_CLOEXEC", "socket": "SOCK_CLOEXEC", "socketpair": "SOCK_CLOEXEC",
    "accept4": "SOCK_CLOEXEC", "memfd_create": "MFD_CLOEXEC", "eventfd": "EFD_CLOEXEC",
    "signalfd": "SFD_CLOEXEC", "timerfd_create": "TFD_CLOEXEC", "epoll_create1": "EPOLL_CLOEXEC",
    "inotify_init1": "IN_CLOEXEC", "open_tree": "OPEN_TREE_CLOEXEC", "fsopen": "FSOPEN_CLOEXEC",
    "fsmount": "FSMOUNT_CLOEXEC", "recvmsg": "MSG_CMSG_CLOEXEC",
    "dup": None, "pipe": None, "accept": None, "creat": None, "mkstemp": None, "epoll_create": None,
    "inotify_init": None,
}
# (file, function, call) -> why the call may make a descriptor that survives exec.
EXCEPTIONS = {
    ("common/fdio.c", "fd_stdio_ensure", "open"):
        "/dev/null opened onto a closed 0, 1 or 2: stdio, inherited by design",
    ("manager/backend/process_net.c", "slirp_exec", "dup2"):
        "the slirp4netns child hands its exit and ready pipes to the program it executes",
}
CALL = re.compile(r"(?<![\w.>])(" + "|".join(sorted(FLAG, key=len, reverse=True) + ["dup2", "fopen", "fcntl"]) + r")\s*\(")
OPEN_HOW = re.compile(r"\bstruct\s+open_how\b[^;{]*?\{")
# A function definition as this code writes it: not indented, its body's brace on the next line.
DEFINITION = re.compile(r"^[A-Za-z_][^\n;#]*?\b([a-z_][a-z0-9_]*)\s*\([^;{]*?\)\s*\n\{", re.M)
COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
STRING = re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'')
STDIO = {"0", "1", "2", "STDIN_FILENO", "STDOUT_FILENO", "STDERR_FILENO"}


def blanked(pattern, text):
    # Same length, newlines kept: positions still give line numbers, and match between the copies.
    return pattern.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def arguments(text, start):
    """The text between the parenthesis at start and its match (strings and characters skipped)."""
    depth, i, quote = 0, start, None
    while i < len(text):
        c = text[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = None
        elif c in "\"'":
            quote = c
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return text[start + 1:i]
        i += 1
    return text[start + 1:]


def last_argument(args):
    depth, cut = 0, 0
    for i, c in enumerate(args):
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "," and depth == 0:
            cut = i + 1
    return args[cut:].strip()


def breach(call, args):
    """Why this call breaks the rule, or None."""
    if call == "fopen":
        mode = re.search(r',\s*"([^"]*)"\s*$', args)
        return None if mode and "e" in mode.group(1) else 'fopen without "e" in its mode'
    if call == "fcntl":
        return "fcntl F_DUPFD without _CLOEXEC" if re.search(r"\bF_DUPFD\b", args) else None
    if call == "dup2":
        return None if last_argument(args) in STDIO else "dup2 onto a descriptor other than 0, 1 or 2"
    if FLAG[call] is None:
        return f"{call} cannot make a close-on-exec descriptor"
    if FLAG[call] not in args:
        return f"{call} without {FLAG[call]}"
    return None


def check_file(rel):
    # Calls are found in the code alone (no comment, no string); their arguments are read with
    # their strings (fopen's mode).
    text = blanked(COMMENT, open(os.path.join(ROOT, rel), encoding="utf-8").read())
    code = blanked(STRING, text)
    defs = [(m.start(), m.group(1)) for m in DEFINITION.finditer(code)]
    found = []
    for m in CALL.finditer(code):
        call = m.group(1)
        why = breach(call, arguments(text, m.end() - 1))
        if why is None:
            continue
        function = next((name for pos, name in reversed(defs) if pos < m.start()), "")
        if (rel, function, call) in EXCEPTIONS:
            continue
        line = text.count("\n", 0, m.start()) + 1
        found.append(f"{rel}:{line}: {function}(): {why}")
    braces = text.replace("{", "(").replace("}", ")")  # an initializer read as arguments are
    for m in OPEN_HOW.finditer(code):
        if "O_CLOEXEC" not in arguments(braces, m.end() - 1):
            line = text.count("\n", 0, m.start()) + 1
            found.append(f"{rel}:{line}: a struct open_how without O_CLOEXEC in its flags")
    return found


def main():
    breaches, files = [], 0
    for folder in FOLDERS:
        for dirpath, _, names in os.walk(os.path.join(ROOT, folder)):
            for name in sorted(names):
                if name.endswith(".c"):
                    files += 1
                    breaches += check_file(os.path.relpath(os.path.join(dirpath, name), ROOT))
    for b in breaches:
        print(f"descriptors_check: {b}")
    print(f"descriptors_check: {files} files, {len(breaches)} breach(es)")
    return 1 if breaches else 0


if __name__ == "__main__":
    sys.exit(main())
