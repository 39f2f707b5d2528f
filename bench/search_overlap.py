"""``bench.search --overlap-run``: how much of each head's top-10 partners its cached layouts keep near each point,
mean over the heads that have the layout (the ``overlap`` part of ``bench/results/search.json``, or of
``search_overlap.json``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dash_app.data.run_data import RunData
from qkviz import open_run
from qkviz.search import PartnerIndexes, head_layout_overlap
from bench.search_timing import K

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
