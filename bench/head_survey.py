"""Which heads ``bench.faithful`` measures: every head's share of attention on the first token and how
many of its attention partners its aligned space keeps among cosine neighbours, and the choice of sink,
hardest and ordinary heads from them."""

from __future__ import annotations

import numpy as np

from qkviz.core import LogitRule, align_head, attention_probs
from qkviz.neighbours import top_logits

#: partners per point, and points sampled per side, as the bench measures recall
K = 10
SAMPLE = 200


def first_token_share(run, layer: int, head: int, sentences: list[int]) -> float:
    """Mean attention on the sentence's first token, over the queries of ``sentences`` (first query left out)."""
    queries, keys = run.queries(layer, head), run.keys(layer, head)
    shares = []
    for sentence in sentences:
        rows = run.sentence_tokens(sentence)
        probs = attention_probs(queries[rows], keys[rows], run.logit_rule(layer, head))
        shares.append(probs[1:, 0])
    return float(np.concatenate(shares).mean())


def cosine_fidelity(run, layer: int, head: int, seed: int = 0) -> float:
    """Partner recall@10 of the aligned space itself under cosine (mean of both sides, seeded sample):
    the ceiling of what a layout preserving cosine neighbourhoods (tsne, umap) can keep."""
    queries, keys = run.queries(layer, head), run.keys(layer, head)
    points = align_head(queries, keys).points
    n = len(queries)
    unit = points / np.maximum(np.linalg.norm(points, axis=1, keepdims=True), 1e-12)
    chosen = np.random.default_rng(seed).choice(n, min(SAMPLE, n), replace=False)
    shares = []
    for own, other, own_unit, other_unit in ((queries, keys, unit[:n], unit[n:]), (keys, queries, unit[n:], unit[:n])):
        partners = top_logits(own[chosen], other, K, LogitRule(1.0))[0]
        near = top_logits(own_unit[chosen], other_unit, K, LogitRule(1.0))[0]          # cosine: dot products of unit vectors
        shares.append(np.mean([len(np.intersect1d(a, b)) / K for a, b in zip(partners, near)]))
    return float(np.mean(shares))


def survey_heads(run, n_sentences: int = 40, seed: int = 0) -> list[dict]:
    """Every head's first-token share and cosine fidelity."""
    rng = np.random.default_rng(seed)
    sentences = sorted(rng.choice(len(run.sentences), min(n_sentences, len(run.sentences)), replace=False).tolist())
    return [{"layer": layer, "head": head, "first_token": first_token_share(run, layer, head, sentences),
             "cosine_fidelity": cosine_fidelity(run, layer, head)}
            for layer in range(run.n_layers) for head in range(run.n_heads)]


def choose_heads(survey: list[dict], sinks: int, hardest: int, ordinary: int) -> list[tuple[int, int, str]]:
    chosen: dict[tuple[int, int], str] = {}
    for row in sorted(survey, key=lambda row: -row["first_token"])[:sinks]:
        chosen[row["layer"], row["head"]] = "sink"
    for row in [row for row in sorted(survey, key=lambda row: row["cosine_fidelity"])
                if (row["layer"], row["head"]) not in chosen][:hardest]:
        chosen[row["layer"], row["head"]] = "hard"
    rest = sorted([row for row in survey if row["first_token"] < 0.5 and (row["layer"], row["head"]) not in chosen],
                  key=lambda row: row["cosine_fidelity"])
    if len(rest) < ordinary:
        rest = sorted([row for row in survey if (row["layer"], row["head"]) not in chosen],
                      key=lambda row: row["first_token"])[:max(ordinary * 2, 1)]
    middle = len(rest) // 2
    for row in rest[max(0, middle - ordinary // 2):][:ordinary]:
        chosen[row["layer"], row["head"]] = "ordinary"
    return [(layer, head, kind) for (layer, head), kind in chosen.items()]
