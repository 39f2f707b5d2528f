"""``qkviz stats`` with no options on a 1,024-head model (issue 53): does the head atlas finish in ten minutes with the
defaults a user gets, the cores of the machine used without ``--jobs``?

    python -m bench.atlas_defaults [--run RUN] [--dir /tmp/qkviz-modern-scale] [--repeats 1] [--out ...]

The subject is ``bench.modern_scale``'s run: a random Llama-shaped decoder of 32 layers x 32 query heads over three
documents of about 3,000 tokens (9,123 tokens), made in ``--dir`` (``bench.modern_model``'s model, then ``qkviz
extract``) unless ``--run`` names one. Each repeat runs ``qkviz -q stats --run RUN`` -- no other option -- in a child
process and records its wall time, the CPU time of its process tree (its own and its worker processes', from the
kernel's accounting of the children it waited for), the peak of the tree's summed resident memory, and the load
average before and after it (the harness samples it during, every 15 s). The goal: <= 10 min of wall time on the
project's 2-core machine; the verdict is on the median of the latest run's repeats, every repeat is kept, and every
earlier run of the file replaced too (``earlier_runs``, listed on the page).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.figures.goals import Goal, verdict
from bench.figures.results import Results, figure, minutes, source, span
from bench.harness import Recorder, kept_runs, load_span, smoke_arguments, summary

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
QKVIZ = [sys.executable, "-m", "qkviz", "-q"]

#: issue 53's goal for the head atlas of a 1,024-head model, with no options
STATS_DEFAULTS = Goal("`qkviz stats` with no options on a 1,024-head model over 9,123 tokens", 10, "min", True,
                      "atlas_defaults", "wall time, median",
                      lambda found: found["seconds"]["median"] / 60)


def make_run(directory: Path) -> Path:
    """``bench.modern_model``'s 32 x 32-head model over its three documents, extracted into ``<dir>/run`` (each kept
    where it is already there)."""
    from transformers import AutoTokenizer

    from bench.modern_model import make_documents, make_model

    model, corpus, run = make_model(directory / "model"), directory / "documents.txt", directory / "run"
    if not corpus.exists():
        make_documents(corpus, AutoTokenizer.from_pretrained(model))
    if not (run / "manifest.json").exists():
        subprocess.run([*QKVIZ, "extract", "--model", str(model), "--corpus", str(corpus), "--out", str(run),
                        "--overwrite"], check=True)
    return run


def measured_tree(command: list[str], every: float = 0.2) -> dict:
    """Run ``command`` to its end: wall seconds, CPU seconds of its process tree (user + system of the child and of
    every descendant it waited for: ``os.wait4``'s accounting), the peak of the tree's summed resident memory (GB)
    and the most processes seen at once."""
    import psutil

    errors = tempfile.TemporaryFile("w+")         # a file, not a pipe: a chatty child never blocks on it
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=errors, text=True)
    parent, peak, most = psutil.Process(process.pid), 0, 1
    status = None
    while status is None:
        try:
            tree = [parent, *parent.children(recursive=True)]
            peak = max(peak, sum(member.memory_info().rss for member in tree if member.is_running()))
            most = max(most, len(tree))
        except psutil.Error:
            pass
        ended, code, usage = os.wait4(process.pid, os.WNOHANG)
        if ended:
            status = process.returncode = os.waitstatus_to_exitcode(code)
        else:
            time.sleep(every)
    seconds = time.perf_counter() - started
    if status:
        errors.seek(0)
        raise SystemExit(f"{' '.join(command)} failed ({status}): {errors.read()[-2000:]}")
    return {"seconds": round(seconds, 1), "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 1),
            "peak_gb": round(peak / 2 ** 30, 2), "processes": most}


def load() -> list[float]:
    return [round(value, 2) for value in os.getloadavg()]


#: what the smoke test adds to ``--smoke`` (``{run}``: a copy of a tiny run)
SMOKE_ARGUMENTS = ("--run", "{run}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, help="the run to compute the atlas of (default: <dir>/run, made there)")
    parser.add_argument("--dir", type=Path, default=Path("/tmp/qkviz-modern-scale"))
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--out", type=Path, help="default bench/results/atlas_defaults.json")
    args = smoke_arguments(parser, argv, repeats=1)
    run = args.run or make_run(args.dir)
    recorder = Recorder("atlas_defaults", vars(args), args.out)
    from qkviz import open_run

    opened = open_run(run)
    repeats = []
    for number in range(args.repeats):
        before = load()
        timed = measured_tree([*QKVIZ, "stats", "--run", str(run)])
        repeats.append({**timed, "load_before": before, "load_after": load()})
        print(f"repeat {number + 1}: {timed['seconds']:.1f} s wall, {timed['cpu_seconds']:.1f} s CPU, peak "
              f"{timed['peak_gb']:.2f} GB, {timed['processes']} processes, load {before[0]} -> {load()[0]}", flush=True)
    written = recorder.write(
        earlier_runs=kept_runs(recorder.out, run_summary), run=str(run),
        heads=opened.n_layers * opened.n_heads, tokens=opened.n_tokens, cores=len(os.sched_getaffinity(0)),
        command="qkviz -q stats --run RUN", repeats=repeats,
        seconds=summary([row["seconds"] for row in repeats], 1),
        cpu_seconds=summary([row["cpu_seconds"] for row in repeats], 1),
        peak_gb=max(row["peak_gb"] for row in repeats))
    print(f"wrote {written}")


def run_summary(result: dict) -> dict:
    """One run of this bench as ``earlier_runs`` keeps it: its date, load, wall and CPU times, peak memory."""
    figures, load = result["figures"], result.get("load", {})
    return {"date": result["date"], "load_average": load_span(load),
            "seconds": figures["seconds"], "cpu_seconds": figures["cpu_seconds"], "peak_gb": figures["peak_gb"]}


@figure("atlas-defaults")
def atlas_defaults(results: Results) -> str:
    found = results("atlas_defaults")
    rows = found["repeats"]
    runs = ("one run" if len(rows) == 1 else f"min / median / max of {len(rows)}: {span(found['seconds'], 0)}; "
            f"every run: {', '.join(minutes(row['seconds']) for row in rows)}")
    return (f"`qkviz stats --run RUN` with no other option on the {found['heads']:,}-head model over "
            f"{found['tokens']:,} tokens, on {found['cores']} cores: {minutes(found['seconds']['median'])} wall "
            f"({runs}), {minutes(found['cpu_seconds']['median'])} of CPU over its process tree, peak "
            f"{found['peak_gb']:.2f} GB; goal {verdict(STATS_DEFAULTS, results)}. `python -m bench.atlas_defaults` "
            f"({source(results, 'atlas_defaults')}).{earlier(found.get('earlier_runs', []))}\n")


def earlier(runs: list[dict]) -> str:
    if not runs:
        return ""
    return (" Earlier runs, every one kept (the goal judges the latest): " + "; ".join(
        f"{run['date'][:10]} (load {run['load_average']['min']:.1f}–{run['load_average']['max']:.1f}): "
        f"{minutes(run['seconds']['median'])} wall, {minutes(run['cpu_seconds']['median'])} of CPU, peak "
        f"{run['peak_gb']:.2f} GB" for run in runs) + ".")


if __name__ == "__main__":
    main()
