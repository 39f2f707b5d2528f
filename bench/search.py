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
from dash_app.run_data import LAYOUT_OVERLAP_SAMPLE, RunData  # noqa: E402
from dash_app.token_search import TokenSearch  # noqa: E402
from dash_app.state import ViewState  # noqa: E402
from qkviz import open_run  # noqa: E402
from qkviz.neighbours import MappedVectors, tie_aware_recall, top_products  # noqa: E402
from qkviz.search import EXACT_LIMIT, build_inverted_lists, write_inverted_lists  # noqa: E402
from qkviz.search import PartnerIndexes, head_layout_overlap, index_targets  # noqa: E402
from qkviz.search import TokenIndex, normalise  # noqa: E402
from bench.harness import Recorder, run_measured, smoke_arguments  # noqa: E402
from bench.figures.goals import Goal, verdict  # noqa: E402
from bench.figures.results import Results, figure, source  # noqa: E402

QKVIZ = [sys.executable, "-m", "qkviz"]
WORDS = ("the", "and", "of", "to", "in", "a", "is", "was", "he", "it", "for", "on")
K = 10


def percentiles(values_ms: list[float]) -> str:
    values = np.asarray(values_ms)
    return f"p50 {np.percentile(values, 50):.2f} ms, p95 {np.percentile(values, 95):.2f} ms (n={len(values)})"


def spread(values_ms: list[float]) -> dict:
    """p50 / p95 / max (ms) and how many, as the result file holds them."""
    values = np.asarray(values_ms)
    return {"p50_ms": round(float(np.percentile(values, 50)), 3), "p95_ms": round(float(np.percentile(values, 95)), 3),
            "max_ms": round(float(values.max()), 3), "n": len(values)}


def timed(function, *args, **kwargs) -> tuple[float, object]:
    start = time.perf_counter()
    result = function(*args, **kwargs)
    return 1e3 * (time.perf_counter() - start), result


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


def bench_token_search(run) -> dict:
    data = RunData(run, run.path.name)
    layouts = data.all_layouts("pca").points
    load_ms, index = timed(TokenIndex.build, run.tokens.token)
    text = normalise(run.tokens.token)
    figures = {"heads": run.n_layers * run.n_heads, "words": list(WORDS), "layout": "pca 2D"}
    for substring in (False, True):
        indexed, scanned = [], []
        for word in WORDS:
            search = TokenSearch(index, lambda method: layouts)      # fresh: nothing cached
            indexed.append(timed(lambda: search.clusters(word, substring, "pca"))[0])
            scanned.append(timed(lambda: scan(text, word, substring))[0])
        kind = "substring" if substring else "whole token"
        lookup = float(np.median([timed(index.find, w, substring)[0] for w in WORDS]))
        print(f"all-head token search, {kind} ({run.n_layers * run.n_heads} heads, matches + cluster counts): "
              f"{percentiles(indexed)}; the token lookup alone vs a scan of the tokens: "
              f"{lookup:.3f} ms vs {np.median(scanned):.2f} ms")
        figures["substring" if substring else "whole"] = {**spread(indexed), "lookup_median_ms": round(lookup, 4),
                                                          "scan_median_ms": round(float(np.median(scanned)), 3)}
    print(f"token index built in {load_ms:.0f} ms ({len(index.vocabulary)} entries for {index.n_tokens} tokens)")
    figures["index"] = {"build_ms": round(load_ms, 1), "vocabulary": len(index.vocabulary), "tokens": index.n_tokens}
    return figures


def scan(text, word, substring):
    if substring:
        return np.flatnonzero(np.fromiter((word in t for t in text), dtype=bool, count=len(text)))
    return np.flatnonzero(text == word)


OVERLAP_METHODS = ("attn-tsne", "tsne", "attn-umap", "umap", "pca")


