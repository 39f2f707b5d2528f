"""``bench.search``'s all-head token search: the token index's answer plus the cluster count in every head's 2D
layout, p50 / p95 over common words, whole-token and substring, next to a scan of the tokens (the ``tokens`` part
of ``bench/results/search.json``)."""

from __future__ import annotations

import numpy as np

from dash_app.data.run_data import RunData
from dash_app.data.token_search import TokenSearch
from qkviz.search import TokenIndex, normalise
from bench.search_timing import percentiles, spread, timed

WORDS = ("the", "and", "of", "to", "in", "a", "is", "was", "he", "it", "for", "on")


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
