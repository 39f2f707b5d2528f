"""Layouts for a thousand heads: ``python -m bench.thousand_heads --run RUN [--layers 0-1] [--minilm RUN]``.

Issue 28, point 4: all 1,024 heads' default layouts (PCA 2D and 3D, attn-tsne 2D: what ``qkviz project --jobs 2``
makes) of a 32 x 32-head model at about 8,000 tokens in at most 30 minutes on the 2-core machine, keeping at least
0.9x the partner recall of a full fit on a seeded random sample of 16 heads.

* **Timing.** ``RUN`` (a run of ``bench.modern_model``'s model, e.g. ``/tmp/qkviz-modern/run``) is copied
  without its layouts into ``--work``, and ``qkviz project --run COPY --jobs 2`` runs on it in a child process
  (``--layers`` / ``--heads`` for a subset, extrapolated to every head). Recorded: its wall time, the CPU seconds of
  its whole process tree (so that a loaded machine's wall time can be told from the work itself: CPU / jobs is the
  wall time on an idle machine), the load average before, during (sampled every 10 s) and after, and its last log
  lines (the progress estimate).
* **Quality**, on ``--sample`` heads drawn at random (seed ``--seed``) from the whole grid: each head's default
  attn-tsne layout (made by ``qkviz.project`` in this process, on another copy: the layouts are seeded, so the
  same as the timed run's) against a **full fit**: attn-tsne as it was before this change, every token fitted (``sample`` 0), the
  exact attention graph, 125 + 125 iterations on openTSNE's FFT grid (:data:`FULL_FIT`), made by
  ``qkviz.project`` too. Partner recall@10 (mean of query->key and key->query, over ``--recall-points`` seeded
  queries and as many keys, exact and tie-aware: :mod:`qkviz.neighbours.partner_recall`) and trustworthiness
  (k = 10 on 3,000 seeded points, against the aligned points) for both, and the ratio of the mean recalls.
* ``--minilm RUN`` does the same quality comparison on MiniLM's heads of ``docs/methods.md``'s table (the bundled
  model's figures must not fall): ``qkviz extract --model minilm --out RUN --max-tokens 5000``.

Writes ``--json`` (``bench/results/thousand_heads.json``) with the date, the machine and the arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parent.parent
warnings.filterwarnings("ignore")

import qkviz  # noqa: E402

from bench.harness import Recorder, smoke_arguments  # noqa: E402
from qkviz.core import align_head  # noqa: E402
from qkviz.neighbours import layout_recall, partner_sample  # noqa: E402
from qkviz.projection import LAYOUT_METHOD  # noqa: E402
from qkviz.store import CACHE_DIRECTORY  # noqa: E402
from bench.figures.goals import Goal, verdict  # noqa: E402
from bench.figures.results import Results, figure, minutes, source  # noqa: E402

#: attn-tsne as it was before issue 28's point 4: every token fitted, the exact graph, 125 + 125 iterations on
#: openTSNE's FFT grid (min_num_intervals 50, ints_in_interval 1)
FULL_FIT = {"sample": 0, "exact_search": 10 ** 9, "early_exaggeration_iter": 125, "n_iter": 125,
            "fft_min_cells": 50, "fft_cell_width": 1.0}
#: MiniLM's heads of docs/methods.md's table (bench/faithful.py's sinks, hardest and ordinary heads)
MINILM_HEADS = ((4, 5), (1, 11), (2, 9), (5, 0), (1, 10), (4, 2), (1, 5), (5, 8))
TRUST_POINTS = 3000


def parse_range(text: str | None, size: int) -> list[int]:
    if not text:
        return list(range(size))
    chosen: list[int] = []
    for part in text.split(","):
        first, _, last = part.partition("-")
        chosen += list(range(int(first), int(last or first) + 1))
    return chosen


def copy_run(source: Path, work: Path) -> Path:
    """A copy of the run without its layouts (the source may be read-only)."""
    target = work / "run"
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target, ignore=shutil.ignore_patterns(CACHE_DIRECTORY, ".*.lock", "*.lock"))
    return target


class LoadSampler:
    """The 1-minute load average every ``every`` seconds while the block runs."""

    def __init__(self, every: float = 10.0):
        self.every, self.samples, self._stop = every, [], threading.Event()

    def __enter__(self) -> "LoadSampler":
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self.thread.join()

    def _sample(self) -> None:
        while not self._stop.wait(self.every):
            self.samples.append(round(os.getloadavg()[0], 2))


def time_project(run_path: Path, jobs: int, layers: str | None, heads: str | None) -> dict:
    """``qkviz project --jobs N`` (the default methods and dimensions) in a child process: wall and CPU seconds."""
    command = [sys.executable, "-c", "import sys; from qkviz.cli import main; sys.exit(main())", "project",
               "--run", str(run_path), "--jobs", str(jobs)]
    command += ["--layers", layers] if layers else []
    command += ["--heads", heads] if heads else []
    env = {**os.environ, "PYTHONPATH": str(REPO), "TOKENIZERS_PARALLELISM": "false"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load_before = os.getloadavg()
    started = time.perf_counter()
    with LoadSampler() as load:
        finished = subprocess.run(command, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if finished.returncode:
        raise SystemExit(f"qkviz project failed:\n{finished.stderr[-3000:]}")
    # a log line may follow the progress bar on its line: keep what starts at "qkviz:"
    log = [line[line.index("qkviz:"):] for line in finished.stderr.replace("\r", "\n").splitlines() if "qkviz:" in line]
    return {"command": " ".join(command[3:]), "wall_s": round(wall, 1),
            "cpu_s": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 1),
            "load_before": [round(x, 2) for x in load_before], "load_during": load.samples,
            "load_after": [round(x, 2) for x in os.getloadavg()], "log": log[-6:]}


def cpu_project(run, layer: int, head: int, params: dict | None) -> float:
    """CPU seconds of one head's attn-tsne 2D layout made by ``qkviz.project`` in this process (0 if cached)."""
    started = time.process_time()
    qkviz.project(run, [LAYOUT_METHOD], [2], layers=[layer], heads=[head], progress=False,
                  params={LAYOUT_METHOD: params} if params else None)
    return time.process_time() - started


