"""``qkviz stats`` serially, on a local pool and on Dask: the same run, in one run of this script.

    python -m bench.dask_stats [--run runs/minilm] [--workers 2] [--rounds 2] [--no-syntax]
                               [--ways serial one-thread jobs dask] [--json bench/results/dask_stats.json]

Times ``qkviz -q stats [--syntax]`` end to end in a child process (as a user runs it: start-up of the pool or
of the ``LocalCluster`` included) four ways, in turn for ``--rounds`` rounds, each round starting one way further on, so that all meet the
same load: serially (numpy's BLAS using every core for the attention products), serially with one BLAS thread (a
worker's share), with ``--jobs W`` and with ``--dask local:W`` (one BLAS thread per worker); each into a fresh
copy of the run (without its layouts and results); ``--ways`` picks some of them. Each child's wall time and its
own peak memory (VmHWM; with ``--jobs``/``--dask`` the workers' memory is not in it) are recorded. The atlases
made are checked to be equal (tables, exemplars and every array), and the time of the spaCy parse made once by the
caller (``--syntax``) is measured apart. Everything is written to ``--json`` (default
``bench/results/dask_stats.json``) with the date, machine, load and arguments. Default run: ``runs/minilm``
(MiniLM over 5,000 tokens, as ``scripts/demo.sh`` makes it) if it exists, else one extracted here.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parent.parent

import qkviz  # noqa: E402
from qkviz.analysis import load_atlas  # noqa: E402
from qkviz.extraction import DEFAULT_CORPUS  # noqa: E402
from qkviz.store import RUN_DIRECTORIES  # noqa: E402
from bench.harness import Recorder, run_measured, smoke_arguments, summary  # noqa: E402
from bench.figures.results import Results, figure, seconds, source  # noqa: E402

DEFAULT_RUN = REPO / "runs" / "minilm"
QKVIZ = [sys.executable, "-m", "qkviz", "-q", "stats"]
#: the ways of --ways: serially, serially with one BLAS thread, on a local pool, on a Dask LocalCluster
WAYS = ("serial", "one-thread", "jobs", "dask")


def fresh_copy(run, directory: Path):
    shutil.copytree(run.path, directory, ignore=shutil.ignore_patterns(*RUN_DIRECTORIES, "correlation.parquet"))
    return qkviz.open_run(directory)


def timed_stats(source, directory: Path, options: list[str], env: dict[str, str]) -> tuple[dict, object]:
    """Wall seconds and own peak memory of ``qkviz stats`` with ``options`` (and environment variables ``env``) on a
    fresh copy of ``source``, and the atlas it stored."""
    run = fresh_copy(source, directory)
    done = run_measured([*QKVIZ, "--run", str(run.path), *options], env={**os.environ, "PYTHONPATH": str(REPO), **env})
    if done["returncode"]:
        raise SystemExit(f"qkviz stats {' '.join(options)} failed (exit status {done['returncode']})")
    return done, load_atlas(run)


def same_atlas(a, b) -> bool:
    try:
        pd.testing.assert_frame_equal(a.table, b.table, check_exact=True)
        pd.testing.assert_frame_equal(a.exemplars, b.exemplars, check_exact=True)
        for name in ("relative_position", "term_profiles", "update_histograms", "embedding_profiles"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    except AssertionError:
        return False
    return True


def parse_seconds(run) -> float:
    from qkviz.analysis import TokenSyntax, load_pipeline

    nlp = load_pipeline()
    started = time.perf_counter()
    TokenSyntax.parse(run, nlp)
    return time.perf_counter() - started


#: what the smoke test adds to ``--smoke`` (``{run}``: a copy of a tiny run, ``{model}``: a tiny model,
#: ``{corpus}``: a few sentences; ``bench.support.tiny_run``)
SMOKE_ARGUMENTS = ('--run', '{run}')


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, default=DEFAULT_RUN if DEFAULT_RUN.exists() else None)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2, help="alternating serial / pool / Dask rounds")
    parser.add_argument("--no-syntax", action="store_true", help="leave out --syntax (and spaCy)")
    parser.add_argument("--ways", nargs="+", choices=WAYS, default=list(WAYS), help="which ways (default: all four)")
    parser.add_argument("--json", type=Path, help="default: bench/results/dask_stats.json")
    parser.add_argument("--tokens", type=int, default=5000, help="tokens of the run extracted when --run is not given")
    args = smoke_arguments(parser, argv, out='json', workers=1, rounds=1, no_syntax=True)
    recorder = Recorder("dask_stats", vars(args), args.json)
    syntax = [] if args.no_syntax else ["--syntax"]
    one_thread = {name: "1" for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    every = {"serial": ("serial", [], {}), "one-thread": ("serial, one BLAS thread", [], one_thread),
             "jobs": (f"--jobs {args.workers}", ["--jobs", str(args.workers)], {}),
             "dask": (f"--dask local:{args.workers}", ["--dask", f"local:{args.workers}"], {})}
    ways = {every[way][0]: every[way][1:] for way in WAYS if way in args.ways}
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        source = (qkviz.open_run(args.run) if args.run
                  else qkviz.extract("minilm", DEFAULT_CORPUS, scratch / "minilm", max_tokens=args.tokens,
                                     head_update=True))
        print(f"{source.path}: {source.n_tokens} tokens, {source.n_layers * source.n_heads} heads, "
              f"{'with' if syntax else 'without'} --syntax; {os.cpu_count()} CPUs, load average "
              f"{os.getloadavg()[0]:.1f}", flush=True)
        parse = parse_seconds(source) if syntax else None
        if parse is not None:
            print(f"spaCy parse of the corpus (once, by the caller): {parse:.1f} s", flush=True)
        seconds: dict[str, list[float]] = {way: [] for way in ways}
        peaks: dict[str, list[float]] = {way: [] for way in ways}
        rounds = []
        first, equal = None, True
        for round_ in range(args.rounds):
            # the order turns from round to round (round 2 starts with the second way, ...), so that all meet the
            # same load and no way always runs first or last
            names = list(ways)
            order = names[round_ % len(names):] + names[:round_ % len(names)]
            walls = {}
            for way in order:
                number, (options, env) = names.index(way), ways[way]
                done, atlas = timed_stats(source, scratch / f"{round_}-{number}", options + syntax, env)
                seconds[way].append(done["seconds"])
                peaks[way].append(done["peak_mb"])
                walls[way] = round(done["seconds"], 2)
                first = atlas if first is None else first
                equal &= same_atlas(atlas, first)
                print(f"round {round_ + 1}: qkviz stats {way}: {done['seconds']:.1f} s, {done['peak_mb']:.0f} MB",
                      flush=True)
            rounds.append({"order": order, "seconds": walls, "load_after": round(os.getloadavg()[0], 2)})
        figures = {}
        serial = np.array(seconds["serial"]) if "serial" in seconds else None
        for way, walls in seconds.items():
            figures[way] = {"seconds": summary(walls, 2), "peak_mb": summary(peaks[way], 1)}
            if serial is not None:
                figures[way]["speed_up_over_serial"] = round(float(np.median(serial / np.array(walls))), 3)
            print(f"{way}: median {np.median(walls):.1f} s"
                  + (f"; speed-up over serial (median of the rounds' ratios) {figures[way]['speed_up_over_serial']:.2f}x"
                     if serial is not None else ""), flush=True)
        print(f"atlases equal: {equal}; load average now {os.getloadavg()[0]:.1f}", flush=True)
        print(recorder.write(tokens=source.n_tokens, heads=source.n_layers * source.n_heads,
                             syntax=bool(syntax), parse_s=None if parse is None else round(parse, 2),
                             ways=figures, rounds=rounds, atlases_equal=equal))


# The figure blocks drawn from this bench's result files: what the pages say from them (``python -m bench.figures``;
# each registered by name with ``@figure``, a goal judged by ``bench.figures.goals.verdict``).

@figure("dask-stats")
def dask_stats(results: Results) -> str:
    result = results("dask_stats")
    ways = list(result["ways"])
    header = "| round (order; load after) | " + " | ".join(f"`{way}`" if way.startswith("--") else way
                                                         for way in ways) + " |"
    rows = []
    for number, round_ in enumerate(result["rounds"], 1):
        serial = round_["seconds"].get("serial")
        cells = []
        for way in ways:
            wall = round_["seconds"][way]
            cells.append(seconds(wall) + (f" ({serial / wall:.2f}×)" if serial and way != "serial" else ""))
        order = " → ".join(round_["order"])
        rows.append(f"| {number} ({order}; {round_['load_after']:.1f}) | " + " | ".join(cells) + " |")
    summaries = []
    for way in ways:
        figures = result["ways"][way]
        line = f"{way} {seconds(figures['seconds']['median'])}"
        if "speed_up_over_serial" in figures and way != "serial":
            line += f" ({figures['speed_up_over_serial']:.2f}× serial's speed)"
        summaries.append(line + f", peak {figures['peak_mb']['max']:.0f} MB")
    equal = "equal to the bit in every round and every way" if result["atlases_equal"] else "**not** all equal"
    parse = (f" The spaCy parse made once by the caller took {seconds(result['parse_s'])} (after loading the "
             f"pipeline)." if result.get("parse_s") is not None else "")
    syntax = "`qkviz -q stats --syntax`" if result.get("syntax") else "`qkviz -q stats`"
    return (f"{syntax} on {result['heads']} heads, {result['tokens']:,} tokens; in brackets the speed-up over "
            f"serial in the same round:\n\n{header}\n|" + "---|" * (len(ways) + 1) + "\n" + "\n".join(rows) + "\n\n"
            f"Medians: {'; '.join(summaries)} (the command's own peak memory; with `--jobs` and `--dask` the workers' "
            f"is not in it). "
            f"The atlases were {equal}.{parse} "
            f"(`python -m bench.dask_stats`; {source(results, 'dask_stats')}.)\n")


if __name__ == "__main__":
    main()
