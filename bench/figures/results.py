"""Reading bench result files for the figure blocks (``python -m bench.figures``): the files themselves, where and
under what load each was measured, the registry of block renderers (``@figure("name")``, used beside each bench),
and the wording the blocks of several benches share (seconds, spans, ratios, model, run and head names)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from bench import schema


class Results:
    """The bench result files under ``root``/bench/results, read once each (as :func:`bench.schema.flat` gives them:
    the figures with the header's date, machine and arguments beside them); which ones a block read."""

    def __init__(self, root: Path):
        self.root, self.cache, self.records, self.read = root, {}, {}, []

    def exists(self, name: str) -> bool:
        return (self.root / "bench" / "results" / f"{name}.json").exists()

    def record(self, name: str) -> dict:
        """The whole result file, header and figures, as the schema has it."""
        if name not in self.records:
            path = self.root / "bench" / "results" / f"{name}.json"
            if not path.exists():
                raise SystemExit(f"{path.relative_to(self.root)} is missing: run the bench that writes it "
                                 "(python -m bench.NAME --help)")
            record = json.loads(path.read_text(encoding="utf-8"))
            wrong = schema.problems(record)
            if wrong:
                raise SystemExit(f"{path.relative_to(self.root)} does not follow bench/schema.py: {'; '.join(wrong)}")
            self.records[name] = record
        return self.records[name]

    def __call__(self, name: str) -> dict:
        if name not in self.cache:
            self.cache[name] = schema.flat(self.record(name))
        if name not in self.read:
            self.read.append(name)
        return self.cache[name]


def load_average(record: dict) -> tuple[float, float] | None:
    """The lowest and highest 1-minute load average of a result: its header's before, during and after, and any
    load its figures recorded for a step of their own."""
    found: list[float] = []
    load = record["load"] if isinstance(record.get("load"), dict) else {}
    for name in ("before", "after"):
        if isinstance(load.get(name), list) and load[name]:
            found.append(load[name][0])
    if isinstance(load.get("during"), list):
        found.extend(load["during"])

    def walk(value, key=""):
        if isinstance(value, dict):
            for name, item in value.items():
                walk(item, name)
        elif isinstance(value, list) and "load" in key and value and all(isinstance(v, (int, float)) for v in value):
            # os.getloadavg()'s three: the 1-minute one; a series sampled during the step: all of it
            found.extend(value if key in ("load_during", "load_observed") or len(value) != 3 else value[:1])
        elif isinstance(value, list):
            for item in value:
                walk(item, key)
    walk(record["figures"])
    return (min(found), max(found)) if found else None


def source(results: Results, *names: str) -> str:
    """``bench/results/a.json`` (date, load L on N cores) for each result file a block read."""
    parts = []
    for name in names:
        result, record = results(name), results.record(name)
        date = str(result["date"] if result["date"] != schema.UNKNOWN else
                   next((v.get("date") for v in result.values() if isinstance(v, dict) and v.get("date")), "undated"))[:10]
        cpus = result["machine"].get("cpus") if isinstance(result["machine"], dict) else None
        load = load_average(record)
        where = f"load {load[0]:.1f}–{load[1]:.1f}" if load else "load not recorded"
        where += f" of {cpus} cores" if cpus else ""
        note = f" ({result['load_note']})" if result.get("load_note") else ""
        if load and cpus and load[1] > cpus:
            note += " (shared: slower than idle)"
        parts.append(f"`bench/results/{name}.json`, {date}, {where}{note}")
    return "; ".join(parts)


#: the bundled models as the pages name them, by the key a result file gives (a run's directory name or the model)
BUNDLED = {"minilm": "MiniLM", "smollm2": "SmolLM2", "gemma3": "Gemma 3 270M"}


def model_name(key: str) -> str:
    """A bundled model's name on the pages (any other key as it is)."""
    return BUNDLED.get(key, key)


def span(values: dict, digits: int = 1, unit: str = " s", scale: float = 1.0) -> str:
    """``min / median / max`` of a ``bench.harness.summary``, each divided by ``scale``."""
    return " / ".join(f"{values[key] / scale:,.{digits}f}" for key in ("min", "median", "max")) + unit


FIGURES: dict[str, Callable[[Results], str]] = {}


def figure(name: str):
    def register(render):
        FIGURES[name] = render
        return render
    return register


def minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.1f} s"


def seconds(value: float) -> str:
    return "< 0.1 s" if value < 0.05 else minutes(value)

#: below this many seconds (both sides) a time is the clock's noise, and a ratio of two of them means nothing
NOISE_S = 0.2

def ratio(theirs: float, ours: float) -> str:
    """How many times ``ours`` fits in ``theirs``; a dash where both are too short to compare."""
    if (theirs < NOISE_S and ours < NOISE_S) or not ours:
        return "–"
    return f"{theirs / ours:.1f}×"

def heads_named(pairs) -> str:
    """``L0 H0–H11, L3 H4``: a layer's consecutive heads as one range, in the order given."""
    runs: list[list[int]] = []           # [layer, first head, last head]
    for layer, head in pairs:
        if runs and runs[-1][0] == layer and runs[-1][2] == head - 1:
            runs[-1][2] = head
        else:
            runs.append([layer, head, head])
    return ", ".join(f"L{layer} H{first}" + (f"–H{last}" if last > first else "") for layer, first, last in runs)

def run_name(row: dict) -> str:
    """The bundled model a row's run is of (its model, or a bundled key in its directory's name), else the name."""
    if row.get("model") in BUNDLED:
        return BUNDLED[row["model"]]
    return next((name for key, name in BUNDLED.items() if key in row["run"].split("-")), row["run"])
