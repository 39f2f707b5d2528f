"""Figure blocks rendered from ``bench/results/*.json``; registered with :func:`figure_results.figure` when imported."""

from __future__ import annotations
