"""Distance-dot-product correlations: known answers on synthetic heads, the attending-pair rule."""

import numpy as np
import pytest
from scipy.stats import pearsonr, spearmanr

from qkviz.core import LogitRule
from qkviz.core.alignment import Alignment, align_head
from qkviz.core.attention import allowed_pairs
from qkviz.analysis.statistics.correlation import (PairSet, head_space_figures, key_ranges, pair_distances, pair_dots,
                               projection_space_name)
from qkviz.analysis.statistics.rank_correlation import (QueryGroups, correlations, mean_query_spearman, rank_values,
                                          sampling_error_bound)
from qkviz.store.projections import ProjectionSpec

LENGTHS = np.array([1, 4, 9, 2, 13, 7])


def sentence_layout(lengths):
    """Per-token sentence and position, per-sentence first token, for sentences of ``lengths``."""
    sentence = np.repeat(np.arange(len(lengths)), lengths)
    first = np.cumsum(lengths) - lengths
    position = np.arange(lengths.sum()) - first[sentence]
    return sentence, position, first


def all_pairs(lengths, causal, window=None) -> PairSet:
    sentence, position, first = sentence_layout(lengths)
    lo, hi = key_ranges(sentence, position, first, lengths, LogitRule(1.0, causal=causal, window=window))
    query = np.repeat(np.arange(len(lo)), hi - lo)
    key = np.concatenate([np.arange(a, b) for a, b in zip(lo, hi)])
    return PairSet(query, key, len(query))


def rank_both(distances, dots, pairs):
    groups = QueryGroups.of(pairs.query_index)
    return rank_values(distances, groups), rank_values(dots, groups), groups


@pytest.mark.parametrize("causal,window", [(False, None), (True, None), (True, 3), (False, 2)])
def test_pairs_follow_the_models_mask_and_never_cross_sentences(causal, window):
    pairs = all_pairs(LENGTHS, causal, window)
    sentence, _, first = sentence_layout(LENGTHS)
    expected = set()
    for s, length in enumerate(LENGTHS):
        allowed = allowed_pairs(int(length), LogitRule(1.0, causal=causal, window=window))
        expected |= {(first[s] + i, first[s] + j) for i, j in zip(*np.nonzero(allowed))}
    found = set(zip(pairs.query_index.tolist(), pairs.key_index.tolist()))
    assert found == expected
    assert (sentence[pairs.query_index] == sentence[pairs.key_index]).all()


def test_equal_norms_make_distance_a_decreasing_function_of_the_dot_product():
    rng = np.random.default_rng(0)
    queries = rng.normal(size=(LENGTHS.sum(), 8))
    keys = rng.normal(size=(LENGTHS.sum(), 8))
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    keys /= np.linalg.norm(keys, axis=1, keepdims=True)
    pairs = all_pairs(LENGTHS, causal=False)
    dots = pair_dots(queries, keys, pairs)
    distances, dots = head_space_figures(queries, keys, pairs, dots)["original"]
    pearson, spearman = correlations(*rank_both(distances, dots, pairs)[:2])
    assert spearman == pytest.approx(-1.0, abs=1e-12)
    assert -1 < pearson < -0.95   # distance = sqrt(2 - 2 q.k) is monotone, not linear
    assert mean_query_spearman(*rank_both(distances, dots, pairs)) == pytest.approx(-1.0, abs=1e-12)


def test_head_space_distances_equal_those_between_the_aligned_points():
    rng = np.random.default_rng(1)
    queries = rng.normal(size=(LENGTHS.sum(), 6)) + 2.0
    keys = 3 * rng.normal(size=(LENGTHS.sum(), 6)) - 1.0
    pairs = all_pairs(LENGTHS, causal=True)
    figures = head_space_figures(queries, keys, pairs, pair_dots(queries, keys, pairs))
    for space, alignment in (("original", Alignment(False, False)), ("translated", Alignment(True, False)),
                             ("translated+scaled", Alignment(True, True))):
        aligned = align_head(queries, keys, alignment)
        direct = pair_distances(aligned.queries.astype(np.float64), aligned.keys.astype(np.float64), pairs)
        np.testing.assert_allclose(figures[space][0], direct, rtol=1e-5, err_msg=space)
        direct_dots = np.einsum("ij,ij->i", aligned.queries[pairs.query_index].astype(np.float64),
                                aligned.keys[pairs.key_index])
        np.testing.assert_allclose(figures[space][1], direct_dots, rtol=1e-5, atol=1e-5, err_msg=space)