def bench_overlap(path: Path, sample: int = 100) -> dict:
    """Each cached layout's share of the top-K partners kept, mean over the heads that have it (every head when
    all are cached; the rows name the heads), with the same heads' PCA 2D beside a partial method for a fair pair."""
    run = open_run(path)
    data = RunData(run, path.name)
    indexes = PartnerIndexes(run)
    rows = []
    for method in OVERLAP_METHODS:
        for dim in (2, 3):
            heads = [(layer, head) for layer in range(run.n_layers) for head in range(run.n_heads)
                     if data.is_cached(layer, head, method, dim)]
            if not heads:
                continue
            shares = [head_layout_overlap(indexes, layer, head, run.projection(layer, head, method, dim), K, sample=sample)
                      for layer, head in heads]
            query, key = np.mean([s["query"] for s in shares]), np.mean([s["key"] for s in shares])
            best = max(range(len(shares)), key=lambda i: shares[i]["query"])
            row = {"method": method, "dim": dim, "heads": [f"L{layer} H{head}" for layer, head in heads],
                   "all_heads": len(heads) == run.n_layers * run.n_heads, "query": round(float(query), 4),
                   "key": round(float(key), 4), "chance": round(float(shares[0]["chance"]), 5),
                   "best_head": f"L{heads[best][0]} H{heads[best][1]}", "best_query": round(float(shares[best]["query"]), 4),
                   "per_head": {f"L{layer} H{head}": [round(float(s["query"]), 4), round(float(s["key"]), 4)]
                                for (layer, head), s in zip(heads, shares)}}
            rows.append(row)
            print(f"layout overlap {method} {dim}D ({run.n_tokens} tokens, {len(heads)} heads): a query's top-{K} keys "
                  f"among its {K} nearest keys {100 * query:.1f}%, a key's top-{K} queries {100 * key:.1f}% (random "
                  f"{100 * shares[0]['chance']:.2f}%); best head {row['best_head']} {100 * row['best_query']:.0f}%")
    return {"run": str(path), "tokens": run.n_tokens, "k": K, "sample": sample, "layouts": rows}


def bench_large(run, sizes: list[int], layer: int = 3, head: int = 4) -> list[dict]:
    """One head grown to each of ``sizes`` keys: the run's keys of ``(layer, head)`` resampled with Gaussian
    jitter (a quarter of each dimension's spread), stored as a memory-mapped .npy file, searched by the
    head's real queries, exactly in blocks and by an inverted file over the same mapped array."""
    rng = np.random.default_rng(0)
    keys, queries = run.keys(layer, head), run.queries(layer, head)
    probes = queries[rng.choice(len(queries), 750, replace=False)]
    directory = Path(tempfile.mkdtemp())
    rows = []
    for n in sizes:
        path = directory / f"keys-{n}.npy"
        stored = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(n, keys.shape[1]))
        for start in range(0, n, 1_000_000):
            count = min(1_000_000, n - start)
            jitter = rng.normal(0, 0.25, size=(count, keys.shape[1])) * keys.std(axis=0)
            stored[start:start + count] = keys[rng.integers(0, len(keys), count)] + jitter
        stored.flush()
        del stored
        mapped = MappedVectors.of_array(np.load(path, mmap_mode="r"))
        exact_ms = [timed(top_products, probes[500 + i], mapped, K)[0] for i in range(50)]
        start = time.perf_counter()
        approximate = build_inverted_lists(mapped, probes[:500])
        build_s = time.perf_counter() - start
        ivf_ms = [timed(approximate.search, probes[500 + i], K)[0] for i in range(50)]
        exact_scores, _ = top_products(probes[500:], mapped, K)
        recall = tie_aware_recall(approximate.search(probes[500:], K)[1], mapped, probes[500:], exact_scores)
        size = write_inverted_lists(approximate, directory / "lists.npz")
        info = approximate.info
        print(f"L{layer} H{head} grown to {n:,} keys (d {keys.shape[1]}, {n * keys.shape[1] * 4 / 1e6:.0f} MB mapped): "
              f"exact in blocks {percentiles(exact_ms)}; inverted file built in {build_s:.0f} s ({info.nlist} lists, "
              f"nprobe {info.nprobe}, {size / n:.1f} bytes/vector), query {percentiles(ivf_ms)}, recall@10 "
              f"{info.recall_at_10:.3f} at build, {recall:.3f} on 250 other queries")
        rows.append({"keys": n, "head": f"L{layer} H{head}", "d_head": int(keys.shape[1]), "exact": spread(exact_ms),
                     "ivf_build_s": round(build_s, 2), "nlist": int(info.nlist), "nprobe": int(info.nprobe),
                     "bytes_per_vector": round(size / n, 2), "ivf": spread(ivf_ms),
                     "recall_at_10_build": round(float(info.recall_at_10), 3), "recall_at_10_held_out": round(float(recall), 3)})
        path.unlink()
    shutil.rmtree(directory)
    return rows


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


