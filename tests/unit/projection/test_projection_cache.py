"""The projection cache: round trip, keys that separate settings, damaged entries are absent."""

import numpy as np
import pytest

from qkviz.store.projections import ProjectionCache, ProjectionSpec


@pytest.fixture
def cache(tmp_path):
    return ProjectionCache(tmp_path, run_fingerprint="f" * 64)


def test_round_trip(cache):
    spec = ProjectionSpec.of(1, 2, "tsne", 2, perplexity=30, seed=0)
    coordinates = np.random.default_rng(0).normal(size=(40, 2))
    assert cache.load(spec) is None
    cache.store(spec, coordinates, details={"seconds": 1.5})
    np.testing.assert_array_equal(cache.load(spec), coordinates.astype(np.float32))
    assert cache.sidecar(spec)["details"] == {"seconds": 1.5}
    assert cache.sidecar(spec)["spec"]["params"] == {"perplexity": 30, "seed": 0}


def test_every_setting_is_part_of_the_key(cache, tmp_path):
    base = ProjectionSpec.of(1, 2, "umap", 2, n_neighbors=15)
    variants = [ProjectionSpec.of(0, 2, "umap", 2, n_neighbors=15), ProjectionSpec.of(1, 3, "umap", 2, n_neighbors=15),
                ProjectionSpec.of(1, 2, "tsne", 2, n_neighbors=15), ProjectionSpec.of(1, 2, "umap", 3, n_neighbors=15),
                ProjectionSpec.of(1, 2, "umap", 2, translate_keys=False, n_neighbors=15),
                ProjectionSpec.of(1, 2, "umap", 2, scale_norms=False, n_neighbors=15),
                ProjectionSpec.of(1, 2, "umap", 2, n_neighbors=30)]
    keys = {cache.key(spec) for spec in [base, *variants]}
    assert len(keys) == 1 + len(variants)
    assert cache.key(base) == cache.key(ProjectionSpec.of(1, 2, "umap", 2, n_neighbors=15))
    other_run = ProjectionCache(tmp_path, run_fingerprint="e" * 64)
    assert other_run.key(base) != cache.key(base)


@pytest.mark.parametrize("damage", ["truncate", "alter", "delete_array", "no_sidecar"])
def test_damaged_or_partial_entries_are_absent(cache, damage):
    spec = ProjectionSpec.of(0, 0, "pca", 3)
    array_path = cache.store(spec, np.ones((10, 3)))
    sidecar_path = array_path.with_suffix(".json")
    if damage == "truncate":
        array_path.write_bytes(array_path.read_bytes()[:-8])
    elif damage == "alter":
        data = bytearray(array_path.read_bytes())
        data[-1] ^= 0xFF
        array_path.write_bytes(bytes(data))
    elif damage == "delete_array":
        array_path.unlink()
    else:
        sidecar_path.unlink()  # an interrupted store: the array is there, the entry is not
    assert cache.load(spec) is None
    cache.store(spec, np.full((10, 3), 2.0))
    assert cache.load(spec)[0, 0] == 2.0


def test_shape_must_match_the_dimension(cache):
    with pytest.raises(ValueError, match="dim 2"):
        cache.store(ProjectionSpec.of(0, 0, "pca", 2), np.ones((10, 3)))


def test_leftovers_of_a_dead_writer_are_removed_and_nothing_else(cache):
    from qkviz.store.files import temporary_name

    dead, other = ProjectionSpec.of(0, 1, "pca", 2), ProjectionSpec.of(0, 2, "pca", 2)
    cache.store(dead, np.ones((10, 2)))
    cache.record_failure(dead, "it failed once")
    array_path = cache.directory / f"{cache.key(dead)}.npy"
    left = [temporary_name(array_path), temporary_name(cache.directory / "failures" / f"{cache.key(dead)}.json")]
    kept = temporary_name(cache.directory / f"{cache.key(other)}.npy")    # another head's writer, still alive
    for path in (*left, kept):
        path.write_bytes(b"\x93NUMPY")
    assert cache.remove_leftovers([dead]) == 2
    assert not any(path.exists() for path in left) and kept.exists()
    assert cache.contains(dead) and cache.remove_leftovers([dead]) == 0
