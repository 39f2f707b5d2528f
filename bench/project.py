"""Projection benchmark: qkviz vs the AttentionViz recipe on the same points, and all heads.

    python -m bench.project [--run runs/minilm] [--compare-heads 3,4 0,0] [--jobs 2] [--skip-parallel]
                            [--skip-all-heads] [--all-heads-layers 0] [--json bench/results/project.json]

Part 1, per head (``--run``, default ``runs/minilm`` if it exists, else MiniLM over ``--tokens`` tokens extracted
here: twice as many points as tokens): the six layouts AttentionViz precomputes (t-SNE, UMAP, PCA x 2D, 3D),
timed for qkviz at its defaults (the per-head task of ``qkviz project``: alignment once, one shared neighbour
graph, openTSNE with FFT in 2D, 3D t-SNE refined from the 2D one, UMAP on the shared graph; one process, one
thread for the layouts, no parallel heads) and for the AttentionViz recipe (scikit-learn TSNE, perplexity 50, 300
iterations, cosine; umap-learn defaults with cosine; scikit-learn PCA; the libraries' own thread settings) on the
same aligned points in the same process, into a fresh copy of the run (no cached layouts). The order alternates
from head to head: qkviz's six layouts first for the first head, the recipe's first for the second, and so on.
UMAP's and NN-descent's numba code is compiled before either is timed. qkviz's 3D t-SNE starts from the head's 2D
layout and refines it, so the file also gives it as 2D + refinement, the figure to set against the recipe's 3D
fit from scratch. Trustworthiness (k = 10) of every layout on a fixed 3,000-point subsample.
Then (unless ``--skip-parallel``) the same layouts of the same heads with the heads in parallel over a warm pool of
``--jobs`` workers, against the AttentionViz recipe's total.
Part 2 (unless ``--skip-all-heads``): ``qkviz project`` over all heads (or ``--all-heads-layers`` and
``--all-heads-heads``) in a child
process with ``--jobs`` workers, per method (wall time and the child's own peak memory), then the cached re-run.
Everything is written to ``--json`` (default ``bench/results/project.json``; ``project_all_heads.json`` when
``--compare-heads`` names no head) with the date, machine, load and arguments.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parent.parent
warnings.filterwarnings("ignore")

import qkviz  # noqa: E402
from qkviz.core import align_head  # noqa: E402
from qkviz.extraction import DEFAULT_CORPUS  # noqa: E402
from qkviz.cluster import HeadTask  # noqa: E402
from qkviz.projection import plan_specs, project_head, projection_runner, run_tasks  # noqa: E402
from qkviz.projection import project_points as project  # noqa: E402
from qkviz.store import RUN_DIRECTORIES  # noqa: E402
from bench.harness import Recorder, run_measured, smoke_arguments  # noqa: E402
from bench.figures.goals import Goal, verdict  # noqa: E402
from bench.figures.results import Results, figure, heads_named, ratio, seconds, source  # noqa: E402

DEFAULT_RUN = REPO / "runs" / "minilm"
LAYOUTS = [("tsne", 2), ("tsne", 3), ("umap", 2), ("umap", 3), ("pca", 2), ("pca", 3)]


def timed(function):
    start = time.perf_counter()
    result = function()
    return result, time.perf_counter() - start


def fresh_copy(run, directory: Path):
    """A copy of ``run`` without its layouts and results (nothing cached)."""
    shutil.copytree(run.path, directory, ignore=shutil.ignore_patterns(*RUN_DIRECTORIES, "correlation.parquet"))
    return qkviz.open_run(directory)


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
    specs = plan_specs(run, sorted({method for method, _ in LAYOUTS}), sorted({dim for _, dim in LAYOUTS}),
                       [layer], [head])
    outcomes, seconds = timed(lambda: project_head(str(run.path), specs))
    layouts = {(o["spec"].method, o["spec"].dim): (run.projection(layer, head, o["spec"].method, o["spec"].dim),
                                                   o["seconds"]) for o in outcomes}
    return layouts, seconds - sum(o["seconds"] for o in outcomes)


def recipe_layouts(points: np.ndarray) -> dict:
    return {(method, dim): timed(lambda: attentionviz_layout(points, method, dim)) for method, dim in LAYOUTS}


def name(method: str, dim: int) -> str:
    return f"{method} {dim}D"


def compare_heads(run, heads: list[tuple[int, int]]) -> dict:
    from sklearn.manifold import trustworthiness

    # Compile numba for both first (5,000 points: above 4,096, so umap-learn's NN-descent is compiled too).
    warm = np.random.default_rng(0).normal(size=(5000, 8)).astype(np.float32)
    _, warm_seconds = timed(lambda: (project(warm, "umap", 2), attentionviz_layout(warm, "umap", 2)))
    rows = []
    for number, (layer, head) in enumerate(heads):
        points = align_head(run.queries(layer, head), run.keys(layer, head)).points
        sample = np.random.default_rng(0).choice(len(points), min(3000, len(points)), replace=False)
        order = ["qkviz", "recipe"] if number % 2 == 0 else ["recipe", "qkviz"]
        for side in order:
            if side == "qkviz":
                ours, shared_seconds = qkviz_layouts(run, layer, head)
            else:
                theirs = recipe_layouts(points)
        print(f"L{layer} H{head} ({' first, then '.join(order)}): {len(points)} points; qkviz's loading, alignment "
              f"and shared neighbour graph {shared_seconds:.1f} s", flush=True)
        layouts = {}
        for method, dim in LAYOUTS:
            our_layout, our_seconds = ours[method, dim]
            their_layout, their_seconds = theirs[method, dim]
            row = {"qkviz_s": round(our_seconds, 3), "recipe_s": round(their_seconds, 3),
                   "trust_qkviz": round(float(trustworthiness(points[sample], our_layout[sample], n_neighbors=10)), 4),
                   "trust_recipe": round(float(trustworthiness(points[sample], their_layout[sample], n_neighbors=10)), 4)}
            if (method, dim) == ("tsne", 3):   # a refinement of the 2D layout: with the 2D layout it needs
                row["qkviz_with_2d_s"] = round(our_seconds + ours["tsne", 2][1], 3)
            layouts[name(method, dim)] = row
            print(f"  {name(method, dim)}: qkviz {our_seconds:6.1f} s, AttentionViz {their_seconds:6.1f} s; "
                  f"trustworthiness qkviz {row['trust_qkviz']:.3f}, AttentionViz {row['trust_recipe']:.3f}", flush=True)
        rows.append({"head": [layer, head], "points": len(points), "order": order,
                     "qkviz_shared_s": round(shared_seconds, 3), "layouts": layouts})
    totals = {}
    for method, dim in LAYOUTS:
        key = name(method, dim)
        cells = [row["layouts"][key] for row in rows]
        totals[key] = {field: round(sum(cell[field] for cell in cells), 3)
                       for field in ("qkviz_s", "recipe_s", "qkviz_with_2d_s") if field in cells[0]}
        totals[key].update({field: round(float(np.mean([cell[field] for cell in cells])), 4)
                            for field in ("trust_qkviz", "trust_recipe")})
    six = {"qkviz_s": round(sum(row["qkviz_shared_s"] for row in rows)
                            + sum(cell["qkviz_s"] for row in rows for cell in row["layouts"].values()), 3),
           "recipe_s": round(sum(cell["recipe_s"] for row in rows for cell in row["layouts"].values()), 3)}
    print(f"\nover {len(heads)} heads (time ratio = AttentionViz / qkviz):")
    for key, total in totals.items():
        ours_s = total.get("qkviz_with_2d_s", total["qkviz_s"])
        print(f"  {key}: {ours_s:7.1f} s vs {total['recipe_s']:7.1f} s, ratio {total['recipe_s'] / ours_s:5.1f}x, "
              f"mean trustworthiness {total['trust_qkviz']:.3f} vs {total['trust_recipe']:.3f}")
    print(f"  the six layouts: {six['qkviz_s']:.1f} s vs {six['recipe_s']:.1f} s, "
          f"ratio {six['recipe_s'] / six['qkviz_s']:.1f}x", flush=True)
    return {"warm_up_s": round(warm_seconds, 2), "heads": rows, "totals": totals, "six_layouts": six}


def parallel_heads(run, heads: list[tuple[int, int]], jobs: int, directory: Path) -> dict:
    """The same six layouts of the same heads, heads in parallel over a warm pool of ``jobs`` workers."""
    fresh = fresh_copy(run, directory)
    specs = [spec for layer, head in heads
             for spec in plan_specs(fresh, ["tsne", "umap", "pca"], [2, 3], [layer], [head])]
    with projection_runner(fresh, jobs, methods=("tsne", "umap", "pca")) as runner:
        list(runner.run(os.getpid, [HeadTask(0, 0, ())] * jobs))   # start and warm the workers
        _, seconds = timed(lambda: list(run_tasks(fresh, specs, runner)))
    print(f"  the six layouts of the {len(heads)} heads, {jobs} warm workers: {seconds:.1f} s wall", flush=True)
    return {"jobs": jobs, "seconds": round(seconds, 3)}


def count(selection: str | None, every: int) -> int:
    """How many layers (heads) a ``--layers`` (``--heads``) selection such as ``0-2,5`` names; None: all ``every``."""
    if not selection:
        return every
    return len({number for part in selection.split(",")
                for number in range(int(part.split("-")[0]), int(part.split("-")[-1]) + 1)})


def all_heads(run, jobs: int, layers: str | None, heads: str | None, directory: Path) -> dict:
    copy = fresh_copy(run, directory)
    command = [sys.executable, "-m", "qkviz", "-q", "project", "--run", str(copy.path), "--jobs", str(jobs)]
    command += (["--layers", layers] if layers else []) + (["--heads", heads] if heads else [])
    requests = (("PCA 2D+3D", ["--method", "pca", "--dim", "2,3"]),
                ("UMAP 2D", ["--method", "umap", "--dim", "2"]),
                ("t-SNE 2D", ["--method", "tsne", "--dim", "2"]))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    figures = {}
    for label, extra in requests:
        done = run_measured(command + extra, env=env)
        figures[label] = {"seconds": round(done["seconds"], 2), "peak_mb": round(done["peak_mb"], 1)}
        print(f"all heads, {label}, --jobs {jobs}: {done['seconds']:.1f} s, {done['peak_mb']:.0f} MB (child process, "
              "start-up included)", flush=True)
    cached = [run_measured(command + extra, env=env)["seconds"] for _, extra in requests]
    figures["cached re-run"] = {"seconds": round(sum(cached), 2)}
    print(f"cached re-run of the three requests above: {sum(cached):.1f} s (three child processes)", flush=True)
    return {"heads": count(layers, run.n_layers) * count(heads, run.n_heads), "requests": figures}


#: what the smoke test adds to ``--smoke`` (``{run}``: a copy of a tiny run, ``{model}``: a tiny model,
#: ``{corpus}``: a few sentences; ``bench.support.tiny_run``)
SMOKE_ARGUMENTS = ('--run', '{run}')


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, default=DEFAULT_RUN if DEFAULT_RUN.exists() else None)
    parser.add_argument("--tokens", type=int, default=5000, help="tokens of the run extracted when --run is not given")
    parser.add_argument("--compare-heads", nargs="*", default=["3,4", "0,0", "5,11", "1,7"],
                        help="layer,head pairs for part 1")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--skip-parallel", action="store_true", help="leave out part 1's heads over a warm pool")
    parser.add_argument("--skip-all-heads", action="store_true")
    parser.add_argument("--all-heads-layers", help="part 2 on these layers only (e.g. 0 or 0,3), as --layers")
    parser.add_argument("--all-heads-heads", help="part 2 on these heads of each layer only (e.g. 0-3), as --heads")
    parser.add_argument("--json", type=Path, help="default: bench/results/project.json (project_all_heads.json "
                        "without --compare-heads heads)")
    args = smoke_arguments(parser, argv, out='json', compare_heads=[], jobs=1, skip_parallel=True,
                           all_heads_layers='0', all_heads_heads='0-1')
    # part 2 alone (no --compare-heads) goes to a file of its own, so that part 1's stays
    recorder = Recorder("project" if args.compare_heads else "project_all_heads", vars(args), args.json)
    figures = {}
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        source = (qkviz.open_run(args.run) if args.run
                  else qkviz.extract("minilm", DEFAULT_CORPUS, scratch / "minilm", max_tokens=args.tokens))
        print(f"{source.path}: {source.n_tokens} tokens, {source.n_layers * source.n_heads} heads", flush=True)
        figures["model"] = source.manifest.get("model")
        figures["tokens"] = source.n_tokens
        heads = [tuple(int(x) for x in pair.split(",")) for pair in args.compare_heads]
        if heads:
            figures["compare"] = compare_heads(fresh_copy(source, scratch / "compare"), heads)
            if not args.skip_parallel:
                figures["compare"]["parallel"] = parallel_heads(source, heads, args.jobs, scratch / "parallel")
        if not args.skip_all_heads:
            figures["all_heads"] = all_heads(source, args.jobs, args.all_heads_layers, args.all_heads_heads, scratch / "all")
    print(recorder.write(**figures))


# The figure blocks drawn from this bench's result files: what the pages say from them (``python -m bench.figures``;
# each registered by name with ``@figure``, a goal judged by ``bench.figures.goals.verdict``).

#: bench/project.py's layouts, as the table names them
LAYOUT_LABELS = {"tsne 2D": "t-SNE 2D", "tsne 3D": "t-SNE 3D", "umap 2D": "UMAP 2D", "umap 3D": "UMAP 3D",
                 "pca 2D": "PCA 2D", "pca 3D": "PCA 3D"}

def recipe_speedup(found: dict, layout: str) -> float:
    """The recipe's time over qkviz's for ``layout`` (``"umap 3D"``), summed over the compared heads."""
    total = found["compare"]["totals"][layout]
    return total["recipe_s"] / total.get("qkviz_with_2d_s", total["qkviz_s"])


#: issue 39: a 3D UMAP no slower than AttentionViz's (umap-learn's defaults, cosine, on the same points)
UMAP_3D_SPEED = Goal("qkviz's 3D UMAP against AttentionViz's recipe (the recipe's time over qkviz's)", 1, "×", False,
                     "project", "summed over the heads", lambda found: recipe_speedup(found, "umap 3D"), 1)

@figure("project-recipe")
def project_recipe(results: Results) -> str:
    result = results("project")
    compare = result["compare"]
    totals, rows_ = compare["totals"], compare["heads"]
    points = rows_[0]["points"]
    rows = []
    for key, label in LAYOUT_LABELS.items():
        total = totals[key]
        ours = total.get("qkviz_with_2d_s", total["qkviz_s"])
        if "qkviz_with_2d_s" in total:
            label += " (qkviz: 2D + refinement)"
        rows.append(f"| {label} | {seconds(ours)} | {seconds(total['recipe_s'])} | {ratio(total['recipe_s'], ours)} | "
                    f"{total['trust_qkviz']:.3f} / {total['trust_recipe']:.3f} |")
    six = compare["six_layouts"]
    rows.append(f"| the six layouts (qkviz: with loading, alignment and the shared neighbour graph) | "
                f"{seconds(six['qkviz_s'])} | {seconds(six['recipe_s'])} | {ratio(six['recipe_s'], six['qkviz_s'])} | |")
    refine = totals["tsne 3D"]["qkviz_s"]
    orders = "; ".join(f"{heads_named([row['head']])} {' first, then '.join(row['order'])}" for row in rows_)
    text = (f"Summed over {len(rows_)} heads ({heads_named(row['head'] for row in rows_)}) of MiniLM at "
            f"{result['tokens']:,} tokens ({points:,} points per head), one process; trustworthiness (k = 10, the "
            f"mean over the heads) on a fixed 3,000-point sample:\n\n"
            f"| layout | qkviz | AttentionViz recipe | time: recipe / qkviz | trustworthiness qkviz / recipe |\n"
            f"|---|---|---|---|---|\n" + "\n".join(rows) + "\n\n"
            f"qkviz's 3D t-SNE refines the head's 2D layout ({seconds(refine)} for the refinement alone): its row "
            f"counts the 2D layout too, against the recipe's 3D fit from scratch. Order of each head's two sets: "
            f"{orders}. Numba compiled for both before timing ({seconds(compare['warm_up_s'])}). Goal, a 3D UMAP no slower than the "
            f"recipe's (its time over ours): {verdict(UMAP_3D_SPEED, results)}.")
    parallel = compare.get("parallel")
    if parallel:
        text += (f" The same layouts with the heads over a warm pool of {parallel['jobs']} workers: "
                 f"{seconds(parallel['seconds'])} ({ratio(six['recipe_s'], parallel['seconds'])} less than the "
                 f"recipe in one process).")
    holder, named = result, ["project"]
    if "all_heads" not in result and results.exists("project_all_heads"):
        holder, named = results("project_all_heads"), ["project", "project_all_heads"]
    everything = holder.get("all_heads")
    if everything:
        arguments = holder["arguments"]
        chosen = " ".join(f"--{option} {arguments[f'all_heads_{option}']}" for option in ("layers", "heads")
                          if arguments.get(f"all_heads_{option}"))
        requests = "; ".join(f"{'the three again, cached' if label == 'cached re-run' else label} "
                             f"{seconds(figures['seconds'])}"
                             + (f", {figures['peak_mb']:.0f} MB" if "peak_mb" in figures else "")
                             for label, figures in everything["requests"].items())
        text += (f"\n\n{everything['heads']} heads{f' (`{chosen}`)' if chosen else ''} through `qkviz project --jobs "
                 f"{arguments['jobs']}` (a child process, start-up and numba compilation included; its own peak "
                 f"memory, not its workers'): {requests}.")
        if chosen:
            text += (" All the run's heads together are not measured in the current result files: `python "
                     "bench/project.py --run runs/minilm --compare-heads` measures them.")
    else:
        text += ("\n\nAll heads through `qkviz project --jobs 2` (PCA, UMAP, t-SNE, then the cached re-run) are not "
                 "measured in the current result files: `python -m bench.project --run runs/minilm --compare-heads` "
                 "measures them (into a result file of its own, which this block then reads).")
    return text + f" (`python -m bench.project`; {source(results, *named)}.)\n"


if __name__ == "__main__":
    main()
