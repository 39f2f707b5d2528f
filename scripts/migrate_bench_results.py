"""Bring result files written before ``bench/schema.py`` (version 1) to it, keeping every measured value; what a file
did not record is "unknown" (never a guess). Files already at version 1 are left as they are, so it can run again
when a branch brings an older file: ``python scripts/migrate_bench_results.py`` from the checkout, then
``python -m bench.schema``."""
import json
from pathlib import Path

RESULTS = Path("bench/results")
#: files written without a bench stamp, by the only bench that writes each
WRITTEN_BY = {"document_view": "bench.document_view", "long_inputs": "bench.long_inputs",
              "matrix_grid": "bench.matrix_grid", "modern_scale": "bench.modern_scale",
              "on_demand": "bench.on_demand", "thousand_heads": "bench.thousand_heads"}
U = "unknown"


def commit(stamp):
    if not stamp:
        return U
    sha, _, changes = stamp.partition("+")
    # the old stamp looked at tracked files only: untracked files, and how many tracked ones changed, are unknown
    return {"sha": sha, "dirty": True if changes else U, "changed": U if changes else 0, "untracked": U}


def migrate(path: Path) -> dict:
    old = json.loads(path.read_text(encoding="utf-8"))
    if old.get("schema") == 1:
        return old
    old = dict(old)
    bench = old.pop("bench", None)
    if not bench and path.stem not in WRITTEN_BY:
        raise SystemExit(f"{path}: no bench stamp, and no bench is known to write it: add it to WRITTEN_BY")
    bench = bench.replace("/", ".").removesuffix(".py") if bench else WRITTEN_BY[path.stem]
    machine = dict(old.pop("machine", None) or {}) or U
    before = old.pop("load_average_before", None)
    after = old.pop("load_average_after", None)
    during = old.pop("load_during", None)
    if during is None and "load_observed" in old:
        during = old.pop("load_observed")
    if machine != U:
        before = before or machine.pop("load_average_start", None) or machine.pop("load_average_before", None)
        after = after or machine.pop("load_average_end", None) or machine.pop("load_average_after", None)
    header = {"schema": 1, "bench": bench, "date": old.pop("date", None) or U, "machine": machine,
              "commit": commit(old.pop("commit", None)), "arguments": old.pop("arguments", None) or U, "smoke": False,
              "load": {"before": before or U, "during": during if during is not None else U, "after": after or U}}
    return {**header, "figures": old}


if __name__ == "__main__":
    for path in sorted(RESULTS.glob("*.json")):
        migrated = migrate(path)
        if migrated != json.loads(path.read_text(encoding="utf-8")):
            path.write_text(json.dumps(migrated, indent=1) + "\n", encoding="utf-8")
            print("migrated", path)
