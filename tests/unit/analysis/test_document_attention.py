"""A long document's attention computed block by block (qkviz.analysis.documents.document_attention) against the dense
computation of qkviz.core.attention on small inputs: the pooled map equals pooling the dense softmax, the profile
equals direct counts, and no block holds more than its share of pairs."""

import numpy as np
import pytest

from qkviz.analysis import (DocumentHead, attention_blocks, document_overview, head_profile, pixel_edges,
                            pooled_attention, repeated_span)
from qkviz.core import LogitRule
from qkviz.core.attention import allowed_pairs, attention_probs

#: a decoder, a windowed decoder, an encoder, a windowed encoder, a capped one, a chunked one with sinks (Llama 4,
#: gpt-oss), ALiBi in a decoder and in a windowed encoder (blocks start mid-document: their positions count)
SETTINGS = [LogitRule(0.5, causal=True), LogitRule(0.5, causal=True, window=5), LogitRule(0.5),
            LogitRule(0.5, window=4), LogitRule(0.5, causal=True, softcap=2.0),
            LogitRule(0.5, causal=True, chunk=8, sink=1.0), LogitRule(0.5, causal=True, alibi_slope=0.2),
            LogitRule(0.5, window=6, alibi_slope=0.1)]


def make_head(n: int, rule: LogitRule, seed: int = 0) -> DocumentHead:
    generator = np.random.default_rng(seed)
    return DocumentHead(generator.normal(size=(n, 4)).astype(np.float32) * 2,
                        generator.normal(size=(n, 4)).astype(np.float32) * 2, rule)


def dense(head: DocumentHead) -> np.ndarray:
    return attention_probs(head.queries, head.keys, head.rule)


def pool_dense(matrix: np.ndarray, row_edges, column_edges, reduce: str) -> np.ndarray:
    out = np.zeros((len(row_edges) - 1, len(column_edges) - 1))
    for r in range(len(row_edges) - 1):
        for c in range(len(column_edges) - 1):
            cell = matrix[row_edges[r]:row_edges[r + 1], column_edges[c]:column_edges[c + 1]]
            out[r, c] = cell.max() if reduce == "max" else cell.mean()
    return out


@pytest.mark.parametrize("rule", SETTINGS)
@pytest.mark.parametrize("reduce", ["max", "mean"])
@pytest.mark.parametrize("rows, columns, shape", [(None, None, (7, 5)), ((10, 30), (3, 25), (6, 9)),
                                                  ((4, 9), (0, 37), (20, 20))])
def test_the_pooled_map_is_the_dense_softmax_pooled(rule, reduce, rows, columns, shape):
    head = make_head(37, rule)
    pooled = pooled_attention(head, rows, columns, shape, reduce, max_cells=60)     # many blocks
    rows, columns = rows or (0, 37), columns or (0, 37)
    assert pooled.row_edges[0] == rows[0] and pooled.row_edges[-1] == rows[1]
    assert np.all(np.diff(pooled.row_edges) >= 1) and np.all(np.diff(pooled.column_edges) >= 1)
    assert pooled.values.shape == (min(shape[0], rows[1] - rows[0]), min(shape[1], columns[1] - columns[0]))
    expected = pool_dense(dense(head), pooled.row_edges, pooled.column_edges, reduce)
    assert np.allclose(pooled.values, expected, rtol=1e-10, atol=1e-14)
    allowed = pool_dense(allowed_pairs(37, rule).astype(float), pooled.row_edges, pooled.column_edges, "max")
    assert np.array_equal(pooled.allowed, allowed > 0)


def test_blocks_hold_at_most_their_share_of_pairs():
    head = make_head(100, LogitRule(0.5, causal=True))
    blocks = list(attention_blocks(head, pixel_edges(0, 100, 100), max_cells=500))
    assert len(blocks) > 5
    assert all(probs.size <= 500 or stop - first == 1 for first, stop, _, probs in blocks)
    assert [block[0] for block in blocks[1:]] == [block[1] for block in blocks[:-1]]
    assert np.allclose(np.concatenate([probs.sum(axis=1) for *_, probs in blocks]), 1.0)


def repeated_ids(seed: int = 1) -> np.ndarray:
    generator = np.random.default_rng(seed)
    first = generator.integers(0, 1000, size=40)
    return np.concatenate([first, generator.integers(1000, 2000, size=5), first[:30]])