# The figure blocks drawn from this bench's result files: what the pages say from them (``python -m bench.figures``;
# each registered by name with ``@figure``, a goal judged by ``bench.figures.goals.verdict``).

#: the goals of docs/benchmarks.md's Search table, on the p95 of a call of the Python API, from the call to its answer
#: (the app's search, Enter to the matches drawn, is judged with the app's goals)
PARTNER_QUERY = Goal("a head's first partner query", 50, "ms", True, "search", "the call to its answer, p95",
                     lambda found: found["partners"]["first"]["p95_ms"], 2)

TOKEN_SEARCH = Goal("an all-head token search", 150, "ms", True, "search",
                    "the call to its answer, p95, the slower of whole token and substring",
                    lambda found: max(found["tokens"]["whole"]["p95_ms"], found["tokens"]["substring"]["p95_ms"]), 2)

LAYOUT_NAMES = {"attn-tsne": "attn-tsne", "tsne": "t-SNE", "attn-umap": "attn-umap", "umap": "UMAP", "pca": "PCA"}

def ms(value: float) -> str:
    if value >= 1000:
        return f"{value / 1000:.2f} s"
    if value < 0.1:
        return f"{value:.3f} ms"
    return f"{value:.2f} ms" if value < 10 else f"{value:.1f} ms" if value < 100 else f"{value:,.0f} ms"

def p50_p95(timing: dict, n: bool = False) -> str:
    return f"p50 {ms(timing['p50_ms'])}, p95 {ms(timing['p95_ms'])}" + (f" ({timing['n']:,})" if n else "")

def size(nbytes: float) -> str:
    return f"{nbytes / 1e6:.2f} MB" if nbytes >= 1e6 else f"{nbytes / 1e3:.0f} kB"

def head_list(names: list[str]) -> str:
    """``L1 H4, L3 H8`` for a few heads; ``18: L0–L5 × H0, H4, H8`` for a grid of them."""
    pairs = [tuple(int(part[1:]) for part in name.split()) for name in names]
    layers, heads = sorted({layer for layer, _ in pairs}), sorted({head for _, head in pairs})
    if len(names) <= 4 or len(pairs) != len(layers) * len(heads):
        return ", ".join(names)
    spans = (f"L{layers[0]}–L{layers[-1]}" if layers == list(range(layers[0], layers[-1] + 1))
             else ", ".join(f"L{layer}" for layer in layers))
    return f"{len(names)}: {spans} × " + ", ".join(f"H{head}" for head in heads)

def layout_name(layout: str) -> str:
    """``pca 2D`` as the pages name it: ``PCA 2D``."""
    method, _, dim = layout.partition(" ")
    return f"{LAYOUT_NAMES.get(method, method)} {dim}".strip()

def part(results: Results, key: str) -> tuple[str, dict]:
    """The result file holding ``key`` (``overlap``, ``large``): ``search_<key>.json`` when a separate run of the
    bench wrote it there (``--out``), else ``search.json``."""
    name = f"search_{key}"
    if results.exists(name) and results(name).get(key):
        return name, results(name)
    return "search", results("search")

def measured_on(result: dict) -> str:
    run = result["run"]
    return (f"{run['model']}, {run['tokens']:,} tokens, {run['layers'] * run['heads']} heads, "
            f"d_head {run['d_head']}")