def test_correlations_agree_with_scipy():
    rng = np.random.default_rng(2)
    pairs = all_pairs(LENGTHS, causal=False)
    dots = rng.normal(size=len(pairs.query_index))
    distances = -0.5 * dots + rng.normal(size=len(dots))
    distances[:5] = distances[5]   # ties get average ranks, as in scipy
    pearson, spearman = correlations(*rank_both(distances, dots, pairs)[:2])
    assert pearson == pytest.approx(pearsonr(distances, dots).statistic, abs=1e-12)
    assert spearman == pytest.approx(spearmanr(distances, dots).statistic, abs=1e-12)


def test_query_spearman_is_the_mean_of_per_query_spearman_correlations():
    rng = np.random.default_rng(3)
    pairs = all_pairs(LENGTHS, causal=True)
    dots = rng.normal(size=len(pairs.query_index))
    distances = rng.normal(size=len(dots)) - 0.3 * dots
    expected = [spearmanr(distances[pairs.query_index == q], dots[pairs.query_index == q]).statistic
                for q in np.unique(pairs.query_index) if (pairs.query_index == q).sum() >= 3]
    found = mean_query_spearman(*rank_both(distances, dots, pairs))
    assert found == pytest.approx(np.mean(expected), abs=1e-12)
    # A constant added to every dot product of one query changes nothing.
    shifted = dots + 10.0 * pairs.query_index
    assert mean_query_spearman(*rank_both(distances, shifted, pairs)) == pytest.approx(found, abs=1e-12)


def test_sampled_correlations_fall_within_the_stated_interval_95_percent_of_the_time():
    rng = np.random.default_rng(4)
    n = 400_000
    dots = rng.standard_t(df=6, size=n)          # heavier tails than normal, as attention logits have
    distances = np.sqrt(np.maximum(20 - 2 * dots, 0)) + rng.normal(scale=0.3, size=n)
    query = np.repeat(np.arange(n // 100), 100)
    exact = correlations(*rank_both(distances, dots, PairSet(query, query, n))[:2])
    covered = {"pearson": 0, "spearman": 0}
    trials = 60
    for seed in range(trials):
        chosen = np.sort(np.random.default_rng(seed).integers(0, n, 4000))
        sample = PairSet(query[chosen], query[chosen], n)
        assert not sample.exact
        ranked = rank_both(distances[chosen], dots[chosen], sample)
        pearson, spearman = correlations(*ranked[:2])
        covered["pearson"] += abs(pearson - exact[0]) <= sampling_error_bound(distances[chosen], dots[chosen])
        covered["spearman"] += abs(spearman - exact[1]) <= sampling_error_bound(ranked[0].ranks, ranked[1].ranks)
    assert covered["pearson"] >= 0.85 * trials and covered["spearman"] >= 0.85 * trials, covered


def test_constant_values_give_nan_not_a_number_that_looks_real():
    pairs = all_pairs(LENGTHS, causal=False)
    dots = np.ones(len(pairs.query_index))
    distances = np.arange(len(dots), dtype=float)
    assert all(np.isnan(correlations(*rank_both(distances, dots, pairs)[:2])))
    assert np.isnan(mean_query_spearman(*rank_both(distances, dots, pairs)))


def test_projection_spaces_are_named_by_method_dim_and_differing_settings():
    plain = ProjectionSpec.of(0, 0, "tsne", 2, perplexity=30.0, seed=0)
    other = ProjectionSpec.of(0, 0, "tsne", 2, perplexity=50.0, seed=0)
    assert projection_space_name(plain, [plain]) == "tsne-2d"
    assert projection_space_name(other, [plain, other]) == "tsne-2d perplexity=50.0"
