#!/usr/bin/env python3
"""A strict reader of the Prometheus text exposition format (version 0.0.4) for the tests.

prom_text.py FILE prints {"families": {NAME: TYPE}, "samples": {SERIES: VALUE}} as JSON, where SERIES
is the sample exactly as written before its value (name and labels), and exits 0; it exits 1 with one
line per problem on stderr when the text breaks the format: a line that is neither a comment nor a
`name{labels} value` sample, a sample of a family with no TYPE before it, a family's HELP or TYPE given
twice or its samples not together, a label value badly escaped, a counter below zero, or a histogram
whose buckets are not in increasing `le` order, not cumulative, without `+Inf`, or whose `+Inf`
bucket is not its `_count`, or that has no `_sum`.
"""
import json
import math
import re
import sys

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
SAMPLE = re.compile(r"^(" + NAME + r")(\{(.*)\})? (\S+)( -?\d+)?$")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\\\|\\"|\\n)*)"(,|$)')
TYPES = {"counter", "gauge", "histogram", "summary", "untyped"}


def parse_labels(text, problems, line):
    labels, pos = [], 0
    while pos < len(text):
        m = LABEL.match(text, pos)
        if not m:
            problems.append(f"bad labels in: {line}")
            return None
        labels.append((m.group(1), m.group(2)))
        pos = m.end()
    return labels


def value_of(text):
    if text in ("+Inf", "-Inf", "NaN"):
        return float(text.replace("Inf", "inf").replace("NaN", "nan"))
    return float(text)


def family_of(name, types):
    if name in types:
        return name
    for suffix in ("_bucket", "_sum", "_count"):
        base = name[: -len(suffix)]
        if name.endswith(suffix) and types.get(base) in ("histogram", "summary"):
            return base
    return None


def check(text):
    problems, types, helps, samples, order = [], {}, set(), {}, []
    histos = {}  # (family, labels without le) -> {"buckets": [(le, v)], "count": v, "sum": v}
    if not text.endswith("\n"):
        problems.append("the text does not end with a newline")
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name = line.split(" ", 3)[2]
            if name in helps:
                problems.append(f"HELP {name} given twice")
            helps.add(name)
            continue
        if line.startswith("# TYPE "):
            parts = line.split(" ")
            if len(parts) != 4 or parts[3] not in TYPES or not re.fullmatch(NAME, parts[2]):
                problems.append(f"bad TYPE line: {line}")
                continue
            if parts[2] in types:
                problems.append(f"TYPE {parts[2]} given twice")
            types[parts[2]] = parts[3]
            continue
        if line.startswith("#") or line == "":
            continue
        m = SAMPLE.match(line)
        if not m:
            problems.append(f"not a sample line: {line}")
            continue
        name, labels_text, value_text = m.group(1), m.group(3) or "", m.group(4)
        labels = parse_labels(labels_text, problems, line)
        try:
            value = value_of(value_text)
        except ValueError:
            problems.append(f"not a number: {line}")
            continue
        family = family_of(name, types)
        if family is None:
            problems.append(f"sample before its family's TYPE: {line}")
            continue
        if order and order[-1] != family and family in order:
            problems.append(f"samples of {family} are not together: {line}")
        if not order or order[-1] != family:
            order.append(family)
        series = line[: len(line) - len(value_text) - 1 - len(m.group(5) or "")]
        if series in samples:
            problems.append(f"series given twice: {series}")
        samples[series] = value
        kind = types[family]
        if kind == "counter" and not value >= 0:
            problems.append(f"counter below zero: {line}")
        if kind == "histogram" and labels is not None:
            key = (family, tuple(l for l in labels if l[0] != "le"))
            h = histos.setdefault(key, {"buckets": [], "count": None, "sum": None})
            if name.endswith("_bucket"):
                le = dict(labels).get("le")
                if le is None:
                    problems.append(f"bucket without le: {line}")
                else:
                    h["buckets"].append((value_of(le), value))
            elif name.endswith("_count"):
                h["count"] = value
            elif name.endswith("_sum"):
                h["sum"] = value
    for (family, labels), h in histos.items():
        where = f"{family}{dict(labels)}"
        les = [le for le, _ in h["buckets"]]
        if les != sorted(les) or len(set(les)) != len(les):
            problems.append(f"{where}: buckets not in increasing le order")
        if not les or not math.isinf(les[-1]):
            problems.append(f"{where}: no +Inf bucket")
        counts = [v for _, v in h["buckets"]]
        if any(b < a for a, b in zip(counts, counts[1:])):
            problems.append(f"{where}: buckets not cumulative: {counts}")
        if h["count"] is None or (counts and counts[-1] != h["count"]):
            problems.append(f"{where}: +Inf bucket {counts[-1] if counts else None} is not _count {h['count']}")
        if h["sum"] is None:
            problems.append(f"{where}: no _sum")
    return problems, types, samples


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        problems, types, samples = check(f.read())
    if problems:
        for p in problems:
            print(p, file=sys.stderr)
        sys.exit(1)
    json.dump({"families": types, "samples": samples}, sys.stdout, sort_keys=True)
    print()


if __name__ == "__main__":
    main()