def command(result: dict) -> str:
    arguments = result["arguments"]
    parts = ["python -m bench.search"]
    if arguments.get("overlap_run"):
        parts.append("--overlap-run <run>")
    if arguments.get("large"):
        parts.append(f"--large {arguments['large']}")
    return " ".join(parts)

@figure("search-speed")
def search_speed(results: Results) -> str:
    result = results("search")
    build, partners, panel, tokens = result["build"], result["partners"], result["panel"], result["tokens"]
    rows = [("`qkviz index` (the token index only): time, its peak memory",
             f"{build['index_seconds']:.1f} s, {build['index_peak_mb']:,.0f} MB"),
            ("`<run>/indexes/` after it (only `tokens.parquet`)",
             f"{size(build['indexes_bytes'])}, **{build['indexes_bytes_per_token']:.1f} bytes/token** (the stored "
             f"queries and keys: {build['vectors_bytes_per_token']:,.0f} bytes/token)")]
    approximate = build.get("approximate")
    if approximate:
        recall = approximate["recall_at_10"]
        rows.append((f"an inverted file, forced (exact limit lowered to {approximate['exact_limit']:,} tokens; "
                     f"{approximate['indexes']} of the {approximate['of']} indexes built)",
                     f"{approximate['bytes_per_token_each']:.1f} bytes/token each, "
                     f"{approximate['bytes_per_token_all']:,.0f} bytes/token for all {approximate['of']}; built in "
                     f"{ms(approximate['build_ms']['median'])} each (median); recall@10 {recall['min']:.3f}–"
                     f"{recall['max']:.3f} (mean {recall['mean']:.3f}); nprobe/nlist "
                     f"{', '.join(approximate['nprobe_of_nlist'])}"))
    rows += [("partner query, exact on the mapped arrays, a head's first",
              f"{p50_p95(partners['first'])} ({partners['heads']} heads)"),
             ("partner query, exact on the mapped arrays, next ones", p50_p95(partners["later"], n=True)),
             ("for comparison, next ones: a faiss flat copy of the head held in memory (what qkviz built before)",
              p50_p95(partners["flat_copy_later"])),
             ("for comparison, next ones: numpy `K @ q` and a partial sort on the decoded head",
              p50_p95(partners["numpy_later"])),
             (f"the app's partner panel ({layout_name(panel['layout'])}), next clicks", p50_p95(panel["later"])),
             (f"the app's partner panel, a head's first click (averages the layout overlap over "
              f"{panel['overlap_sample']} points)", f"{p50_p95(panel['first'])} ({panel['heads']} heads)"),
             (f"all-head token search (matches and cluster counts in all {tokens['heads']} heads), whole token / "
              f"substring", f"p50 {ms(tokens['whole']['p50_ms'])} / {ms(tokens['substring']['p50_ms'])}, "
                            f"p95 {ms(tokens['whole']['p95_ms'])} / {ms(tokens['substring']['p95_ms'])}")]
    table = "\n".join(f"| {label} | {value} |" for label, value in rows)
    first, later = partners["first"], partners["later"]
    flat, numpy = partners["flat_copy_later"], partners["numpy_later"]
    return (f"| {measured_on(result)} | |\n|---|---|\n{table}\n\nA head's first partner query opens its arrays and "
            f"reads them from disk: p50 {ms(first['p50_ms'])} against {ms(later['p50_ms'])} for the next ones. At this "
            f"size the next ones take {later['p50_ms'] / flat['p50_ms']:.1f}× the time of the flat copy and "
            f"{later['p50_ms'] / numpy['p50_ms']:.1f}× that of numpy on the decoded head (p50)"
            + (": the price of decoding blocks from the mapped arrays instead of holding a copy. "
               if later["p50_ms"] > min(flat["p50_ms"], numpy["p50_ms"]) else ". ")
            + f"Partner queries are one clicked point's top {partners['k']} over the whole corpus, "
            f"{partners['points_per_head']} points a head after the first, every head. `{command(result)}` "
            f"({source(results, 'search')}).\n")

