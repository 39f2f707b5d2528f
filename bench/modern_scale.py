"""qkviz on a modern model's head grid and long documents (issue 28): every figure, in one run.

    python -m bench.modern_scale [--dir /tmp/qkviz-modern-scale] [--parts commands,long,matrix,document,layouts]
                                 [--json bench/results/modern_scale.json]

The subject is ``bench.modern_model``'s: a random Llama-shaped decoder of 32 layers x 32 query heads over 8
key-value heads (head size 8, context 8,192) over three documents of about 3,000 tokens (9,123 tokens; the last
repeats a passage). Parts (``--parts``):

* ``commands`` -- each ``qkviz`` command on that run in a child process, its wall time and the peak of its process
  tree's resident memory (``bench.scale``'s ``measured``): ``extract``, ``project --method pca`` (the first
  picture), ``stats --jobs 2``, ``related``, ``index``, ``report``; then the report's pages opened in Chromium
  (``bench.report_pages``; goal: each in <= 3 s);
* ``long`` -- ``bench.long_inputs``: extracting one 8,192-token document, peak memory beyond the weights (goal:
  <= 2 GB); its run is the document part's 8,192-token document;
* ``matrix`` -- ``bench.matrix_grid``: page load to the drawn 1,024-head matrix, and the grid's share of a
  1400 x 900 window for 6 x 12, 12 x 12, 30 x 9 and 32 x 32 grids (goals: <= 3 s; >= 60 % x 55 %);
* ``document`` -- ``bench.document_view``: the document view's whole map of a 3,000-token document on screen
  after the click, and a head switch at 8,192 tokens (goals: <= 5 s; <= 2 s);
* ``layouts`` -- ``bench.thousand_heads``: every head's default layouts (``qkviz project --jobs 2``) and
  partner recall on 16 seeded random heads against full fits (goals: <= 30 min; >= 0.9x).

Each part writes its own ``bench/results/<name>.json`` too; this script gathers them into ``--json``, each part
under its name with its date, its arguments and the load average before and after it (a shared machine's figures
say so). A part run again replaces only its own entry, so parts may be run one at a time.

``--smoke``: the parts of :data:`SMOKE_PARTS` (every step of ``commands``) on a model of 2 layers x 4 query heads
over 2 key-value heads and two documents of about 100 tokens, in ``--dir`` (a temporary directory by default); each
part's script runs with its own ``--smoke`` and writes its result beside the runs (``<dir>/results``), never into
``bench/results``; the gathered result goes to a temporary file.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
from pathlib import Path

import tempfile

from bench import schema
from bench.figures.goals import Goal
from bench.harness import SMOKE_OUT, Recorder, smoke_arguments

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

PARTS = ("commands", "long", "matrix", "document", "layouts")
#: the parts a smoke run takes: this script's own steps, and two parts' scripts, the second on the first's run (the
#: matrix and layouts parts are their scripts alone, each smoke-run by itself)
SMOKE_PARTS = ("commands", "long", "document")
#: the part's script and the results file it writes
SCRIPTS = {"matrix": ("matrix_grid.py", "matrix_grid.json"), "document": ("document_view.py", "document_view.json"),
           "long": ("long_inputs.py", "long_inputs.json"), "layouts": ("thousand_heads.py", "thousand_heads.json")}


def part_arguments(name: str, directory: Path, smoke: bool = False) -> list[str]:
    """The part's script's arguments on this benchmark's own runs: ``commands``' run of the three documents
    (``<dir>/run``) and ``long``'s run of one 8,192-token document (``<dir>/long/run-whole-float32``); in a smoke
    run, ``--smoke`` too, and the matrix's fill measured on the run alone (no grid built)."""
    run, long_run = directory / "run", directory / "long" / "run-whole-float32"
    arguments = {"matrix": ["--run", str(run), *(["--grid-run", str(run)] if smoke else [])],
                 "document": ["--run3k", str(run), "--run8k", str(long_run)],
                 "long": ["--dir", str(directory / "long")],
                 "layouts": ["--run", str(run), "--work", str(directory / "layouts")]}[name]
    return [*arguments, "--smoke"] if smoke else arguments
QKVIZ = [sys.executable, "-m", "qkviz", "-q"]
#: issue 39's goal for the head atlas of a 1,024-head model (the commands part's ``stats`` step)
STATS_1024 = Goal("`qkviz stats --jobs 2` on a 1,024-head model over 9,123 tokens", 10, "min", True, "modern_scale",
                  "wall time", lambda found: found["commands"]["stats"]["seconds"] / 60)


#: the commands part's steps, in order (``--steps`` runs some of them; the others keep their figures)
STEPS = ("extract", "project_pca", "stats", "related", "index", "report", "report_pages")


#: the smoke run's model (``bench.modern_model.make_model``'s keywords) and documents (``make_documents``')
SMOKE_SHAPE = {"layers": 2, "heads": 4, "kv_heads": 2, "context": 512}
SMOKE_DOCUMENTS = {"documents": 2, "document_tokens": 100}


