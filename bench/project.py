"""Projection benchmark: qkviz vs the AttentionViz recipe on the same points, and all heads.

    python bench/project.py [--tokens 5000] [--compare-heads 3,4 0,0] [--jobs 2] [--skip-all-heads]

Part 1, per head (MiniLM, ``--tokens`` tokens: twice as many points): the six layouts AttentionViz
precomputes (t-SNE, UMAP, PCA x 2D, 3D), timed for qkviz (the per-head task of ``qkviz project``:
alignment once, one shared neighbour graph, openTSNE with FFT in 2D, 3D t-SNE refined from the 2D
one, UMAP on the shared graph; one process, no parallel heads) and for the AttentionViz recipe
(scikit-learn TSNE, perplexity 50, 300 iterations, cosine; umap-learn defaults with cosine;
scikit-learn PCA) on the same aligned points in the same process, alternating; UMAP's numba code is
compiled before either is timed. Trustworthiness (k = 10) of every 2D layout on a fixed
3,000-point subsample.
Then the same layouts of the same heads with the heads in parallel over a warm pool of ``--jobs``
workers, against the AttentionViz recipe's total.
Part 2: ``qkviz project`` over all heads in a child process with ``--jobs`` workers, per method,
then the cached re-run of everything.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
warnings.filterwarnings("ignore")

import qkviz  # noqa: E402
from qkviz.core.alignment import align_head  # noqa: E402
from qkviz.extraction.corpus import DEFAULT_CORPUS  # noqa: E402
from qkviz.cluster import HeadTask  # noqa: E402
from qkviz.projection.tasks import plan_specs, project_head, projection_runner, run_tasks  # noqa: E402
from qkviz.projection import project_points as project  # noqa: E402

LAYOUTS = [("tsne", 2), ("tsne", 3), ("umap", 2), ("umap", 3), ("pca", 2), ("pca", 3)]


def timed(function):
    start = time.perf_counter()
    result = function()
    return result, time.perf_counter() - start


def attentionviz_layout(points: np.ndarray, method: str, dim: int) -> np.ndarray:
    if method == "tsne":
        from sklearn.manifold import TSNE

        return TSNE(n_components=dim, perplexity=50, max_iter=300, metric="cosine", init="pca",
                    random_state=0).fit_transform(points)
    if method == "umap":
        import umap

        return umap.UMAP(n_components=dim, metric="cosine", random_state=0).fit_transform(points)
    from sklearn.decomposition import PCA

    return PCA(n_components=dim).fit_transform(points)


def qkviz_layouts(run, layer: int, head: int) -> tuple[dict, float]:
    """Our six layouts of one head through the real per-head task (alignment, shared graph, 3D
    t-SNE lifted from the 2D one), into the run's cache; the rest of the head's wall time
    (loading, alignment, the neighbour graph) is reported apart and counted in the set."""
    specs = plan_specs(run, ["tsne", "umap", "pca"], [2, 3], [layer], [head])
    outcomes, seconds = timed(lambda: project_head(str(run.path), specs))
    layouts = {(o["spec"].method, o["spec"].dim): (run.projection(layer, head, o["spec"].method, o["spec"].dim),
                                                   o["seconds"]) for o in outcomes}
    return layouts, seconds - sum(o["seconds"] for o in outcomes)


def compare_heads(run, heads: list[tuple[int, int]]) -> None:
    from sklearn.manifold import trustworthiness

    # Compile numba for both first (5,000 points: below 4,096 umap-learn skips its NN-descent).
    warm = np.random.default_rng(0).normal(size=(5000, 8)).astype(np.float32)
    project(warm, "umap", 2)
    attentionviz_layout(warm, "umap", 2)
    totals = {"ours": 0.0, "attentionviz": 0.0}
    per_method = {layout: [0.0, 0.0] for layout in LAYOUTS}
    trust = {layout: [[], []] for layout in LAYOUTS if layout[1] == 2}
    for layer, head in heads:
        points = align_head(run.queries(layer, head), run.keys(layer, head)).points
        sample = np.random.default_rng(0).choice(len(points), min(3000, len(points)), replace=False)
        ours, graph_seconds = qkviz_layouts(run, layer, head)
        totals["ours"] += graph_seconds
        print(f"L{layer} H{head}: {len(points)} points; loading, alignment and shared neighbour graph "
              f"{graph_seconds:.1f} s", flush=True)
        for method, dim in LAYOUTS:
            theirs, their_seconds = timed(lambda: attentionviz_layout(points, method, dim))
            our_layout, our_seconds = ours[method, dim]
            totals["ours"] += our_seconds
            totals["attentionviz"] += their_seconds
            per_method[method, dim][0] += our_seconds
            per_method[method, dim][1] += their_seconds
            line = f"  {method} {dim}D: qkviz {our_seconds:6.1f} s, AttentionViz {their_seconds:6.1f} s"
            if dim == 2:
                ours_t = trustworthiness(points[sample], our_layout[sample], n_neighbors=10)
                theirs_t = trustworthiness(points[sample], theirs[sample], n_neighbors=10)
                trust[method, dim][0].append(ours_t)
                trust[method, dim][1].append(theirs_t)
                line += f"; trustworthiness qkviz {ours_t:.3f}, AttentionViz {theirs_t:.3f}"
            print(line, flush=True)
    print(f"\nover {len(heads)} heads (time ratio = AttentionViz / qkviz):")
    for (method, dim), (ours_s, theirs_s) in per_method.items():
        extra = ""
        if (method, dim) in trust:
            extra = (f", mean trustworthiness {np.mean(trust[method, dim][0]):.3f} vs "
                     f"{np.mean(trust[method, dim][1]):.3f}")
        print(f"  {method} {dim}D: {ours_s:7.1f} s vs {theirs_s:7.1f} s, ratio {theirs_s / ours_s:5.1f}x{extra}")
    print(f"  the six layouts: {totals['ours']:.1f} s vs {totals['attentionviz']:.1f} s, "
          f"ratio {totals['attentionviz'] / totals['ours']:.1f}x", flush=True)
    return totals["attentionviz"]


def parallel_heads(run, heads: list[tuple[int, int]], jobs: int, attentionviz_seconds: float) -> None:
    """The same six layouts of the same heads, heads in parallel over a warm pool of ``jobs`` workers."""
    with tempfile.TemporaryDirectory() as scratch:
        copy = Path(scratch) / "run"
        shutil.copytree(run.path, copy, ignore=shutil.ignore_patterns("projections"))
        fresh = qkviz.open_run(copy)
        specs = [spec for layer, head in heads
                 for spec in plan_specs(fresh, ["tsne", "umap", "pca"], [2, 3], [layer], [head])]
        with projection_runner(fresh, jobs) as runner:
            list(runner.run(os.getpid, [HeadTask(0, 0, ())] * jobs))   # start and warm the workers
            _, seconds = timed(lambda: list(run_tasks(fresh, specs, runner)))
    print(f"  the six layouts of the {len(heads)} heads, {jobs} warm workers: {seconds:.1f} s wall vs "
          f"{attentionviz_seconds:.1f} s for the AttentionViz recipe, ratio {attentionviz_seconds / seconds:.1f}x",
          flush=True)


def all_heads(run_path: Path, jobs: int) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        copy = Path(scratch) / "run"
        shutil.copytree(run_path, copy, ignore=shutil.ignore_patterns("projections"))
        command = [sys.executable, "-m", "qkviz", "-q", "project", "--run", str(copy), "--jobs", str(jobs)]
        requests = (("PCA 2D+3D", ["--method", "pca", "--dim", "2,3"]),
                    ("UMAP 2D", ["--method", "umap", "--dim", "2"]),
                    ("t-SNE 2D", ["--method", "tsne", "--dim", "2"]))
        for label, extra in requests:
            _, seconds = timed(lambda: subprocess.run(command + extra, check=True))
            print(f"all heads, {label}, --jobs {jobs}: {seconds:.1f} s (child process, start-up included)", flush=True)
        _, seconds = timed(lambda: [subprocess.run(command + extra, check=True) for _, extra in requests])
        print(f"cached re-run of the three requests above: {seconds:.1f} s (three child processes)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=5000)
    parser.add_argument("--compare-heads", nargs="*", default=["3,4", "0,0", "5,11", "1,7"],
                        help="layer,head pairs for part 1")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--skip-all-heads", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        run = qkviz.extract("minilm", DEFAULT_CORPUS, Path(scratch) / "minilm", max_tokens=args.tokens)
        print(f"MiniLM run: {run.n_tokens} tokens, {run.n_layers * run.n_heads} heads", flush=True)
        heads = [tuple(int(x) for x in pair.split(",")) for pair in args.compare_heads]
        if heads:
            attentionviz_seconds = compare_heads(run, heads)
            parallel_heads(run, heads, args.jobs, attentionviz_seconds)
        if not args.skip_all_heads:
            all_heads(run.path, args.jobs)


if __name__ == "__main__":
    main()
