"""qkviz.analysis.cluster_counts: how many clusters a search's matches form in each head's layout."""

import numpy as np

from qkviz.analysis import CLUSTER_GRID, cluster_counts


def test_cluster_counts_tell_grouped_matches_from_scattered_ones():
    rng = np.random.default_rng(0)
    n_tokens = 200
    points = rng.uniform(0, 1, size=(3, 2 * n_tokens, 2)).astype(np.float32)
    matches = np.arange(0, 40)
    # head 0: the matches' queries and keys form two tight blobs; head 1: scattered; head 2: no layout
    points[0, matches] = 0.2 + rng.normal(0, 0.005, size=(40, 2))
    points[0, n_tokens + matches] = 0.8 + rng.normal(0, 0.005, size=(40, 2))
    points[2] = np.nan
    counts = cluster_counts(points, matches)
    assert counts[0] == 2
    assert counts[1] > 10
    assert counts[2] == -1
    assert cluster_counts(points, np.zeros(0, dtype=np.int64)).tolist() == [0, 0, -1]


def test_matches_in_touching_cells_are_one_cluster_and_in_distant_cells_two():
    cell = 1 / CLUSTER_GRID
    points = np.full((1, 6, 2), 0.5, dtype=np.float32)              # 3 tokens: queries 0-2, keys 3-5
    points[0, [0, 3]] = [0.5 * cell, 0.5 * cell]                    # cell (0, 0)
    points[0, [1, 4]] = [1.5 * cell, 1.5 * cell]                    # cell (1, 1): touches (0, 0) at a corner
    points[0, [2, 5]] = [0.9, 0.9]                                  # far away
    assert cluster_counts(points, np.array([0, 1])).tolist() == [1]
    assert cluster_counts(points, np.array([0, 1, 2])).tolist() == [2]
    assert cluster_counts(points, np.array([0, 2]), grid=1).tolist() == [1]      # one cell holds everything