def compare_heads(run, heads, recall_points: int, seed: int) -> list[dict]:
    """Per head: the default layout's and the full fit's partner recall@10, trustworthiness and CPU seconds."""
    import faiss  # noqa: F401 -- imported before anything is timed
    import openTSNE  # noqa: F401
    from sklearn.manifold import trustworthiness

    rows = []
    for layer, head in heads:
        queries, keys = run.queries(layer, head), run.keys(layer, head)
        points = align_head(queries, keys).points.astype(np.float32)
        sample = partner_sample(queries, keys, run.logit_rule(layer, head), 10, recall_points, seed)
        trust_points = np.random.default_rng(seed).choice(len(points), min(TRUST_POINTS, len(points)), replace=False)
        row = {"layer": layer, "head": head}
        for label, params in (("default", None), ("full", FULL_FIT)):
            row[f"{label}_cpu_s"] = round(cpu_project(run, layer, head, params), 2)
            layout = run.projection(layer, head, LAYOUT_METHOD, 2, **(params or {}))
            recall = layout_recall(sample, layout)
            row[f"{label}_recall"] = round((recall["query"] + recall["key"]) / 2, 4)
            row[f"{label}_trust"] = round(float(trustworthiness(points[trust_points], layout[trust_points],
                                                                n_neighbors=10)), 4)
        print(f"  L{layer} H{head}: recall {row['default_recall']:.3f} / full {row['full_recall']:.3f}, trust "
              f"{row['default_trust']:.3f} / {row['full_trust']:.3f}, CPU {row['default_cpu_s']:.1f} / "
              f"{row['full_cpu_s']:.1f} s", flush=True)
        rows.append(row)
    return rows


def summarise(rows: list[dict]) -> dict:
    mean = {key: float(np.mean([row[key] for row in rows])) for key in rows[0] if key not in ("layer", "head")}
    ratios = [row["default_recall"] / row["full_recall"] for row in rows if row["full_recall"] > 0]
    return {"heads": len(rows), **{f"mean_{key}": round(value, 4) for key, value in mean.items()},
            "recall_ratio": round(mean["default_recall"] / mean["full_recall"], 3),
            "recall_ratio_min_head": round(min(ratios), 3) if ratios else None,
            "cpu_ratio": round(mean["default_cpu_s"] / mean["full_cpu_s"], 3)}


