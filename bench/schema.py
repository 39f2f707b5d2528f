"""The result file's schema, version 1, and its validator: ``python -m bench.schema [FILE ...]`` (every file of
``bench/results`` by default) prints each problem and exits 1 when there is one.

A result file is one JSON object::

    {"schema": 1, "bench": "bench.app", "date": "2026-11-27T22:00:00+00:00",
     "machine": {"node": ..., "cpus": 2, "cpu": ..., "python": ..., "system": ...},
     "commit": {"sha": "a712bca", "dirty": true, "changed": 3, "untracked": 1},
     "arguments": {...}, "smoke": false,
     "load": {"before": [1m, 5m, 15m], "during": [1m, ...], "after": [1m, 5m, 15m]},
     "figures": {...}}

``bench.harness.Recorder`` writes it. A file written before this schema was migrated to it keeping its measured
values; what it did not record is the string ``"unknown"`` (a header field, or ``commit`` / ``load`` items), never a
guess. The figure blocks read a file through :func:`flat`: the figures with the header's date, machine, arguments,
bench and commit beside them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

SCHEMA_VERSION = 1
UNKNOWN = "unknown"
#: the header's fields, in the order a file holds them, with the type each has when known
HEADER = {"schema": int, "bench": str, "date": str, "machine": dict, "commit": dict, "arguments": dict, "smoke": bool,
          "load": dict, "figures": dict}
#: fields that are never unknown
KNOWN_ALWAYS = ("schema", "bench", "figures")
MACHINE = ("cpus",)
COMMIT = {"sha": str, "dirty": bool, "changed": int, "untracked": int}
LOAD = ("before", "during", "after")


def numbers(value) -> bool:
    return isinstance(value, list) and all(isinstance(item, (int, float)) for item in value)


def problems(result) -> list[str]:
    """What is wrong with ``result`` against the schema (nothing: an empty list)."""
    if not isinstance(result, dict):
        return ["not a JSON object"]
    found = []
    for name, kind in HEADER.items():
        if name not in result:
            found.append(f"no '{name}'")
        elif result[name] == UNKNOWN and name not in KNOWN_ALWAYS:
            continue
        elif not isinstance(result[name], kind) or (kind is int and isinstance(result[name], bool)):
            found.append(f"'{name}' is not a {kind.__name__}")
    found += [f"unexpected top-level '{name}' (figures go under 'figures')" for name in result if name not in HEADER]
    if found:
        return found
    if result["schema"] != SCHEMA_VERSION:
        return [f"schema {result['schema']}, not {SCHEMA_VERSION}"]
    if not result["bench"].startswith("bench."):
        found.append(f"bench '{result['bench']}' is not a module of the bench package")
    if isinstance(result["machine"], dict):
        found += [f"machine has no '{name}'" for name in MACHINE if name not in result["machine"]]
    if isinstance(result["commit"], dict):
        for name, kind in COMMIT.items():
            value = result["commit"].get(name)
            if value != UNKNOWN and (not isinstance(value, kind) or (kind is int and isinstance(value, bool))):
                found.append(f"commit's '{name}' is not a {kind.__name__} or '{UNKNOWN}'")
    if isinstance(result["load"], dict):
        for name in LOAD:
            value = result["load"].get(name)
            if value != UNKNOWN and not numbers(value):
                found.append(f"load's '{name}' is not a list of numbers or '{UNKNOWN}'")
    clashes = [name for name in result["figures"] if name in HEADER]
    found += [f"figure '{name}' has a header field's name" for name in clashes]
    return found


def flat(result: dict) -> dict:
    """The figures, with the header's date, machine, arguments, bench and commit beside them (what the figure blocks
    read)."""
    return {**result["figures"], **{name: result[name] for name in ("bench", "date", "machine", "arguments", "commit")}}


def check(paths: list[Path]) -> list[str]:
    """``path: problem`` for every problem of every file."""
    found = []
    for path in paths:
        try:
            result = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            found.append(f"{path}: cannot be read as JSON ({error})")
            continue
        found += [f"{path}: {problem}" for problem in problems(result)]
        if result.get("smoke") is True and path.parent.name == "results":
            found.append(f"{path}: a smoke run's result among the measured ones")
    return found


def main(argv: list[str] | None = None) -> int:
    paths = [Path(arg) for arg in (sys.argv[1:] if argv is None else argv)]
    if not paths:
        paths = sorted((Path(__file__).resolve().parent / "results").glob("*.json"))
    found = check(paths)
    for line in found:
        print(line, file=sys.stderr)
    print(f"{len(paths)} result files, {len(found)} problems")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