def commands(directory: Path, steps: tuple[str, ...] = STEPS, smoke: bool = False) -> dict:
    """Every command on the 32 x 32-head run, timed with its peak memory; then the report's pages opened (the
    report written by the ``report`` step). A step that fails is recorded as failed and the next ones still run.
    ``smoke``: the model of :data:`SMOKE_SHAPE` over :data:`SMOKE_DOCUMENTS`, each page opened once."""
    from bench.modern_model import make_documents, make_model
    from bench.scale import measured
    from transformers import AutoTokenizer

    model = make_model(directory / "model", **(SMOKE_SHAPE if smoke else {}))
    corpus = directory / "documents.txt"
    if not corpus.exists():
        make_documents(corpus, AutoTokenizer.from_pretrained(model), **(SMOKE_DOCUMENTS if smoke else {}))
    run, report = directory / "run", directory / "report"
    planned = {
        "extract": [*QKVIZ, "extract", "--model", str(model), "--corpus", str(corpus), "--out", str(run),
                    "--overwrite"],
        "project_pca": [*QKVIZ, "project", "--run", str(run), "--method", "pca"],
        "stats": [*QKVIZ, "stats", "--run", str(run), "--jobs", "2"],
        "related": [*QKVIZ, "related", "--run", str(run)],
        "index": [*QKVIZ, "index", "--run", str(run)],
        "report": [*QKVIZ, "report", "--run", str(run), "--out", str(report), "--overwrite"],
    }
    figures = {}
    for name in (step for step in steps if step in planned):
        try:
            figures[name] = {**measured(planned[name]), **_load()}
        except SystemExit as failure:
            figures[name] = {"failed": str(failure)[-2000:], **_load()}
            print(f"{name:>12}: failed", flush=True)
            continue
        print(f"{name:>12}: {figures[name]['seconds']:8.1f} s  peak {figures[name]['peak_gb']:.2f} GB", flush=True)
    if "report_pages" in steps:
        pages = subprocess.run([sys.executable, "-m", "bench.report_pages", "--report", str(report), "--only-reports",
                                *(["--repeats", "1"] if smoke else [])],
                               capture_output=True, text=True, cwd=REPO)
        figures["report_pages"] = (pages.stdout[-4000:] if pages.returncode == 0
                                   else f"failed: {pages.stderr[-2000:]}")
        print(figures["report_pages"], flush=True)
    return figures


def script_part(name: str, directory: Path, smoke: bool = False) -> dict:
    """One part's own benchmark script, in a child process (:func:`part_arguments`); its results file read back
    (in a smoke run, from ``<dir>/results``)."""
    script, results = SCRIPTS[name]
    path = directory / "results" / results if smoke else RESULTS / results
    before = _load()
    completed = subprocess.run([sys.executable, "-m", f"bench.{Path(script).stem}",
                                *part_arguments(name, directory, smoke)], capture_output=True, text=True, cwd=REPO,
                               env=dict(os.environ, **{SMOKE_OUT: str(path)}) if smoke else None)
    return {"returncode": completed.returncode, "load_before": before, **_load(),
            "results": (schema.flat(json.loads(path.read_text())) if completed.returncode == 0 and path.exists()
                        else None),
            "stderr": completed.stderr[-2000:] if completed.returncode else ""}


def _load() -> dict:
    return {"load_average": [round(value, 2) for value in os.getloadavg()]}


#: what the smoke test adds to ``--smoke`` (``{tmp}``: the test's temporary directory)
SMOKE_ARGUMENTS = ("--dir", "{tmp}/modern-scale")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, help="where the model, the runs and the report are made (default "
                        "/tmp/qkviz-modern-scale; with --smoke, a temporary directory)")
    parser.add_argument("--parts", default=",".join(PARTS))
    parser.add_argument("--json", type=Path, help="default bench/results/modern_scale.json")
    parser.add_argument("--steps", default=",".join(STEPS), help="the commands part's steps to run")
    args = smoke_arguments(parser, argv, out="json", parts=",".join(SMOKE_PARTS))
    args.dir = args.dir or (Path(tempfile.mkdtemp(prefix="qkviz-modern-scale-")) if args.smoke
                            else Path("/tmp/qkviz-modern-scale"))
    steps = tuple(step.strip() for step in args.steps.split(",") if step.strip())
    parts = [part.strip() for part in args.parts.split(",") if part.strip()]
    unknown = set(parts) - set(PARTS)
    if unknown:
        raise SystemExit(f"unknown parts {', '.join(sorted(unknown))}; choose from {', '.join(PARTS)}")
    args.dir.mkdir(parents=True, exist_ok=True)
    # parts run at different times keep theirs: each part run now replaces its own entry of the file's figures
    out = args.json or RESULTS / "modern_scale.json"
    previous = json.loads(out.read_text()) if out.exists() else None
    results = {name: figures for name, figures in (previous or {}).get("figures", {}).items() if name in PARTS}
    recorder = Recorder("modern_scale", vars(args), args.json)
    for part in parts:
        started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        if part == "commands":    # the steps run now replace theirs; the others keep their figures and dates
            kept = {name: figures for name, figures in results.get("commands", {}).items() if name in STEPS}
            kept.update({name: {"date": started, **figures} if isinstance(figures, dict) else figures
                         for name, figures in commands(args.dir, steps, args.smoke).items()})
            results[part] = {"arguments": {"dir": str(args.dir)}, **kept}
        else:
            results[part] = {"date": started, "arguments": {"dir": str(args.dir)}, **script_part(part, args.dir, args.smoke)}
        written = recorder.write(**results)     # after each part: a long run keeps what it measured
        print(f"{part}: written to {written}", flush=True)

if __name__ == "__main__":
    main()
