"""``bench.search --large N,N,...``: one real head's keys grown to each N, searched exactly in blocks and by an
inverted file -- where an approximate index starts to pay (the ``large`` part of ``bench/results/search.json``, or
of ``search_large.json``)."""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from qkviz.neighbours import MappedVectors, tie_aware_recall, top_products
from qkviz.search import build_inverted_lists, write_inverted_lists
from bench.search_timing import K, percentiles, spread, timed


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
