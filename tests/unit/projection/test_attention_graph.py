"""The attention-faithful layouts' graph: exact top partners, softmax weights, the sink cap, and a planted
head where the attention pairs are far apart in the aligned space."""

import numpy as np
import pytest

from qkviz import QkvizError
from qkviz.core import Alignment, align_head
from qkviz.projection import project_points
from qkviz.neighbours import top_logits
from qkviz.projection.attention_graph import attention_graph
from qkviz.core import LogitRule


def dense_reference(queries, keys, scale, k, temperature, candidates=None):
    """The attention term by brute force: every logit, the k best per row, a softmax over them."""
    n = len(queries)
    logits = scale * queries @ keys.T
    matrix = np.zeros((2 * n, 2 * n))
    allowed = np.full(n, -np.inf)
    allowed[np.arange(n) if candidates is None else candidates] = 0.0
    for i in range(n):
        best = np.argsort(-(logits[i] + allowed))[:k]
        weights = np.exp((logits[i, best] - logits[i, best].max()) / temperature)
        matrix[i, n + best] += weights / weights.sum()
    for j in range(n):
        best = np.argsort(-logits[:, j])[:k]
        weights = np.exp((logits[best, j] - logits[best, j].max()) / temperature)
        matrix[n + j, best] += weights / weights.sum()
    matrix = (matrix + matrix.T) / 2
    return matrix / matrix.sum()


def test_the_attention_term_is_each_points_top_partners_softmaxed():
    rng = np.random.default_rng(1)
    queries, keys = rng.normal(size=(40, 8)), rng.normal(size=(40, 8))
    aligned = align_head(queries, keys, Alignment()).points
    graph = attention_graph(queries, keys, aligned, LogitRule(0.7), k=5, alpha=0.0, temperature=0.5, key_cap=1e9)
    np.testing.assert_allclose(graph.matrix.toarray(), dense_reference(queries, keys, 0.7, 5, 0.5), rtol=1e-5, atol=1e-9)
    assert len(graph.sinks) == 0


def planted_sink_head(n_sentences: int = 12, length: int = 10, d: int = 8, seed: int = 6):
    """Sentences of ``length`` tokens whose first-token key is every query's strongest key (a first-token
    sink, as in most of MiniLM's heads); returns queries, keys and the first tokens' indices."""
    rng = np.random.default_rng(seed)
    n = n_sentences * length
    queries, keys = rng.normal(size=(n, d)), rng.normal(size=(n, d))
    sink = np.zeros(d)
    sink[0] = 1.0
    first = np.arange(0, n, length)
    queries += 4 * sink
    keys[first] += 6 * sink
    return queries, keys, first


def test_hide_first_token_leaves_the_sink_out_of_the_queries_keys():
    queries, keys, first = planted_sink_head()
    n = len(queries)
    aligned = align_head(queries, keys, Alignment()).points
    kept = attention_graph(queries, keys, aligned, LogitRule(1.0), k=4, alpha=0.0, first_tokens=first)
    hidden = attention_graph(queries, keys, aligned, LogitRule(1.0), k=4, alpha=0.0, hide_first_token=True, first_tokens=first)

    def first_share(graph):      # of the query-key weight, the share on first-token keys
        block = graph.matrix[:n, n:]
        return block[:, first].sum() / block.sum()

    assert first_share(kept) > 0.5 and first_share(hidden) < 0.1, (first_share(kept), first_share(hidden))
    rest = np.setdiff1d(np.arange(n), first)   # hidden: top 4 over the other keys, renormalised, exactly
    np.testing.assert_allclose(hidden.matrix.toarray(), dense_reference(queries, keys, 1.0, 4, 1.0, rest),
                               rtol=1e-5, atol=1e-9)
    reference_with_sink = dense_reference(queries, keys, 1.0, 4, 1.0)
    assert not np.allclose(hidden.matrix.toarray(), reference_with_sink, atol=1e-6)
    # the first-token keys keep their own links to their strongest queries
    assert (hidden.matrix[n + first, :n].sum(axis=1) > 0).all()


def test_hide_first_token_needs_the_first_tokens_and_enough_other_keys():
    queries, keys, first = planted_sink_head(n_sentences=3, length=4)
    aligned = align_head(queries, keys, Alignment()).points
    with pytest.raises(ValueError, match="first_tokens"):
        attention_graph(queries, keys, aligned, LogitRule(1.0), k=4, alpha=0.0, hide_first_token=True)
    with pytest.raises(QkvizError, match="at most the 9 keys left") as error:
        attention_graph(queries, keys, aligned, LogitRule(1.0), k=10, alpha=0.0, hide_first_token=True, first_tokens=first)
    assert "\n" not in str(error.value)


