"""How fast corpus-wide search is: ``python -m bench.search`` (MiniLM at 10,000 tokens by default).

Reports, on one run (extracted and PCA-projected first when missing):

* ``qkviz index`` as a command: seconds, peak RSS, and the bytes its ``indexes/`` folder holds per
  token (exact heads store nothing; only the token index is written);
* the inverted file (forced with the exact limit lowered below the run's size): build seconds, bytes
  per token, tuned ``nprobe`` and measured recall@10 against exact;
* partner queries per head (one clicked point's top 10 over the whole corpus), exact on the run's
  memory-mapped arrays read in blocks: the first query of a head and the next ones, p50 / p95 over
  every head; next to the previous way (a faiss ``IndexFlatIP`` copy of the head's vectors, held in
  memory) and numpy's brute force on the decoded head, on the same points;
* the app's whole partner panel for a clicked point (search, list, the layout's overlap with it);
* all-head token search: the token index's answer plus the cluster count in every head's 2D
  layout, p50 / p95 over common words, whole-token and substring; next to a scan of the tokens;
* with ``--overlap-run`` (a run with cached layouts of any method): how much of each head's top-10
  partners its layouts keep near each point, mean over the heads that have the layout (all of them or a few);
* with ``--large N,N,...``: one real head's keys grown to each N by jittered resampling and stored as a
  memory-mapped array, searched by its real queries: blocked exact query time against the inverted
  file's (build time, nprobe, recall@10, bytes per vector) -- where an approximate index starts to pay.

Every figure is also written to ``bench/results/search.json`` (``--out``) with the date, machine, load and arguments.

This module is the command and the measures of the index build, the partner queries and the panel; the token search
is :mod:`bench.search_tokens`, the layouts' overlap :mod:`bench.search_overlap`, the grown head
:mod:`bench.search_large` (what they all share: :mod:`bench.search_timing`), and what the pages say from the result
files :mod:`bench.search_figures`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parent.parent

from dash_app.panels.partners import render_partners  # noqa: E402
from dash_app.data.run_data import LAYOUT_OVERLAP_SAMPLE, RunData  # noqa: E402
from dash_app.state.view_state import ViewState  # noqa: E402
from qkviz import open_run  # noqa: E402
from qkviz.search import EXACT_LIMIT, build_inverted_lists, write_inverted_lists  # noqa: E402
from qkviz.search import PartnerIndexes, index_targets  # noqa: E402
from bench.harness import Recorder, run_measured, smoke_arguments  # noqa: E402
from bench.search_timing import K, percentiles, spread, timed  # noqa: E402
from bench.search_tokens import bench_token_search  # noqa: E402
from bench.search_overlap import bench_overlap  # noqa: E402
from bench.search_large import bench_large  # noqa: E402

QKVIZ = [sys.executable, "-m", "qkviz"]


def ensure_run(path: Path, tokens: int) -> None:
    if not (path / "manifest.json").exists():
        subprocess.run([*QKVIZ, "-q", "extract", "--model", "minilm", "--out", str(path), "--max-tokens", str(tokens)],
                       check=True)
    subprocess.run([*QKVIZ, "-q", "project", "--run", str(path), "--method", "pca", "--dim", "2"], check=True)


def bench_build(run, approximate_count: int) -> dict:
    measured = run_measured([*QKVIZ, "-q", "index", "--run", str(run.path)])
    if measured["returncode"]:
        raise SystemExit(f"qkviz index failed ({measured['returncode']})")
    seconds, peak = measured["seconds"], measured["peak_mb"]
    stored = sum(path.stat().st_size for path in (run.path / "indexes").iterdir())
    vectors = sum((run.path / name).stat().st_size for name in ("queries.npy", "keys.npy"))
    print(f"qkviz index: {seconds:.1f} s, peak RSS {peak:.0f} MB; indexes/ holds {stored / 1e6:.2f} MB = "
          f"{stored / run.n_tokens:.1f} bytes/token (the stored queries and keys: {vectors / run.n_tokens:,.0f} bytes/token; "
          f"files: {sorted(path.name for path in (run.path / 'indexes').iterdir())})")
    figures = {"index_seconds": round(seconds, 3), "index_peak_mb": round(peak, 1), "indexes_bytes": stored,
               "indexes_bytes_per_token": round(stored / run.n_tokens, 2),
               "indexes_files": sorted(path.name for path in (run.path / "indexes").iterdir()),
               "vectors_bytes_per_token": round(vectors / run.n_tokens, 1)}
    approximate = PartnerIndexes(run, exact_limit=run.n_tokens // 4)
    targets = index_targets(run, list(range(run.n_layers)), list(range(run.n_heads)))
    recalls, nprobes, times, sizes = [], [], [], []
    if not approximate_count:
        return figures
    directory = Path(tempfile.mkdtemp())
    for target in targets[::max(1, len(targets) // approximate_count)][:approximate_count]:
        start = time.perf_counter()
        index = build_inverted_lists(approximate.mapped(target), approximate.probe_queries(target))
        times.append(time.perf_counter() - start)
        sizes.append(write_inverted_lists(index, directory / f"{target.stem}.ivf.npz"))
        recalls.append(index.info.recall_at_10)
        nprobes.append(f"{index.info.nprobe}/{index.info.nlist}")
    shutil.rmtree(directory)
    print(f"build, approximate (inverted file, forced) on {len(times)} indexes: {1e3 * np.median(times):.0f} ms median "
          f"per index, {np.median(sizes) / run.n_tokens:.2f} bytes/token per index ({len(targets)} indexes: "
          f"{len(targets) * np.median(sizes) / run.n_tokens:.0f} bytes/token); recall@10 {min(recalls):.3f} to "
          f"{max(recalls):.3f} (mean {np.mean(recalls):.3f}); nprobe/nlist {sorted(set(nprobes))}")
    figures["approximate"] = {
        "indexes": len(times), "of": len(targets), "exact_limit": run.n_tokens // 4,
        "build_ms": {"median": round(1e3 * float(np.median(times)), 1), "max": round(1e3 * max(times), 1)},
        "bytes_per_token_each": round(float(np.median(sizes)) / run.n_tokens, 2),
        "bytes_per_token_all": round(len(targets) * float(np.median(sizes)) / run.n_tokens, 1),
        "recall_at_10": {"min": round(min(recalls), 3), "max": round(max(recalls), 3), "mean": round(float(np.mean(recalls)), 3)},
        "nprobe_of_nlist": sorted(set(nprobes), key=lambda text: [int(part) for part in text.split("/")])}
    return figures


def bench_partners(run, points_per_head: int) -> dict:
    rng = np.random.default_rng(0)
    first, later, flat_later, numpy_later = [], [], [], []
    for layer in range(run.n_layers):
        for head in range(run.n_heads):
            indexes = PartnerIndexes(open_run(run.path))
            points = rng.choice(2 * run.n_tokens, size=points_per_head + 1, replace=False)
            first.append(timed(indexes.partners, layer, head, int(points[0]), K)[0])
            flat = {side: flat_index(run, side, layer, head) for side in ("keys", "queries")}
            for point in points[1:]:
                later.append(timed(indexes.partners, layer, head, int(point), K)[0])
                flat_later.append(timed(flat_top_k, run, flat, layer, head, int(point))[0])
                numpy_later.append(timed(numpy_top_k, run, layer, head, int(point))[0])
    print(f"partner query, exact on the memory-mapped arrays, first of a head: {percentiles(first)}")
    print(f"partner query, exact on the memory-mapped arrays, next ones: {percentiles(later)}")
    print(f"  the previous way, a faiss IndexFlatIP copy held in memory (built before timing): {percentiles(flat_later)}; "
          f"numpy on the decoded head (decoding included): {percentiles(numpy_later)}")
    return {"heads": run.n_layers * run.n_heads, "points_per_head": points_per_head, "k": K, "first": spread(first),
            "later": spread(later), "flat_copy_later": spread(flat_later), "numpy_later": spread(numpy_later)}


def flat_index(run, side, layer, head):
    import faiss

    vectors = run.keys(layer, head) if side == "keys" else run.queries(layer, head)
    index = faiss.IndexFlatIP(vectors.shape[1])
    index.add(np.ascontiguousarray(vectors))
    return index


def flat_top_k(run, flat, layer, head, point):
    if point < run.n_tokens:
        return flat["keys"].search(run.queries(layer, head)[point:point + 1], K)
    return flat["queries"].search(run.keys(layer, head)[point - run.n_tokens:point - run.n_tokens + 1], K)


def numpy_top_k(run, layer, head, point):
    """The peer: every score by numpy, then a partial sort (vectors read from the run as the index does)."""
    if point < run.n_tokens:
        scores = run.keys(layer, head) @ run.queries(layer, head)[point]
    else:
        scores = run.queries(layer, head) @ run.keys(layer, head)[point - run.n_tokens]
    best = np.argpartition(-scores, K)[:K]
    return best[np.argsort(-scores[best])]


def bench_panel(run) -> dict:
    data = RunData(run, run.path.name)
    rng = np.random.default_rng(1)
    first, later = [], []
    for layer in range(run.n_layers):
        for head in range(0, run.n_heads, 3):
            for number, point in enumerate(rng.choice(2 * run.n_tokens, size=4, replace=False)):
                state = ViewState(view="single", layer=layer, head=head, method="pca", point=int(point))
                (first if number == 0 else later).append(timed(render_partners, data, state, K, [])[0])
    print(f"app partner panel (search, list, layout overlap; the head's first click also averages the overlap over "
          f"{LAYOUT_OVERLAP_SAMPLE} points): first click of a head {percentiles(first)}; next clicks {percentiles(later)}")
    return {"heads": len(first), "layout": "pca 2D", "overlap_sample": LAYOUT_OVERLAP_SAMPLE, "first": spread(first),
            "later": spread(later)}


#: what the smoke test adds to ``--smoke`` (``{run}``: a copy of a tiny run, ``{model}``: a tiny model,
#: ``{corpus}``: a few sentences; ``bench.support.tiny_run``)
SMOKE_ARGUMENTS = ('--run', '{run}')


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, default=REPO / "runs" / "minilm-10k")
    parser.add_argument("--tokens", type=int, default=10_000)
    parser.add_argument("--points", type=int, default=20, help="partner queries per head after the first")
    parser.add_argument("--overlap-run", type=Path, help="a run with cached layouts to measure their overlap on")
    parser.add_argument("--large", default="", help="comma-separated sizes of a synthetic head (e.g. 100000,1000000)")
    parser.add_argument("--approximate", type=int, default=12, help="inverted files built to measure them (0: none)")
    parser.add_argument("--skip", default="", help="comma-separated parts to skip: build,partners,panel,tokens")
    parser.add_argument("--out", type=Path, help="result file (default bench/results/search.json)")
    args = smoke_arguments(parser, argv, out='out', points=3, approximate=1, large='', overlap_run=None)
    recorder = Recorder("search", vars(args), out=args.out)
    ensure_run(args.run, args.tokens)
    run = open_run(args.run)
    print(f"{run.model_id}: {run.n_layers} x {run.n_heads} heads, {run.n_tokens} tokens, d_head {run.head_dim}")
    figures = {"run": {"model": run.model_id, "layers": run.n_layers, "heads": run.n_heads, "tokens": run.n_tokens,
                       "d_head": run.head_dim}}
    skip = set(filter(None, args.skip.split(",")))
    timings = {}
    for part, measure in (("build", lambda: bench_build(run, args.approximate)),
                          ("partners", lambda: bench_partners(run, args.points)), ("panel", lambda: bench_panel(run)),
                          ("tokens", lambda: bench_token_search(run))):
        if part not in skip:
            if part == "build":
                shutil.rmtree(args.run / "indexes", ignore_errors=True)
            start = time.perf_counter()
            figures[part] = measure()
            timings[part] = round(time.perf_counter() - start, 1)
    if args.overlap_run:
        start = time.perf_counter()
        figures["overlap"] = bench_overlap(args.overlap_run)
        timings["overlap"] = round(time.perf_counter() - start, 1)
    if args.large:
        start = time.perf_counter()
        figures["large"] = bench_large(run, [int(n) for n in args.large.split(",")])
        timings["large"] = round(time.perf_counter() - start, 1)
    # the limit up to which qkviz searches exactly, building nothing (what the page compares the sizes with)
    print(f"wrote {recorder.write(**figures, default_exact_limit=EXACT_LIMIT, part_seconds=timings)}")


if __name__ == "__main__":
    main()
