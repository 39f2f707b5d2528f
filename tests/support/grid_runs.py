"""The runs of real models' head grids: they live in ``bench/support/grid_runs.py`` (the matrix bench makes them
too); the tests import them from here."""

from bench.support.grid_runs import GRIDS, grid_model, grid_run  # noqa: F401  (re-exported for the tests)