#: what the smoke test adds to ``--smoke`` (``{run}``: a copy of the tiny run, ``bench.support.tiny_run``)
SMOKE_ARGUMENTS = ("--run", "{run}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, default=Path("/tmp/qkviz-modern/run"),
                        help="a run of bench/modern_model.py's model (copied, never written)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/qkviz-thousand-heads"))
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--layers", help="time only these layers, e.g. 0-1 (extrapolated to all)")
    parser.add_argument("--heads", help="time only these heads, e.g. 0-15 (extrapolated to all)")
    parser.add_argument("--no-timing", action="store_true", help="only the quality comparison")
    parser.add_argument("--sample", type=int, default=16, help="heads drawn at random for the quality comparison")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--recall-points", type=int, default=500, help="queries (and as many keys) per head")
    parser.add_argument("--minilm", type=Path, help="a MiniLM run of 5,000 tokens: compare its table's 8 heads too")
    parser.add_argument("--json", type=Path, default=None, help="default bench/results/thousand_heads.json")
    args = smoke_arguments(parser, argv, out="json", work=Path(tempfile.mkdtemp(prefix="qkviz-thousand-")), jobs=1,
                           layers="0", heads="0", sample=2, recall_points=50)
    recorder = Recorder("thousand_heads", vars(args), args.json)

    args.work.mkdir(parents=True, exist_ok=True)
    copy = copy_run(args.run, args.work)
    run = qkviz.open_run(copy_run(args.run, args.work / "quality"))
    n_heads = run.n_layers * run.n_heads
    result: dict = {"run": {"path": str(args.run), "tokens": run.n_tokens, "layers": run.n_layers,
                            "heads": run.n_heads, "head_dim": run.head_dim},
                    "full_fit": FULL_FIT}
    print(f"{args.run}: {run.n_tokens} tokens, {run.n_layers} x {run.n_heads} heads, head size {run.head_dim}",
          flush=True)
    if not args.no_timing:
        timed = len(parse_range(args.layers, run.n_layers)) * len(parse_range(args.heads, run.n_heads))
        timing = time_project(copy, args.jobs, args.layers, args.heads)
        timing.update(heads=timed, all_heads=n_heads, wall_s_all=round(timing["wall_s"] * n_heads / timed, 1),
                      idle_wall_s_all=round(timing["cpu_s"] / args.jobs * n_heads / timed, 1),
                      cpu_s_per_head=round(timing["cpu_s"] / timed, 2))
        result["timing"] = timing
        print(f"qkviz project --jobs {args.jobs} on {timed} heads: {timing['wall_s'] / 60:.1f} min wall, "
              f"{timing['cpu_s'] / 60:.1f} min CPU ({timing['cpu_s_per_head']:.2f} s a head); all {n_heads} heads: "
              f"{timing['wall_s_all'] / 60:.1f} min at this load (load average {timing['load_before'][0]} before, "
              f"during {min(timing['load_during'] or [0])}-{max(timing['load_during'] or [0])}), "
              f"{timing['idle_wall_s_all'] / 60:.1f} min from the CPU time on {args.jobs} idle cores", flush=True)
    chosen = np.random.default_rng(args.seed).choice(n_heads, min(args.sample, n_heads), replace=False)
    heads = [divmod(int(index), run.n_heads) for index in chosen]
    print(f"quality on {len(heads)} random heads (seed {args.seed}), default layout / full fit:", flush=True)
    rows = compare_heads(run, heads, args.recall_points, args.seed)
    result["quality"] = {"rows": rows, "summary": summarise(rows)}
    print(json.dumps(result["quality"]["summary"]), flush=True)
    if args.minilm:
        minilm = qkviz.open_run(copy_run(args.minilm, args.work / "minilm"))
        print(f"MiniLM ({minilm.n_tokens} tokens), default layout / former default (the full fit):", flush=True)
        minilm_rows = compare_heads(minilm, MINILM_HEADS, args.recall_points, args.seed)
        result["minilm"] = {"tokens": minilm.n_tokens, "rows": minilm_rows, "summary": summarise(minilm_rows)}
        print(json.dumps(result["minilm"]["summary"]), flush=True)
    print(f"wrote {recorder.write(**result)}")


# The figure blocks drawn from this bench's result files: what the pages say from them (``python -m bench.figures``;
# each registered by name with ``@figure``, a goal judged by ``bench.figures.goals.verdict``).

#: the default layouts of a 1,024-head model against full fits (issue 28)
RECALL_RATIO_MEAN = Goal("the default layouts' partner recall against a full fit's", 0.9, "×", False, "thousand_heads",
                         "mean over the sampled heads", lambda found: found["quality"]["summary"]["recall_ratio"], 2)

