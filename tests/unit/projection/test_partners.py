"""Partner recall: the measure of how faithfully a layout shows who attends to whom."""

import numpy as np
import pytest

from qkviz.neighbours import nearest_euclidean, partner_recall, top_logits
from qkviz.neighbours import top_k as top_k_module
from qkviz.core import LogitRule


def planted(n=200, d=8, seed=0):
    rng = np.random.default_rng(seed)
    queries, keys = rng.normal(size=(n, d)), rng.normal(size=(n, d))
    best = top_logits(queries, keys, 1, LogitRule(1.0))[0][:, 0]
    return rng, queries, keys, best


def test_a_layout_that_puts_each_query_on_its_strongest_key_keeps_every_partner():
    rng, queries, keys, best = planted()
    key_points = rng.normal(size=(len(keys), 2)) * 100
    layout = np.vstack([key_points[best] + 1e-3 * rng.normal(size=(len(queries), 2)), key_points])
    assert partner_recall(queries, keys, LogitRule(1.0), layout, k=1, sample=None)["query"] == 1.0


def test_a_random_layout_keeps_about_chance():
    rng, queries, keys, _ = planted(n=400)
    found = partner_recall(queries, keys, LogitRule(1.0), rng.normal(size=(800, 2)), k=10, sample=None)
    assert found["chance"] == 10 / 400
    assert found["query"] < 0.08 and found["key"] < 0.08


def test_ties_count_whichever_duplicate_the_layout_shows():
    rng, queries, keys, best = planted()
    keys = np.vstack([keys, keys[best[0]]])          # a duplicate of query 0's best key: the two tie
    queries = np.vstack([queries, queries[:1]])
    n = len(keys)
    layout = rng.normal(size=(2 * n, 2)) * 100
    away = partner_recall(queries, keys, LogitRule(1.0), layout, k=1, sample=None)["query"]
    layout[0] = layout[n + n - 1] + 1e-3              # query 0 moves onto the duplicate, not the original
    assert partner_recall(queries, keys, LogitRule(1.0), layout, k=1, sample=None)["query"] == pytest.approx(away + 1 / n)


@pytest.mark.parametrize("block_cells", [64, 1 << 22])         # many small blocks, one block
def test_nearest_euclidean_is_exact(monkeypatch, block_cells):
    monkeypatch.setattr(top_k_module, "BLOCK_CELLS", block_cells)
    rng = np.random.default_rng(5)
    rows, candidates = rng.normal(size=(30, 3)), rng.normal(size=(50, 3))
    expected = np.argsort(((rows[:, None] - candidates[None]) ** 2).sum(-1), axis=1)[:, :4]
    np.testing.assert_array_equal(nearest_euclidean(rows, candidates, 4), expected)
