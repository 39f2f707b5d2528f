"""attn-tsne's per-head trade: the graph reweighed, the layout's own recall probe, and the choice of alpha on a
small head (a few hundred tokens, seconds)."""

import numpy as np
import pytest

from qkviz.core import Alignment, LogitRule, align_head
from qkviz.neighbours import layout_trust
from qkviz.projection import project_points, resolve_params
from qkviz.projection.attention_graph import attention_graph
from qkviz.projection.recall_trade import RecallProbe


def small_head(n: int = 400, d: int = 8, seed: int = 3):
    """Queries and keys in four clusters each, every query's cluster scoring one key cluster highest: attention
    that a 2D layout can keep while it keeps the aligned space's clusters too."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(4, d)) * 3
    labels = rng.integers(0, 4, size=n)
    queries = centres[labels] + rng.normal(size=(n, d))
    keys = centres[(labels + 1) % 4] + rng.normal(size=(n, d))
    aligned = align_head(queries, keys, Alignment()).points.astype(np.float32)
    return queries, keys, aligned


def test_the_graph_reweighed_is_the_graph_built_at_that_alpha():
    queries, keys, aligned = small_head(120)
    graph = attention_graph(queries, keys, aligned, LogitRule(0.5), k=5, alpha=0.5, same_kind_k=5)
    for alpha in (0.0, 0.5, 2.0):
        built = attention_graph(queries, keys, aligned, LogitRule(0.5), k=5, alpha=alpha, same_kind_k=5)
        np.testing.assert_allclose(graph.weighted(alpha).toarray(), built.matrix.toarray(), rtol=1e-6, atol=1e-12)
    assert graph.alpha == 0.5 and graph.query_partners.shape == (120, 5)


def test_the_probe_counts_exact_partners_among_the_nearest_points_of_the_other_kind():
    """The probe's recall against a brute-force count: each probed token's k best logits over the whole head
    (``0.5 * q . k``, exact), its k nearest points of the other kind in the layout."""
    queries, keys, aligned = small_head(200)
    graph = attention_graph(queries, keys, aligned, LogitRule(0.5), k=5, alpha=0.5, same_kind_k=5)
    probe = RecallProbe.of(graph, seed=0, size=50)
    layout = np.random.default_rng(1).normal(size=(400, 2))
    n, shares = 200, []
    logits = 0.5 * queries @ keys.T
    for scores, mine, other in ((logits, layout[:n], layout[n:]), (logits.T, layout[n:], layout[:n])):
        for token in probe.sample.chosen:
            wanted = np.argsort(-scores[token])[:5]
            near = np.argsort(((other - mine[token]) ** 2).sum(axis=1))[:5]
            shares.append(len(np.intersect1d(near, wanted)) / 5)
    assert len(probe.sample.chosen) == 50
    assert probe.recall(layout) == pytest.approx(np.mean(shares[:50]) / 2 + np.mean(shares[50:]) / 2)
    perfect = layout.copy()
    token = probe.sample.chosen[0]
    perfect[n + np.argsort(-logits[token])[:5]] = perfect[token] + 1e-6
    assert probe.recall(perfect) > probe.recall(layout)


def test_the_probe_reads_exact_partners_whatever_search_the_graph_made():
    """Past ``exact_search`` the graph's partners may be approximate; the probe's bounds are each probed query's exact
    k-th best logit over every key."""
    queries, keys, aligned = small_head(400)
    graph = attention_graph(queries, keys, aligned, LogitRule(0.5), k=5, alpha=0.5, same_kind_k=5, exact_search=0)
    probe = RecallProbe.of(graph, seed=0, size=40)
    assert probe.sample.thresholds["query"] == pytest.approx(np.sort(0.5 * queries[probe.sample.chosen] @ keys.T,
                                                                      axis=1)[:, -5])


def layout_of(queries, keys, aligned, **settings):
    params = resolve_params("attn-tsne", settings, 2)
    graph_params = {name: params.pop(name) for name in ("k", "alpha", "temperature", "same_kind_k", "key_cap",
                                                        "hide_first_token", "exact_search")}
    graph = attention_graph(queries, keys, aligned, LogitRule(0.5), **graph_params)
    return graph, project_points(aligned, "attn-tsne", 2, seed=0, attention=graph, **params)


def test_a_head_with_recall_to_spare_trades_it_for_the_aligned_space():
    queries, keys, aligned = small_head()
    graph, fixed = layout_of(queries, keys, aligned, alpha=0.5, recall_target=0.0)
    _, traded = layout_of(queries, keys, aligned, alpha=0.5, recall_target=0.05, trade_steps=2)
    assert fixed.params["alpha"] == 0.5 and traded.params["alpha"] == 2.0
    assert traded.adjusted == {"alpha": (0.5, 2.0)}
    probe = RecallProbe.of(graph, seed=0)
    assert probe.recall(traded.coordinates) >= 0.05
    assert layout_trust(aligned, traded.coordinates) > layout_trust(aligned, fixed.coordinates)


def test_a_head_short_of_the_target_keeps_its_alpha_without_lower_steps_and_the_same_seed_the_same_layout():
    queries, keys, aligned = small_head()
    _, first = layout_of(queries, keys, aligned, alpha=0.5, recall_target=1.0, lower_steps=0)
    _, again = layout_of(queries, keys, aligned, alpha=0.5, recall_target=1.0, lower_steps=0)
    assert first.params["alpha"] == 0.5 and first.adjusted == {}
    np.testing.assert_array_equal(first.coordinates, again.coordinates)


def test_a_head_short_of_the_target_lowers_alpha_only_while_that_raises_its_recall():
    queries, keys, aligned = small_head()
    graph, fixed = layout_of(queries, keys, aligned, alpha=4.0, recall_target=0.0)
    _, lowered = layout_of(queries, keys, aligned, alpha=4.0, recall_target=1.0, recall_floor=1.0, lower_steps=2)
    probe = RecallProbe.of(graph, seed=0)
    assert lowered.params["alpha"] < 4.0 and lowered.adjusted == {"alpha": (4.0, lowered.params["alpha"])}
    assert probe.recall(lowered.coordinates) > probe.recall(fixed.coordinates)


def test_a_head_between_the_floor_and_the_target_keeps_its_alpha():
    queries, keys, aligned = small_head()
    _, kept = layout_of(queries, keys, aligned, alpha=4.0, recall_target=1.0, recall_floor=0.0, lower_steps=2)
    assert kept.params["alpha"] == 4.0 and kept.adjusted == {}
