"""Layouts keep neighbourhoods (trustworthiness) on structured data (on a real MiniLM head:
tests/integration/models/test_bundled_models.py)."""

import warnings

import numpy as np
import pytest
from sklearn.manifold import trustworthiness

from qkviz.core.errors import QkvizError
from qkviz.projection import project_points as project


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
    with pytest.raises(QkvizError, match="negative_sample_rate must be a whole number >= 1, got 0"):
        project(blobs(50), "umap", 2, negative_sample_rate=0)


def test_3d_tsne_starts_from_the_2d_layout_whether_given_or_recomputed():
    points = blobs(300)
    layout_2d = project(points, "tsne", 2, seed=2).coordinates
    given = project(points, "tsne", 3, seed=2, start_2d=layout_2d).coordinates
    recomputed = project(points, "tsne", 3, seed=2).coordinates
    np.testing.assert_allclose(given, recomputed, atol=1e-4)
    assert trustworthiness(points, given, n_neighbors=10) >= 0.9
    assert given[:, 2].std() > 0.1 * given[:, :2].std()  # a real third axis, not a flat lift


def duplicated_groups(seed: int = 2, d: int = 16) -> np.ndarray:
    """A cloud and, far from it, groups of 5 identical points (as layer-0 heads have: the same token at the
    same position in every sentence). Each group is its own component of UMAP's graph, a 5-clique of
    equal weights on which the spectral initialisation's eigensolver fails."""
    rng = np.random.default_rng(seed)
    away = np.zeros(d)
    away[0] = 6.0
    groups = [np.repeat(rng.normal(size=(1, d)) - away, 5, axis=0) for _ in range(6)]
    return np.concatenate([rng.normal(size=(300, d)) + away, *groups]).astype(np.float32)


def spectral_failures(points: np.ndarray, **params) -> int:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        project(points, "umap", 2, n_epochs=20, **params)
    return sum("Spectral initialisation failed" in str(warning.message) for warning in caught)


def test_umap_starts_from_pca_and_never_warns_of_a_failed_spectral_initialisation():
    points = duplicated_groups()
    assert spectral_failures(points, init="spectral") >= 1     # umap's own default fails on this head
    assert spectral_failures(points) == 0
    assert project(points, "umap", 2, n_epochs=20).params["init"] == "pca"
    with pytest.raises(QkvizError, match="init 'random' is not one of pca, spectral"):
        project(points, "umap", 2, init="random")


def test_a_3d_umap_runs_n_epochs_3d_epochs_and_a_2d_one_n_epochs():
    points = blobs(300)
    three_d = project(points, "umap", 3).params
    assert three_d["n_epochs_3d"] == 100 and "n_epochs_3d" not in project(points, "umap", 2, n_epochs=5).params

    def layout(dim: int, **params) -> np.ndarray:
        return project(points, "umap", dim, seed=0, **params).coordinates

    # a 3D layout follows n_epochs_3d and ignores n_epochs (umap is deterministic for a seed and one thread)
    assert np.array_equal(layout(3, n_epochs_3d=30, n_epochs=1), layout(3, n_epochs_3d=30, n_epochs=400))
    assert not np.allclose(layout(3, n_epochs_3d=1), layout(3, n_epochs_3d=30))
    # a 2D layout follows n_epochs alone
    assert not np.allclose(layout(2, n_epochs=1), layout(2, n_epochs=30))
    with pytest.raises(QkvizError, match="n_epochs_3d must be a whole number >= 1, got 0"):
        project(points, "umap", 3, n_epochs_3d=0)
