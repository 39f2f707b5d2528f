"""The projection's progress: heads done, and the time left from the heads computed (cached ones cost nothing)."""

from qkviz.projection.project_run import HeadProgress
from qkviz.store.projections import ProjectionSpec


def outcome(layer: int, head: int, dim: int, cached: bool) -> dict:
    return {"spec": ProjectionSpec.of(layer, head, "pca", dim, True, True), "cached": cached}


def test_a_head_is_done_with_its_last_layout_and_cached_heads_stay_out_of_the_rate():
    specs = [outcome(layer, head, dim, False)["spec"] for layer in range(2) for head in range(2) for dim in (2, 3)]
    now = [0.0]
    with HeadProgress(specs, progress=False, clock=lambda: now[0]) as progress:
        progress.count(outcome(0, 0, 2, True))
        progress.count(outcome(0, 0, 3, True))          # head 0/0 found cached
        assert (progress.cached, progress.computed) == (1, 0)
        now[0] = 10.0
        progress.count(outcome(0, 1, 2, False))
        assert (progress.cached, progress.computed) == (1, 0)       # its 3D layout is still to come
        progress.count(outcome(0, 1, 3, True))
        assert (progress.cached, progress.computed) == (1, 1)
        assert progress.remaining() == 2 * 10.0         # two heads left at the one computed head's 10 s