RECALL_RATIO_EVERY_HEAD = Goal("the default layouts' partner recall against a full fit's, on every head", 0.9, "×",
                               False, "thousand_heads", "lowest head",
                               lambda found: found["quality"]["summary"]["recall_ratio_min_head"], 2)

# -- A thousand heads -------------------------------------------------------------------------------
@figure("thousand-heads-quality")
def thousand_heads_quality(results: Results) -> str:
    result = results("thousand_heads")
    summary, run = result["quality"]["summary"], result["run"]
    full = result["full_fit"]
    return (f"| {summary['heads']} random heads, {run['tokens']:,} tokens | recall@10 | trustworthiness | "
            "CPU s / head |\n|---|---|---|---|\n"
            f"| full fit (`--sample 0`, exact graph, {full['early_exaggeration_iter']} + {full['n_iter']} iterations, "
            f"openTSNE's grid) | {summary['mean_full_recall']:.4f} | {summary['mean_full_trust']:.3f} | "
            f"{summary['mean_full_cpu_s']:.1f} |\n"
            f"| **default now** | **{summary['mean_default_recall']:.4f}** ({summary['recall_ratio']:.3f}×; lowest "
            f"head {summary['recall_ratio_min_head']:.2f}×) | {summary['mean_default_trust']:.3f} | "
            f"**{summary['mean_default_cpu_s']:.1f}** |\n\n"
            f"Recall goal, on the mean: {verdict(RECALL_RATIO_MEAN, results)}; on every head: "
            f"{verdict(RECALL_RATIO_EVERY_HEAD, results)}. "
            f"Trustworthiness {summary['mean_full_trust'] - summary['mean_default_trust']:.3f} lower than the full "
            f"fit's. `bench/thousand_heads.py --sample {result['arguments']['sample']} --seed "
            f"{result['arguments']['seed']}` ({source(results, 'thousand_heads')}).\n")

@figure("thousand-heads-time")
def thousand_heads_time(results: Results) -> str:
    result = results("thousand_heads")
    timing = result["timing"]
    load = timing.get("load_during") or []
    text = (f"`qkviz {timing['command'].split(' --run')[0]} --jobs {result['arguments']['jobs']}` on all "
            f"{timing['all_heads']:,} heads (PCA 2D and 3D and attn-tsne 2D): {minutes(timing['wall_s_all'])} wall "
            f"on the shared machine (load {min(load):.1f}–{max(load):.1f} during it; "
            f"{timing['load_before'][0]:.1f} when it began), {minutes(timing['cpu_s'])} of CPU, "
            f"{timing['cpu_s_per_head']:.2f} CPU s a head. Goal {verdict(LAYOUTS_1024, results)}. ")
    return text + f"`bench/thousand_heads.py` ({source(results, 'thousand_heads')}).\n"

#: the wall time of every head's default layouts of a 1,024-head model, ``qkviz project --jobs 2`` (issue 28)
LAYOUTS_1024 = Goal("every head's default layouts of a 1,024-head model, `qkviz project --jobs 2`", 30, "min", True,
                    "thousand_heads", "wall time", lambda found: found["timing"]["wall_s_all"] / 60)

@figure("scale-thousand")
def scale_thousand(results: Results) -> str:
    result = results("thousand_heads")
    summary, timing, shape = result["quality"]["summary"], result["timing"], result["run"]
    return (f"attn-tsne's default against a full fit on {summary['heads']} random heads: "
            f"{summary['mean_default_cpu_s']:.1f} against {summary['mean_full_cpu_s']:.1f} CPU seconds a head, "
            f"{summary['recall_ratio']:.2f}× the full fit's partner recall ({summary['mean_default_recall']:.4f} "
            f"against {summary['mean_full_recall']:.4f}; the lowest head {summary['recall_ratio_min_head']:.2f}×), "
            f"trustworthiness {summary['mean_default_trust']:.3f} against {summary['mean_full_trust']:.3f}. "
            f"`qkviz project --jobs {result['arguments']['jobs']}` on all {timing['heads']:,} heads "
            f"({shape['layers']} layers of {shape['heads']}, {shape['tokens']:,} tokens): {minutes(timing['wall_s'])} "
            f"wall, {minutes(timing['cpu_s'])} of CPU, {timing['cpu_s_per_head']:.2f} CPU seconds a head; goal "
            f"{verdict(LAYOUTS_1024, results)}. "
            f"`bench/thousand_heads.py` ({source(results, 'thousand_heads')}).\n")


if __name__ == "__main__":
    main()