def test_a_repeated_passage_is_found_with_its_induction_targets():
    ids = repeated_ids()
    repeat = repeated_span(ids, min_length=8)
    assert repeat.offset == 45
    assert np.array_equal(repeat.queries, np.arange(45, 75))
    assert np.array_equal(repeat.targets, np.arange(1, 31))
    assert np.all(ids[repeat.queries] == ids[repeat.targets - 1])
    assert repeated_span(np.arange(200), min_length=8) is None


@pytest.mark.parametrize("rule", SETTINGS)
def test_the_profile_equals_direct_counts(rule):
    ids = repeated_ids()
    n = len(ids)
    head = make_head(n, rule, seed=3)
    special = np.zeros(n, dtype=bool)
    special[[0, 44]] = True
    repeat = repeated_span(ids, min_length=8)
    profile = head_profile(head, special, repeat, max_cells=300)
    weights = dense(head)
    distance = np.abs(np.arange(n)[:, None] - np.arange(n)[None, :])
    bins = np.searchsorted(profile.distance_edges, distance, side="right") - 1
    mass = np.bincount(bins.ravel(), weights=weights.ravel(), minlength=len(profile.distance_mass)) / n
    assert list(profile.distance_edges[:5]) == [0, 1, 2, 4, 8] and profile.distance_edges[-1] >= n
    # 1 less the mean share of a sink, where the head has one
    assert np.allclose(profile.distance_mass, mass) and profile.distance_mass.sum() == pytest.approx(weights.sum() / n)
    assert profile.first_token == pytest.approx(weights[:, 0].mean())
    assert profile.special_tokens == pytest.approx(weights[:, special].sum(axis=1).mean())
    assert profile.previous_token == pytest.approx(weights[np.arange(1, n), np.arange(n - 1)].mean())
    assert profile.n_induction == 30
    assert profile.induction == pytest.approx(weights[repeat.queries, repeat.targets].mean())
    assert head_profile(head, special, None).induction is None


def test_one_pass_gives_the_map_and_the_profile():
    ids = repeated_ids()
    head = make_head(len(ids), LogitRule(0.5, causal=True, window=6), seed=5)
    special = np.zeros(len(ids), dtype=bool)
    repeat = repeated_span(ids, min_length=8)
    pooled, profile = document_overview(head, special, repeat, (9, 11), "mean", max_cells=200)
    alone = pooled_attention(head, shape=(9, 11), reduce="mean")
    assert np.allclose(pooled.values, alone.values) and np.array_equal(pooled.allowed, alone.allowed)
    other = head_profile(head, special, repeat)
    assert np.allclose(profile.distance_mass, other.distance_mass)
    assert profile.induction == pytest.approx(other.induction)
    with pytest.raises(ValueError, match="reduce"):
        pooled_attention(head, reduce="median")


@pytest.mark.parametrize("rule", SETTINGS)
def test_blocks_on_two_threads_give_the_figures_of_one(rule):
    """Each block writes its own rows of the map and the profile's sums are added in block order, so the
    threaded overview is bit for bit the serial one."""
    head = make_head(120, rule, seed=3)
    special = np.zeros(120, dtype=bool)
    special[[0, 50]] = True
    ids = np.arange(120) % 40                                        # a passage repeated every 40 tokens
    serial = document_overview(head, special, repeated_span(ids, 8), (30, 30), "mean", max_cells=300, threads=1)
    threaded = document_overview(head, special, repeated_span(ids, 8), (30, 30), "mean", max_cells=300, threads=2)
    assert np.array_equal(serial[0].values, threaded[0].values)
    assert np.array_equal(serial[1].distance_mass, threaded[1].distance_mass)
    assert (serial[1].first_token, serial[1].special_tokens, serial[1].previous_token, serial[1].induction) == (
        threaded[1].first_token, threaded[1].special_tokens, threaded[1].previous_token, threaded[1].induction)
    region = pooled_attention(head, (20, 90), (10, 80), (12, 12), "max", max_cells=200, threads=2)
    assert np.array_equal(region.values, pooled_attention(head, (20, 90), (10, 80), (12, 12), "max", max_cells=200,
                                                          threads=1).values)
