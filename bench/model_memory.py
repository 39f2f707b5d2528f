"""The server's resident memory with two real models against its model memory budget:
``python -m bench.model_memory [--runs A B] [--tokens 300] [--rounds 2] [--out bench/results/model_memory.json]``.

Without ``--runs`` it extracts the bundled MiniLM and SmolLM2 over the first ``--tokens`` tokens of the bundled
corpus. Each scenario runs in a fresh child process doing what the server does for the why panel: the runs opened as
the app opens them, the budget set as ``qkviz serve`` sets it, and a pair of each run explained in turn through the
panel's own function (``--rounds`` times, alternating the runs), the model loaded into the process's model memory
on first use. After each explanation it records the process's resident memory (VmRSS), its peak (VmHWM), the models
held, the bytes they hold and the budget. Scenarios:

* ``default``: ``qkviz serve``'s default budget, twice the largest of the runs' models: both stay loaded;
* ``one model``: a budget of 1.05 times the largest model (``--model-memory``), less than both together: each
  switch drops the other model.

Freed memory goes back to the allocator, not always to the system, so the resident memory after a drop says what
the system sees; the held bytes say what qkviz keeps.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.figures.results import Results, figure, source
from bench.harness import Recorder, smoke_arguments

REPO = Path(__file__).resolve().parent.parent
MODELS = ("minilm", "smollm2")
#: what the smoke test adds to ``--smoke``
SMOKE_ARGUMENTS = ("--runs", "{run}")


def _status_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _explain_once(data) -> None:
    from dash_app.panels import why

    run = data.run
    rows = run.sentence_tokens(0)
    subject = why.Subject("pair", 0, run.n_layers - 1, 0, (rows.stop - 1,), (rows.start + 1,))
    why.explain(data, subject)


def child(paths: list[Path], budget_factor: float | None, rounds: int) -> list[dict]:
    """One scenario in this process (see the module): a row per explanation."""
    import qkviz
    from dash_app.data.run_data import RunData
    from dash_app.server import _model_budget
    from qkviz.probes import served_model_memory

    runs = [RunData(qkviz.open_run(path), path.name) for path in paths]
    served = served_model_memory([data.run for data in runs])
    chosen = None if budget_factor is None or served is None else int(budget_factor * served / 2)
    _model_budget(runs, chosen)
    rows = [_row("opened")]
    for round_ in range(rounds):
        for data in runs if round_ % 2 == 0 else runs[::-1]:
            _explain_once(data)
            rows.append(_row(f"explained {data.name}"))
    return rows


def _row(step: str) -> dict:
    from qkviz.probes import model_memory_state

    state = model_memory_state()
    return {"step": step, "rss_mb": _status_mb("VmRSS"), "peak_mb": _status_mb("VmHWM"),
            "held": [Path(str(key[0])).name for key in state["held"]], "held_mb": state["used"] / 2**20,
            "budget_mb": (state["budget"] or 0) / 2**20}


def make_runs(scratch: Path, tokens: int) -> list[Path]:
    paths = []
    for model in MODELS:
        path = scratch / model
        subprocess.run([sys.executable, "-m", "qkviz", "-q", "extract", "--model", model, "--out", str(path),
                        "--max-tokens", str(tokens)], check=True)
        paths.append(path)
    return paths


def scenario(paths: list[Path], budget_factor: float | None, rounds: int) -> list[dict]:
    command = [sys.executable, "-m", "bench.model_memory", "--child", "--rounds", str(rounds),
               "--runs", *map(str, paths)]
    if budget_factor is not None:
        command += ["--budget-factor", str(budget_factor)]
    done = subprocess.run(command, check=True, capture_output=True, text=True, cwd=REPO)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=Path, nargs="+", help="runs to serve (default: MiniLM and SmolLM2, extracted)")
    parser.add_argument("--tokens", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None, help="default bench/results/model_memory.json")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--budget-factor", type=float, default=None, help=argparse.SUPPRESS)
    args = smoke_arguments(parser, argv, out="out", rounds=1)
    if args.child:
        print(json.dumps(child(args.runs, args.budget_factor, args.rounds)))
        return
    recorder = Recorder("model_memory", vars(args), args.out)
    with tempfile.TemporaryDirectory(prefix="qkviz-model-memory-") as scratch:
        paths = args.runs or make_runs(Path(scratch), args.tokens)
        scenarios = {"default": scenario(paths, None, args.rounds),
                     "one model": scenario(paths, 1.05, args.rounds)}
    for name, rows in scenarios.items():
        print(name)
        for row in rows:
            print(f"  {row['step']:<22} RSS {row['rss_mb']:8.0f} MB  peak {row['peak_mb']:8.0f} MB  held "
                  f"{row['held_mb']:7.0f} MB of {row['budget_mb']:7.0f} MB: {', '.join(row['held']) or '-'}")
    print(f"wrote {recorder.write(runs=[str(path) for path in paths], scenarios=scenarios)}")


# -- figure block (``python -m bench.figures``) ----------------------------------------------------------------------

@figure("model-memory")
def model_memory(results: Results) -> str:
    found = results("model_memory")
    lines = ["| scenario | step | resident (VmRSS) | peak (VmHWM) | models held | held by qkviz | budget |",
             "|---|---|---|---|---|---|---|"]
    for name, rows in found["scenarios"].items():
        for row in rows:
            lines.append(f"| {name} | {row['step']} | {row['rss_mb']:,.0f} MB | {row['peak_mb']:,.0f} MB | "
                         f"{', '.join(row['held']) or '–'} | {row['held_mb']:,.0f} MB | {row['budget_mb']:,.0f} MB |")
    return "\n".join(lines) + f"\n\n(`bench/model_memory.py`, {source(results, 'model_memory')}.)\n"


if __name__ == "__main__":
    main()
