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
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
from pathlib import Path

from bench import schema
from bench.harness import Recorder

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

PARTS = ("commands", "long", "matrix", "document", "layouts")
#: the part's script and the results file it writes
SCRIPTS = {"matrix": ("matrix_grid.py", "matrix_grid.json"), "document": ("document_view.py", "document_view.json"),
           "long": ("long_inputs.py", "long_inputs.json"), "layouts": ("thousand_heads.py", "thousand_heads.json")}


def part_arguments(name: str, directory: Path) -> list[str]:
    """The part's script's arguments on this benchmark's own runs: ``commands``' run of the three documents
    (``<dir>/run``) and ``long``'s run of one 8,192-token document (``<dir>/long/run-whole-float32``)."""
    run, long_run = directory / "run", directory / "long" / "run-whole-float32"
    return {"matrix": ["--run", str(run)],
            "document": ["--run3k", str(run), "--run8k", str(long_run)],
            "long": ["--dir", str(directory / "long")],
            "layouts": ["--run", str(run), "--work", str(directory / "layouts")]}[name]
QKVIZ = [sys.executable, "-m", "qkviz", "-q"]


#: the commands part's steps, in order (``--steps`` runs some of them; the others keep their figures)
STEPS = ("extract", "project_pca", "stats", "related", "index", "report", "report_pages")


def commands(directory: Path, steps: tuple[str, ...] = STEPS) -> dict:
    """Every command on the 32 x 32-head run, timed with its peak memory; then the report's pages opened (the
    report written by the ``report`` step). A step that fails is recorded as failed and the next ones still run."""
    from bench.modern_model import make_documents, make_model
    from bench.scale import measured
    from transformers import AutoTokenizer

    model = make_model(directory / "model")
    documents = directory / "documents.txt"
    if not documents.exists():
        make_documents(documents, AutoTokenizer.from_pretrained(model))
    run, report = directory / "run", directory / "report"
    planned = {
        "extract": [*QKVIZ, "extract", "--model", str(model), "--corpus", str(documents), "--out", str(run),
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
        pages = subprocess.run([sys.executable, "-m", "bench.report_pages", "--report", str(report), "--only-reports"],
                               capture_output=True, text=True, cwd=REPO)
        figures["report_pages"] = (pages.stdout[-4000:] if pages.returncode == 0
                                   else f"failed: {pages.stderr[-2000:]}")
        print(figures["report_pages"], flush=True)
    return figures


def script_part(name: str, directory: Path) -> dict:
    """One part's own benchmark script, in a child process (:func:`part_arguments`); its results file read back."""
    script, results = SCRIPTS[name]
    before = _load()
    completed = subprocess.run([sys.executable, "-m", f"bench.{Path(script).stem}", *part_arguments(name, directory)],
                               capture_output=True, text=True, cwd=REPO)
    path = RESULTS / results
    return {"returncode": completed.returncode, "load_before": before, **_load(),
            "results": (schema.flat(json.loads(path.read_text())) if completed.returncode == 0 and path.exists()
                        else None),
            "stderr": completed.stderr[-2000:] if completed.returncode else ""}


def _load() -> dict:
    return {"load_average": [round(value, 2) for value in os.getloadavg()]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, default=Path("/tmp/qkviz-modern-scale"))
    parser.add_argument("--parts", default=",".join(PARTS))
    parser.add_argument("--json", type=Path, default=RESULTS / "modern_scale.json")
    parser.add_argument("--steps", default=",".join(STEPS), help="the commands part's steps to run")
    args = parser.parse_args()
    steps = tuple(step.strip() for step in args.steps.split(",") if step.strip())
    parts = [part.strip() for part in args.parts.split(",") if part.strip()]
    unknown = set(parts) - set(PARTS)
    if unknown:
        raise SystemExit(f"unknown parts {', '.join(sorted(unknown))}; choose from {', '.join(PARTS)}")
    args.dir.mkdir(parents=True, exist_ok=True)
    # parts run at different times keep theirs: each part run now replaces its own entry of the file's figures
    previous = json.loads(args.json.read_text()) if args.json.exists() else None
    results = {name: figures for name, figures in (previous or {}).get("figures", {}).items() if name in PARTS}
    recorder = Recorder("modern_scale", vars(args), args.json)
    for part in parts:
        started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        if part == "commands":    # the steps run now replace theirs; the others keep their figures and dates
            kept = {name: figures for name, figures in results.get("commands", {}).items() if name in STEPS}
            kept.update({name: {"date": started, **figures} if isinstance(figures, dict) else figures
                         for name, figures in commands(args.dir, steps).items()})
            results[part] = {"arguments": {"dir": str(args.dir)}, **kept}
        else:
            results[part] = {"date": started, "arguments": {"dir": str(args.dir)}, **script_part(part, args.dir)}
        recorder.write(**results)     # after each part: a long run keeps what it measured

if __name__ == "__main__":
    main()
