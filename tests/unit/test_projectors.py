"""Layouts keep neighbourhoods (trustworthiness) on structured data (on a real MiniLM head:
tests/integration/test_bundled_models.py)."""

import numpy as np
import pytest
from sklearn.manifold import trustworthiness

from qkviz.core.errors import QkvizError
from qkviz.projection.methods import project_points as project


def blobs(n_points: int = 600, n_blobs: int = 6, d: int = 32, seed: int = 0) -> np.ndarray:
    """Gaussian clusters with structure inside each (a line through the cluster)."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(0, 8, (n_blobs, d))
    direction = rng.normal(0, 1, (n_blobs, d))
    labels = rng.integers(0, n_blobs, n_points)
    along = rng.uniform(-2, 2, n_points)[:, None]
    return (centres[labels] + along * direction[labels] + rng.normal(0, 0.6, (n_points, d))).astype(np.float32)


@pytest.mark.parametrize("method", ["tsne", "umap"])
def test_2d_layouts_are_trustworthy_on_structured_data(method):
    points = blobs()
    projection = project(points, method, 2, seed=0)
    assert projection.coordinates.shape == (600, 2) and projection.coordinates.dtype == np.float32
    assert trustworthiness(points, projection.coordinates, n_neighbors=10) >= 0.9


@pytest.mark.parametrize("method", ["pca", "umap", "tsne"])
def test_3d_layouts_and_seeds(method):
    points = blobs(300)
    first = project(points, method, 3, seed=1).coordinates
    again = project(points, method, 3, seed=1).coordinates
    assert first.shape == (300, 3)
    np.testing.assert_allclose(first, again, atol=1e-5)


def test_a_random_layout_is_not_trustworthy():
    """The trustworthiness bound can fail: random coordinates score far below it."""
    points = blobs()
    assert trustworthiness(points, np.random.default_rng(0).normal(size=(600, 2)), n_neighbors=10) < 0.7


def test_parameters_too_large_for_the_points_are_reduced_and_recorded():
    points = blobs(40)
    tsne = project(points, "tsne", 2, perplexity=30)
    assert tsne.params["perplexity"] == pytest.approx(13.0) and tsne.adjusted["perplexity"] == (30, 13.0)
    umap = project(points, "umap", 2, n_neighbors=50)
    assert umap.params["n_neighbors"] == 39


def test_bad_requests_are_clear_errors():
    with pytest.raises(QkvizError, match="unknown projection method 'mds'"):
        project(blobs(50), "mds", 2)
    with pytest.raises(QkvizError, match="unknown dimension 4"):
        project(blobs(50), "pca", 4)
    with pytest.raises(QkvizError, match="tsne has no parameter min_dist"):
        project(blobs(50), "tsne", 2, min_dist=0.3)


def test_3d_tsne_starts_from_the_2d_layout_whether_given_or_recomputed():
    points = blobs(300)
    layout_2d = project(points, "tsne", 2, seed=2).coordinates
    given = project(points, "tsne", 3, seed=2, tsne_2d=layout_2d).coordinates
    recomputed = project(points, "tsne", 3, seed=2).coordinates
    np.testing.assert_allclose(given, recomputed, atol=1e-4)
    assert trustworthiness(points, given, n_neighbors=10) >= 0.9
    assert given[:, 2].std() > 0.1 * given[:, :2].std()  # a real third axis, not a flat lift
