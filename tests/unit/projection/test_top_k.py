"""Top-k by dot product (qkviz.neighbours.top_k): the exact faiss search and its inverted-file approximation."""

import numpy as np
import pytest

from qkviz.neighbours import top_k
from qkviz.neighbours.top_k import APPROXIMATE_MIN, nearest_cosine, top_logits
from qkviz.core import LogitRule


def clustered(n: int, d: int = 16, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.normal(0, 3, (40, d))
    return (centres[rng.integers(0, 40, n)] + rng.normal(0, 1, (n, d))).astype(np.float32)


@pytest.fixture(scope="module")
def vectors():
    return clustered(600, seed=1), clustered(APPROXIMATE_MIN + 2000, seed=2)


def test_the_exact_search_is_numpy_brute_force(vectors):
    rows, columns = vectors
    found, logits = top_logits(rows, columns, 10, LogitRule(0.5))
    expected = np.argsort(-(rows @ columns.T), axis=1, kind="stable")[:, :10]
    assert np.mean(found == expected) > 0.999
    np.testing.assert_allclose(logits, 0.5 * np.take_along_axis(rows @ columns.T, found, axis=1), rtol=1e-5)


def test_the_approximate_search_finds_most_of_the_exact_top_k_with_true_logits(vectors):
    rows, columns = vectors
    exact, _ = top_logits(rows, columns, 10, LogitRule(0.5))
    found, logits = top_logits(rows, columns, 10, LogitRule(0.5), approximate=True)
    recall = np.mean([len(np.intersect1d(a, b)) / 10 for a, b in zip(exact, found)])
    assert recall > 0.9, recall
    np.testing.assert_allclose(logits, 0.5 * np.take_along_axis(rows @ columns.T, found, axis=1), rtol=1e-5)
    assert (np.diff(logits, axis=1) <= 1e-6).all()                         # best first
    near = nearest_cosine(rows, columns, 5, approximate=True)
    assert near.shape == (len(rows), 5) and (near >= 0).all()


def test_few_columns_are_searched_exactly_even_when_approximate(vectors):
    rows, columns = vectors
    few = columns[:APPROXIMATE_MIN - 1]
    assert np.array_equal(top_logits(rows, few, 10, LogitRule(1.0), approximate=True)[0], top_logits(rows, few, 10, LogitRule(1.0))[0])


def test_rows_whose_probed_cells_hold_too_few_columns_are_searched_exactly(vectors, monkeypatch):
    rows, columns = vectors
    monkeypatch.setattr(top_k, "PROBES", 1)        # one cell of about 110 columns: short of k = 150 for most rows
    found, logits = top_logits(rows, columns, 150, LogitRule(1.0), approximate=True)
    assert (found >= 0).all()
    exact, _ = top_logits(rows, columns, 150, LogitRule(1.0))
    assert np.mean([len(np.intersect1d(a, b)) / 150 for a, b in zip(exact, found)]) > 0.95
