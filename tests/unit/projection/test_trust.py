"""Trustworthiness (qkviz.neighbours.trust): sklearn's figure on the same points, known answers, and the goals' verdicts."""

import math

import numpy as np
import pytest
from sklearn.manifold import trustworthiness as sklearn_trustworthiness

from qkviz.neighbours import (RECALL_GOAL, TRUST_GOAL, goal_verdict, layout_trust, meets_goals, reference_trust,
                              trust_reference, trustworthiness)


@pytest.mark.parametrize("n, d, dim, k", [(60, 8, 2, 10), (301, 16, 2, 10), (200, 5, 3, 7), (41, 3, 2, 1)])
def test_trustworthiness_is_sklearns_on_the_same_points(n, d, dim, k):
    rng = np.random.default_rng(n)
    points = rng.normal(size=(n, d))
    # a layout that keeps some of the structure: a noisy projection
    layout = points[:, :dim] + 0.5 * rng.normal(size=(n, dim))
    ours = trustworthiness(points, layout, k)
    assert ours == pytest.approx(sklearn_trustworthiness(points, layout, n_neighbors=k), abs=1e-9)
    assert 0.0 < ours < 1.0


def test_a_layout_equal_to_its_points_is_fully_trustworthy_and_a_shuffled_one_is_not():
    rng = np.random.default_rng(0)
    points = rng.normal(size=(400, 2)) * [5.0, 1.0]
    assert trustworthiness(points, points) == pytest.approx(1.0, abs=1e-12)
    shuffled = points[rng.permutation(len(points))]
    assert trustworthiness(points, shuffled) < 0.6
    # scaling and moving a layout changes no neighbour
    assert trustworthiness(points, 3 * points + 7) == pytest.approx(1.0, abs=1e-12)


def test_layout_trust_samples_its_points_and_is_nan_when_too_few():
    rng = np.random.default_rng(1)
    points = rng.normal(size=(3000, 6))
    layout = points[:, :2]
    sampled = layout_trust(points, layout, sample=500, seed=3)
    chosen = np.sort(np.random.default_rng(3).choice(3000, size=500, replace=False))
    assert sampled == trustworthiness(points[chosen], layout[chosen])
    assert layout_trust(points[:100], layout[:100], sample=None) == trustworthiness(points[:100], layout[:100])
    assert math.isnan(layout_trust(points[:20], layout[:20]))
    with pytest.raises(ValueError, match="does not lay out"):
        layout_trust(points, layout[:10])
    # one reference serves several layouts of the same points
    reference = trust_reference(points, sample=500, seed=3)
    assert reference_trust(reference, layout) == sampled
    assert reference_trust(reference, points[:, 3:5]) == layout_trust(points, points[:, 3:5], sample=500, seed=3)


def test_the_goals_verdicts():
    assert meets_goals(RECALL_GOAL, TRUST_GOAL) and not meets_goals(0.29, 0.95) and not meets_goals(0.5, 0.89)
    assert not meets_goals(None, 0.95) and not meets_goals(0.5, math.nan)
    assert goal_verdict(0.31, 0.874) == ("partner recall@10 31% (goal 30%: met), "
                                         "trustworthiness 0.87 (goal 0.90: not met)")
    assert goal_verdict(0.12, 0.95) == ("partner recall@10 12% (goal 30%: not met), "
                                        "trustworthiness 0.95 (goal 0.90: met)")
    assert goal_verdict(0.4, None).endswith("trustworthiness unknown (goal 0.90)")