@figure("search-large")
def search_large(results: Results) -> str:
    name, result = part(results, "large")
    rows = result.get("large") or []
    if not rows:
        return (f"Not measured in `bench/results/search.json`: run `python -m bench.search --large 100000,500000` "
                f"({source(results, name)}).\n")
    head = rows[0]["head"]
    table = "\n".join(
        f"| {row['keys']:,} | {p50_p95(row['exact'])} | {row['ivf_build_s']:.1f} s, {row['nlist']:,} lists, nprobe "
        f"{row['nprobe']}, {row['bytes_per_vector']:.1f} bytes/vector, {p50_p95(row['ivf'])}, "
        f"{row['recall_at_10_held_out']:.3f} |" for row in rows)
    def listed(values: list[str]) -> str:
        return values[0] if len(values) == 1 else ", ".join(values[:-1]) + " and " + values[-1]
    speedups = listed(["{:.1f}×".format(row["exact"]["p50_ms"] / row["ivf"]["p50_ms"]) for row in rows])
    sizes = listed(["{:,}".format(row["keys"]) for row in rows])
    builds = listed(["{:.0f}".format(row["ivf_build_s"]) for row in rows])
    verdict = (f"The inverted file answers {speedups} faster (p50) than the exact scan at {sizes} keys, after a build "
               f"of {builds} s for this one index")
    limit = result.get("default_exact_limit")   # recorded by the bench: qkviz's limit when it ran
    at_limit = limit and max((row for row in rows if row["keys"] <= limit), key=lambda row: row["keys"], default=None)
    if at_limit:
        verdict += (f". Up to the default exact limit ({limit:,} tokens) nothing is built: at {at_limit['keys']:,} keys "
                    f"of d_head {at_limit['d_head']} the exact scan took {p50_p95(at_limit['exact'])} a query here")
    return (f"| keys ({head}, d_head {rows[0]['d_head']}) | exact in blocks | inverted file: build, lists, nprobe, size, "
            f"query, recall@10 on held-out queries |\n|---|---|---|\n{table}\n\n{verdict}. "
            f"`{command(result)}` ({source(results, name)}).\n")

@figure("search-overlap")
def search_overlap(results: Results) -> str:
    name, result = part(results, "overlap")
    overlap = result.get("overlap")
    if not overlap or not overlap["layouts"]:
        return (f"Not measured in `bench/results/search.json`: run `python -m bench.search --overlap-run <run>` on a "
                f"run with layouts ({source(results, name)}).\n")
    layouts = overlap["layouts"]
    pca = next((row for row in layouts if row["method"] == "pca" and row["dim"] == 2), None)
    rows, chance = [], layouts[0]["chance"]
    for row in layouts:
        heads = len(row["heads"])
        which = f"all {heads}" if row["all_heads"] else head_list(row["heads"])
        beside = ""
        if pca and row is not pca and not row["all_heads"] and all(name in pca["per_head"] for name in row["heads"]):
            same = [pca["per_head"][name] for name in row["heads"]]
            beside = (f"{100 * sum(q for q, _ in same) / heads:.1f}% "
                      f"({100 * sum(k for _, k in same) / heads:.1f}%)")
        rows.append(f"| {LAYOUT_NAMES.get(row['method'], row['method'])} {row['dim']}D | {which} | "
                    f"{100 * row['query']:.1f}% ({100 * row['key']:.1f}%) | {row['query'] / chance:.0f}× | "
                    f"{beside or '–'} | {row['best_head']}, {100 * row['best_query']:.0f}% |")
    return (f"| layout | heads | top-{overlap['k']} partners kept | against chance | PCA 2D on the same heads | "
            f"best head |\n|---|---|---|---|---|---|\n" + "\n".join(rows) +
            f"\n\nA query's top-{overlap['k']} keys that its {overlap['k']} nearest keys in the layout hold (a key's "
            f"top-{overlap['k']} queries in brackets), mean over the heads named, {overlap['sample']} sampled points "
            f"of each kind a head; a random layout keeps {100 * chance:.1f}%. {measured_on(result)}. "
            f"`{command(result)}` ({source(results, name)}).\n")

