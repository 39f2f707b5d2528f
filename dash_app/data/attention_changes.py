"""The compare view's per-head tables of attention change, computed once at start-up in a background thread.

Two runs the app serves are *comparable* when they hold the same tokens and the same grid of heads
(:func:`qkviz.analysis.check_comparable`). For every comparable pair, :class:`AttentionChanges` computes
``qkviz.attention_change(run_a, run_b)`` in one daemon thread, pair after pair, as soon as the app is built;
a request only reads what is ready (:meth:`AttentionChanges.table`) and is never where it is computed.
The distance is symmetric, so the table of ``(b, a)`` is that of ``(a, b)``.
"""

from __future__ import annotations

import logging
import threading
from itertools import combinations

import pandas as pd

from dash_app.data.run_data import RunData
from qkviz import QkvizError, attention_change
from qkviz.analysis import shape_difference, token_difference

logger = logging.getLogger(__name__)


def comparable_pairs(runs: list[RunData]) -> list[tuple[int, int]]:
    """``(a, b)`` with ``a < b`` for every two runs over the same tokens with the same heads."""
    return [(a, b) for a, b in combinations(range(len(runs)), 2)
            if shape_difference(runs[a].run, runs[b].run) is None and token_difference(runs[a].run, runs[b].run) is None]


class AttentionChanges:
    """Every comparable pair's :func:`qkviz.attention_change` table, made in the background by :meth:`start`."""

    def __init__(self, runs: list[RunData]):
        self.runs = runs
        self.pairs = comparable_pairs(runs)
        self._tables: dict[tuple[int, int], pd.DataFrame] = {}
        self._errors: dict[tuple[int, int], str] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Compute every pair's table in a daemon thread (nothing to do without comparable pairs)."""
        if self.pairs and self._thread is None:
            self._thread = threading.Thread(target=self._compute_all, name="attention-change", daemon=True)
            self._thread.start()

    def _compute_all(self) -> None:
        for pair in self.pairs:
            run_a, run_b = (self.runs[index].run for index in pair)
            try:
                table = attention_change(run_a, run_b, progress=False)
            except (QkvizError, OSError, ValueError) as error:   # a run damaged on disk: said in the view
                logger.warning("attention change of %s and %s failed: %s", *(self.runs[i].name for i in pair), error)
                with self._lock:
                    self._errors[pair] = str(error)
                continue
            with self._lock:
                self._tables[pair] = table
            logger.info("attention change of %s and %s computed", *(self.runs[index].name for index in pair))

    @staticmethod
    def key(a: int, b: int) -> tuple[int, int]:
        return (min(a, b), max(a, b))

    def comparable(self, a: int, b: int) -> bool:
        return a != b and self.key(a, b) in self.pairs

    def table(self, a: int, b: int) -> pd.DataFrame | None:
        """The pair's table (layer, head, mean_js, median_js, n_queries) once computed, else None."""
        with self._lock:
            return self._tables.get(self.key(a, b))

    def error(self, a: int, b: int) -> str | None:
        """Why the pair's table could not be computed, or None."""
        with self._lock:
            return self._errors.get(self.key(a, b))
