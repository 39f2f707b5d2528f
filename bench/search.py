"""How fast corpus-wide search is: ``python bench/search.py`` (MiniLM at 10,000 tokens by default).

Reports, on one run (extracted and PCA-projected first when missing):

* index build (``qkviz index``'s work): seconds and bytes per head index, flat (exact) and -- with
  the exact limit lowered below the run's size -- inverted file, with its tuned ``nprobe`` and
  measured recall@10 against exact;
* partner queries per head (one clicked point's top 10 over the whole corpus): the first query of
  a head (its index memory-mapped from disk, or built in memory when not stored) and the next ones,
  p50 / p95 over every head; next to numpy's brute force (``K @ q`` and a partial sort) on the
  same points, as a ratio;
* the app's whole partner panel for a clicked point (search, list, the layout's overlap with it);
* all-head token search: the token index's answer plus the cluster count in every head's 2D
  layout, p50 / p95 over common words, whole-token and substring; next to a scan of the tokens;
* with ``--overlap-run`` (a run with t-SNE / UMAP / PCA layouts): how much of each head's top-10
  partners its layouts keep near each point, mean over heads;
* with ``--large N``: one real head's keys grown to N by jittered resampling (past the exact
  limit), searched by its real queries: flat query time, inverted-file build time, nprobe, recall@10.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from dash_app.panels.partners import render_partners  # noqa: E402
from dash_app.run_data import RunData  # noqa: E402
from dash_app.search import TokenSearch  # noqa: E402
from dash_app.state import ViewState  # noqa: E402
from qkviz import open_run  # noqa: E402
from qkviz.search.mips_index import build_index, exact_top_k, tie_aware_recall  # noqa: E402
from qkviz.search.partner_index import PartnerIndexes, head_layout_overlap, index_targets  # noqa: E402
from qkviz.search.token_index import TokenIndex, normalise  # noqa: E402

QKVIZ = [sys.executable, "-m", "qkviz"]
WORDS = ("the", "and", "of", "to", "in", "a", "is", "was", "he", "it", "for", "on")
K = 10


def percentiles(values_ms: list[float]) -> str:
    values = np.asarray(values_ms)
    return f"p50 {np.percentile(values, 50):.2f} ms, p95 {np.percentile(values, 95):.2f} ms (n={len(values)})"


def timed(function, *args, **kwargs) -> tuple[float, object]:
    start = time.perf_counter()
    result = function(*args, **kwargs)
    return 1e3 * (time.perf_counter() - start), result


def ensure_run(path: Path, tokens: int) -> None:
    if not (path / "manifest.json").exists():
        subprocess.run([*QKVIZ, "-q", "extract", "--model", "minilm", "--out", str(path), "--max-tokens", str(tokens)],
                       check=True)
    subprocess.run([*QKVIZ, "-q", "project", "--run", str(path), "--method", "pca", "--dim", "2"], check=True)


def bench_build(run) -> None:
    indexes = PartnerIndexes(run)
    targets = index_targets(run, list(range(run.n_layers)), list(range(run.n_heads)))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    seconds, sizes = [], []
    for target in targets:
        start = time.perf_counter()
        _, size = indexes.build(target)
        seconds.append(time.perf_counter() - start)
        sizes.append(size)
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - before
    print(f"build, exact (flat): {len(targets)} indexes ({run.n_layers * run.n_heads} heads, keys and queries) in "
          f"{sum(seconds):.2f} s, {1e3 * np.median(seconds):.1f} ms median per index (vectors read and decoded, "
          f"written); {np.median(sizes) / 1e6:.2f} MB per index, {sum(sizes) / 1e6:.0f} MB in all; "
          f"peak RSS grew {grown:.0f} MB")
    approximate = PartnerIndexes(run, exact_limit=run.n_tokens // 4)
    recalls, nprobes, times = [], [], []
    for target in targets[::4]:
        start = time.perf_counter()
        index = build_index(approximate.vectors(target), approximate.probe_queries(target), approximate.exact_limit)
        times.append(time.perf_counter() - start)
        recalls.append(index.info.recall_at_10)
        nprobes.append(f"{index.info.nprobe}/{index.info.nlist}")
    print(f"build, approximate (inverted file, forced with exact limit {run.n_tokens // 4}) on {len(times)} indexes: "
          f"{1e3 * np.median(times):.0f} ms median per index; recall@10 {min(recalls):.3f} to {max(recalls):.3f} "
          f"(mean {np.mean(recalls):.3f}); nprobe/nlist {sorted(set(nprobes))}")


def bench_partners(run, points_per_head: int) -> None:
    rng = np.random.default_rng(0)
    first = {True: [], False: []}          # the first query of a head, with and without a stored index
    later, numpy_later = [], []
    for stored in (True, False):
        for layer in range(run.n_layers):
            for head in range(run.n_heads):
                indexes = PartnerIndexes(open_run(run.path))
                if not stored:
                    indexes.stored_info = lambda target: None         # as if 'qkviz index' had not run
                points = rng.choice(2 * run.n_tokens, size=points_per_head + 1, replace=False)
                first[stored].append(timed(indexes.partners, layer, head, int(points[0]), K)[0])
                if stored:
                    for point in points[1:]:
                        later.append(timed(indexes.partners, layer, head, int(point), K)[0])
                        numpy_later.append(timed(numpy_top_k, run, layer, head, int(point))[0])
    print(f"partner query, first of a head (index memory-mapped from disk): {percentiles(first[True])}")
    print(f"partner query, first of a head (no stored index: exact one built in memory): {percentiles(first[False])}")
    print(f"partner query, next ones: {percentiles(later)}; numpy brute force on the same points: "
          f"{percentiles(numpy_later)}; faiss {np.median(numpy_later) / np.median(later):.1f}x faster (median)")


def numpy_top_k(run, layer, head, point):
    """The peer: every score by numpy, then a partial sort (vectors read from the run as the index does)."""
    if point < run.n_tokens:
        scores = run.keys(layer, head) @ run.queries(layer, head)[point]
    else:
        scores = run.queries(layer, head) @ run.keys(layer, head)[point - run.n_tokens]
    best = np.argpartition(-scores, K)[:K]
    return best[np.argsort(-scores[best])]


def bench_panel(run) -> None:
    data = RunData(run, run.path.name)
    rng = np.random.default_rng(1)
    first, later = [], []
    for layer in range(run.n_layers):
        for head in range(0, run.n_heads, 3):
            for number, point in enumerate(rng.choice(2 * run.n_tokens, size=4, replace=False)):
                state = ViewState(view="single", layer=layer, head=head, method="pca", point=int(point))
                (first if number == 0 else later).append(timed(render_partners, data, state, K, [])[0])
    print(f"app partner panel (search, list, layout overlap; the head's first click also averages the overlap over "
          f"100 points): first click of a head {percentiles(first)}; next clicks {percentiles(later)}")


def bench_token_search(run) -> None:
    data = RunData(run, run.path.name)
    layouts = data.all_layouts("pca").points
    load_ms, index = timed(TokenIndex.build, run.tokens.token)
    text = normalise(run.tokens.token)
    for substring in (False, True):
        indexed, scanned = [], []
        for word in WORDS:
            search = TokenSearch(index, lambda method: layouts)      # fresh: nothing cached
            indexed.append(timed(lambda: search.clusters(word, substring, "pca"))[0])
            scanned.append(timed(lambda: scan(text, word, substring))[0])
        kind = "substring" if substring else "whole token"
        print(f"all-head token search, {kind} ({run.n_layers * run.n_heads} heads, matches + cluster counts): "
              f"{percentiles(indexed)}; the token lookup alone vs a scan of the tokens: "
              f"{np.median([timed(index.find, w, substring)[0] for w in WORDS]):.3f} ms vs {np.median(scanned):.2f} ms")
    print(f"token index built in {load_ms:.0f} ms ({len(index.vocabulary)} entries for {index.n_tokens} tokens)")


def scan(text, word, substring):
    if substring:
        return np.flatnonzero(np.fromiter((word in t for t in text), dtype=bool, count=len(text)))
    return np.flatnonzero(text == word)


def bench_overlap(path: Path) -> None:
    run = open_run(path)
    data = RunData(run, path.name)
    indexes = PartnerIndexes(run)
    for method in ("tsne", "umap", "pca"):
        for dim in (2, 3):
            if not all(data.is_cached(layer, head, method, dim) for layer in range(run.n_layers)
                       for head in range(run.n_heads)):
                continue
            shares = [head_layout_overlap(indexes, layer, head, run.projection(layer, head, method, dim), K, sample=100)
                      for layer in range(run.n_layers) for head in range(run.n_heads)]
            query, key = np.mean([s["query"] for s in shares]), np.mean([s["key"] for s in shares])
            best = max(range(len(shares)), key=lambda i: shares[i]["query"])
            print(f"layout overlap {method} {dim}D ({run.n_tokens} tokens): a query's top-{K} keys among its {K} "
                  f"nearest keys {100 * query:.1f}%, a key's top-{K} queries {100 * key:.1f}% (random "
                  f"{100 * shares[0]['chance']:.2f}%); best head L{best // run.n_heads} H{best % run.n_heads} "
                  f"{100 * shares[best]['query']:.0f}%")


def bench_large(run, n: int, layer: int = 3, head: int = 4) -> None:
    """One head grown to ``n`` keys: the run's keys of ``(layer, head)`` resampled with Gaussian jitter
    (a quarter of each dimension's spread), searched by the head's real queries."""
    rng = np.random.default_rng(0)
    keys, queries = run.keys(layer, head), run.queries(layer, head)
    jitter = rng.normal(0, 0.25, size=(n, keys.shape[1])) * keys.std(axis=0)
    vectors = (keys[rng.integers(0, len(keys), n)] + jitter).astype(np.float32)
    probes = queries[rng.choice(len(queries), 750, replace=False)]
    flat = build_index(vectors, exact_limit=n)
    flat_ms = [timed(flat.search, probes[500 + i], K)[0] for i in range(50)]
    start = time.perf_counter()
    approximate = build_index(vectors, probes[:500], exact_limit=n - 1)
    build_s = time.perf_counter() - start
    ivf_ms = [timed(approximate.search, probes[500 + i], K)[0] for i in range(50)]
    exact_scores, _ = exact_top_k(vectors, probes[500:], K)
    recall = tie_aware_recall(approximate.search(probes[500:], K)[1], vectors, probes[500:], exact_scores)
    info = approximate.info
    print(f"L{layer} H{head} grown to {n:,} keys (d {keys.shape[1]}): flat query {percentiles(flat_ms)}; inverted "
          f"file built in {build_s:.0f} s ({info.nlist} lists, nprobe {info.nprobe}), query {percentiles(ivf_ms)}, "
          f"recall@10 {info.recall_at_10:.3f} at build, {recall:.3f} on 250 other queries; "
          f"{info.n_vectors * info.dim * 4 / 1e6:.0f} MB of vectors")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, default=REPO / "runs" / "minilm-10k")
    parser.add_argument("--tokens", type=int, default=10_000)
    parser.add_argument("--points", type=int, default=20, help="partner queries per head after the first")
    parser.add_argument("--overlap-run", type=Path, help="a run with cached layouts to measure their overlap on")
    parser.add_argument("--large", type=int, default=0, help="vectors of a synthetic head past the exact limit")
    args = parser.parse_args()
    ensure_run(args.run, args.tokens)
    run = open_run(args.run)
    print(f"{run.model_id}: {run.n_layers} x {run.n_heads} heads, {run.n_tokens} tokens, d_head {run.head_dim}")
    shutil.rmtree(args.run / "indexes", ignore_errors=True)
    bench_build(run)
    bench_partners(run, args.points)
    bench_panel(run)
    bench_token_search(run)
    if args.overlap_run:
        bench_overlap(args.overlap_run)
    if args.large:
        bench_large(run, args.large)


if __name__ == "__main__":
    main()