@figure("search-tokens")
def search_tokens(results: Results) -> str:
    result = results("search")
    tokens = result["tokens"]
    index, whole, substring = tokens["index"], tokens["whole"], tokens["substring"]
    return (f"On {measured_on(result)}: the vocabulary has {index['vocabulary']:,} entries for {index['tokens']:,} "
            f"tokens, built from the token table in {ms(index['build_ms'])}. The lookup alone takes "
            f"{ms(whole['lookup_median_ms'])} for a whole token and {ms(substring['lookup_median_ms'])} for a "
            f"substring (median), against {ms(whole['scan_median_ms'])} and {ms(substring['scan_median_ms'])} for a "
            f"scan of the tokens. The all-head token search (matches and cluster counts in all {tokens['heads']} "
            f"heads, {len(tokens['words'])} common words) takes {p50_p95(whole)} for a whole token and "
            f"{p50_p95(substring)} for a substring ({source(results, 'search')}).\n")

@figure("search-benchmarks")
def search_benchmarks(results: Results) -> str:
    result = results("search")
    build, partners, panel, tokens = result["build"], result["partners"], result["panel"], result["tokens"]
    rows = [("partner query, a head's first (exact on the run's memory-mapped arrays)",
             f"{p50_p95(partners['first'])} ({partners['heads']} heads)", verdict(PARTNER_QUERY, results)),
            ("partner query, next ones", p50_p95(partners["later"], n=True), ""),
            ("the app's partner panel (search, list, layout overlap)",
             f"next clicks {p50_p95(panel['later'])}; a head's first click {p50_p95(panel['first'])} (it averages the "
             f"overlap over {panel['overlap_sample']} sampled points)", ""),
            (f"all-head token search (matches and cluster counts in all {tokens['heads']} heads)",
             f"whole token {p50_p95(tokens['whole'])}; substring {p50_p95(tokens['substring'])}",
             verdict(TOKEN_SEARCH, results)),
            ("the token lookup alone, against a scan of the tokens",
             f"whole token {ms(tokens['whole']['lookup_median_ms'])} vs {ms(tokens['whole']['scan_median_ms'])}; "
             f"substring {ms(tokens['substring']['lookup_median_ms'])} vs {ms(tokens['substring']['scan_median_ms'])}", ""),
            ("`qkviz index` (exact heads: the token index only)",
             f"{build['index_seconds']:.1f} s, peak {build['index_peak_mb']:,.0f} MB; "
             f"{build['indexes_bytes_per_token']:.1f} bytes/token on disk", "")]
    approximate = build.get("approximate")
    if approximate:
        recall = approximate["recall_at_10"]
        rows.append((f"index build, inverted file (forced on {approximate['indexes']} indexes, exact limit "
                     f"{approximate['exact_limit']:,})",
                     f"{ms(approximate['build_ms']['median'])} each (median); recall@10 {recall['min']:.3f}–"
                     f"{recall['max']:.3f} (mean {recall['mean']:.3f})", ""))
    large_name, large = part(results, "large")
    for row in large.get("large") or []:
        rows.append((f"one head grown to {row['keys']:,} keys ({row['head']}'s keys resampled with jitter, its real "
                     f"queries)", f"exact {p50_p95(row['exact'])}; inverted file built in {row['ivf_build_s']:.1f} s "
                     f"({row['nlist']:,} lists, nprobe {row['nprobe']}), {p50_p95(row['ivf'])}, recall@10 "
                     f"{row['recall_at_10_held_out']:.3f} on held-out queries", ""))
    table = "\n".join(f"| {label} | {value} | {goal} |" for label, value, goal in rows)
    names = ["search"] + ([large_name] if large_name != "search" and large.get("large") else [])
    commands = " and ".join(f"`{command(results(name))}`" for name in names)
    return (f"{commands} ({measured_on(result)}; one run each):\n\n| | figure | goal |\n|---|---|---|\n{table}\n\n"
            f"({source(results, *names)}.)\n")


if __name__ == "__main__":
    main()
