#!/usr/bin/env python3
"""The reviewer's map is true (rule R9 of docs/isolation.md): every file, function and test that a
document names in backticks exists in the repository.

  - `name()`                      a function defined in a C source or header (a line that starts the
                                  definition: not indented, the name followed by '(', no ';' at the end)
  - `dir/file.c`, `file.sh`, ...  a file: the path itself, or the end of one tracked path
  - in a table's test column, every other identifier: an integration test (`t NAME` in
    tests/integration/*.sh), a C test function (NAME or test_NAME in tests/), a test program
    (tests/*/NAME.c), or a field the code writes (a string literal "NAME" in a C source)

Usage: docs_check.py DOC... (run by `make test`); exits 1 and lists what it could not find.
"""
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FILE_EXT = r"\.(c|h|sh|py|mjs|json|md|proto|conf|yaml|service)$"


def tracked_files():
    out = subprocess.run(["git", "-C", ROOT, "ls-files", "--cached", "--others", "--exclude-standard"],
                         capture_output=True, text=True, check=True).stdout
    return [p for p in out.splitlines() if os.path.exists(os.path.join(ROOT, p))]


def read(path):
    with open(os.path.join(ROOT, path), encoding="utf-8", errors="replace") as f:
        return f.read()


def index(files):
    functions, calls, literals, tests = set(), set(), set(), set()
    define = re.compile(r"^[A-Za-z_][^;\n]*?\b([A-Za-z_]\w*)\(([^;\n]*)$", re.M)
    for p in files:
        if re.search(r"\.(c|h)$", p):
            text = read(p)
            for m in define.finditer(text):
                functions.add(m.group(1))
            for m in re.finditer(r"#define\s+([A-Za-z_]\w*)\(", text):
                functions.add(m.group(1))
            literals.update(re.findall(r'"([A-Za-z_][\w.-]*)"', text))
            # A system or library function the code calls exists too (setsid(), mount_setattr()).
            if not p.startswith("tests/"):
                calls.update(re.findall(r"[^\w.>]([a-z_]\w*)\(", text))
            if p.startswith("tests/"):
                tests.update(re.findall(r"\b(test_\w+)\s*\(", text))
                tests.update(re.findall(r"cmocka_unit_test\w*\(\s*(\w+)", text))
                tests.add(os.path.basename(p)[:-2])
        elif p.startswith("tests/") and p.endswith(".sh"):
            tests.update(re.findall(r"^\s*t\s+(\S+)\s", read(p), re.M))
            tests.update(re.findall(r"^IT_USER=(\w+)", read(p), re.M))  # "as `sbtest`"
        elif p == "Makefile":
            tests.update("make " + t for t in re.findall(r"^([a-z][\w-]*):", read(p), re.M))
        elif p.startswith("tests/") and p.endswith(".mjs"):
            tests.update(re.findall(r"\b(?:ok|check|test)\(\s*['\"]([^'\"]+)['\"]", read(p)))
    return functions, calls - functions, literals, tests


def file_known(name, files):
    name = name.rstrip("/")
    return any(p == name or p.endswith("/" + name) or p.startswith(name + "/") for p in files)


def table_columns(line):
    """The cells of a table row; [] for the separator row; None outside a table."""
    if not line.startswith("|"):
        return None
    if re.match(r"^\|[\s|:-]+\|$", line):
        return []
    return [c.strip() for c in line.strip().strip("|").split("|")]


def check(doc, files, functions, calls, literals, tests):
    missing = []
    header = None
    for n, line in enumerate(read(doc).splitlines(), 1):
        cols = table_columns(line.replace("\\|", "/"))
        if cols == []:
            continue
        if cols is not None and header is None:
            header = [c.lower() for c in cols]
            continue
        if cols is None:
            header = None
        for i, cell in enumerate(cols if cols is not None else [line]):
            in_test_column = header is not None and i < len(header) and header[i] == "test"
            for token in re.findall(r"`([^`]+)`", cell):
                if in_test_column and token.startswith("make "):
                    if token not in tests:
                        missing.append(f"{doc}:{n}: target {token} is not in the Makefile")
                    continue
                for word in token.split():
                    word = word.strip(",;")
                    m = re.fullmatch(r"(?:[\w/.-]+\.c\s*)?([A-Za-z_]\w*)\(\)", word)
                    if m:
                        if m.group(1) not in functions and m.group(1) not in calls:
                            missing.append(f"{doc}:{n}: function {m.group(1)}() is defined nowhere")
                    elif re.search(FILE_EXT, word) and re.fullmatch(r"[\w./*-]+", word) and "*" not in word:
                        if not file_known(word, files):
                            missing.append(f"{doc}:{n}: file {word} does not exist")
                    elif in_test_column and re.fullmatch(r"[A-Za-z_][\w-]*", word) and " " not in token:
                        if (word not in tests and ("test_" + word) not in tests and word not in literals
                                and shutil.which(word) is None):
                            missing.append(f"{doc}:{n}: test {word} exists nowhere")
    return missing


def main(docs):
    files = tracked_files()
    functions, calls, literals, tests = index(files)
    missing = []
    for doc in docs:
        missing += check(doc, files, functions, calls, literals, tests)
    for m in missing:
        print(m)
    print(f"docs_check: {len(docs)} document(s), {len(missing)} name(s) not found")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["docs/isolation.md"]))