def test_with_first_tokens_hidden_a_sink_heads_queries_no_longer_gather_on_the_sink():
    """The layout: without the option many queries have a first-token key nearest; with it, no more than chance."""
    queries, keys, first = planted_sink_head(n_sentences=30, length=10, d=16, seed=7)
    n = len(queries)
    aligned = align_head(queries, keys, Alignment()).points

    def sink_near(hide):
        graph = attention_graph(queries, keys, aligned, LogitRule(1.0), hide_first_token=hide, first_tokens=first)
        layout = project_points(aligned, "attn-tsne", 2, attention=graph, hide_first_token=hide).coordinates
        nearest = np.argmin(((layout[:n, None] - layout[None, n:]) ** 2).sum(-1), axis=1)
        return np.isin(nearest, first).mean()

    kept, hidden = sink_near(False), sink_near(True)
    assert kept > 0.3 and hidden < 0.1, (kept, hidden)   # chance: 0.1 (30 of the 300 keys)


def test_a_sink_key_is_capped_and_reported():
    rng = np.random.default_rng(3)
    n = 60
    queries, keys = rng.normal(size=(n, 6)), rng.normal(size=(n, 6))
    keys[7] = 20 * queries.mean(axis=0) / np.linalg.norm(queries.mean(axis=0)) + 5 * np.ones(6)  # everyone's best key
    queries += keys[7] / 10
    aligned = align_head(queries, keys, Alignment()).points
    free = attention_graph(queries, keys, aligned, LogitRule(1.0), k=4, alpha=0.0, key_cap=1e9)
    capped = attention_graph(queries, keys, aligned, LogitRule(1.0), k=4, alpha=0.0, key_cap=2.0)
    sink_share = lambda graph: graph.matrix[:n, n + 7].sum() / graph.matrix[:n, n:].sum()  # noqa: E731
    assert capped.sinks[0] == 7 and len(free.sinks) == 0
    assert sink_share(capped) < sink_share(free) / 3


def test_a_planted_head_is_shown_by_attn_tsne_and_not_by_tsne():
    """Each query's strongest key is a planted partner that shares only a small part of its direction: in the
    aligned space (cosine) the pairs are far apart, so t-SNE separates them; the attention graph joins them."""
    rng = np.random.default_rng(0)
    n, d = 600, 32
    basis = np.linalg.qr(rng.normal(size=(d, d)))[0]
    keys = rng.normal(size=(n, 16)) @ basis[:16]
    keys /= np.linalg.norm(keys, axis=1, keepdims=True)
    partner = rng.permutation(n)
    queries = 3.0 * keys[partner] + 1.5 * rng.normal(size=(n, 16)) @ basis[16:]
    assert (top_logits(queries, keys, 1, LogitRule(1.0))[0][:, 0] == partner).all()
    aligned = align_head(queries, keys, Alignment()).points

    def partner_recall(layout):
        distances = ((layout[:n, None] - layout[None, n:]) ** 2).sum(-1)
        nearest = np.argsort(distances, axis=1)[:, :10]
        return np.mean([partner[i] in nearest[i] for i in range(n)])

    graph = attention_graph(queries, keys, aligned, LogitRule(1.0), k=10, alpha=0.5)
    faithful = partner_recall(project_points(aligned, "attn-tsne", 2, attention=graph).coordinates)
    plain = partner_recall(project_points(aligned, "tsne", 2).coordinates)
    assert faithful > 0.5 and plain < 0.1, (faithful, plain)


@pytest.mark.parametrize("option, value, fragment", [
    ("k", 0, "k must be between 1"), ("k", 41, "k must be between 1"), ("alpha", -0.1, "alpha"),
    ("alpha", float("nan"), "alpha"), ("temperature", 0.0, "temperature"), ("same_kind_k", 40, "same_kind_k"),
    ("key_cap", 0.5, "key_cap"), ("hide_first_token", "yes", "hide_first_token")])
def test_bad_graph_parameters_are_one_line_errors(option, value, fragment):
    rng = np.random.default_rng(4)
    queries, keys = rng.normal(size=(40, 4)), rng.normal(size=(40, 4))
    with pytest.raises(QkvizError, match=fragment) as error:
        attention_graph(queries, keys, np.vstack([queries, keys]), LogitRule(1.0), **{option: value})
    assert "\n" not in str(error.value)
