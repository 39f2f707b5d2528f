"""Per-run data the app's callbacks read: cached layouts, norms, token features, correlations, head atlas.

A :class:`RunData` is a thin per-view cache over one opened :class:`qkviz.Run`: the run reads every result
(layouts, partners, atlas, related heads, correlations); this keeps what a view reads often, re-read when
its marker file changes. Token features and the token index
are read or computed once when the app starts (from the token table only); everything per head is read
on first use and kept in small LRU caches: vectors stay memory-mapped, and no projection is ever
computed here -- a missing one raises the run's :class:`QkvizError` naming the ``qkviz project``
command that makes it.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from functools import lru_cache, partial
from pathlib import Path

import numpy as np
import pandas as pd

from dash_app.data.image_patches import ImagePatches
from dash_app.data.atlas_columns import LABEL_SORT, label_codes, sortable_columns
from qkviz.analysis import aggregate_attention
from qkviz.report import colour_choices, token_features
from dash_app.figure_parts import plotly_texts
from qkviz import Run, open_run
from qkviz.analysis import HeadAtlas, HeadSimilarity
from qkviz.projection import LayoutWorker
from qkviz.search import Partners, head_layout_overlap, run_token_index
from qkviz.projection import FIRST_METHOD, method_names
from qkviz.store import StoredRun

logger = logging.getLogger(__name__)

#: points drawn per head in the matrix view: at most this many tokens (each a query and a key) ...
MATRIX_TOKENS_PER_HEAD = 500
#: ... and at most this many points over all heads (one WebGL canvas draws them all).
MATRIX_POINT_BUDGET = 120_000
#: points of a head sampled for its average layout overlap (queries and keys each)
LAYOUT_OVERLAP_SAMPLE = 100
#: seconds for which the count of cached layouts is reused
AVAILABLE_TTL = 5.0


@dataclass(frozen=True)
class RunShape:
    """What the URL is validated against: the run's name and sizes, and its default projection."""

    name: str
    n_layers: int
    n_heads: int
    n_tokens: int
    n_sentences: int
    default_method: str
    #: the matrix orders the head atlas offers (its label and numeric columns); empty without an atlas
    atlas_sorts: tuple[str, ...] = ()
    #: the ``(method, dim)`` layouts offered (some head has them, or they are being made); None: all
    layouts: tuple[tuple[str, int], ...] | None = None
    #: the colour features offered (:func:`qkviz.report.colour_choices`: an image run's or a text run's); None: all
    colours: tuple[str, ...] | None = None


@dataclass(frozen=True)
class HeadLayouts:
    """Every head's 2D layout of one method, each normalised into the unit square.

    ``points`` is float32 ``[layer * n_heads + head, 2 * n_tokens, 2]`` (queries first, then keys);
    ``missing`` lists the ``(layer, head)`` whose layout is not cached: NaN, or, for those in ``stand_in``
    (still being made in the background), the head's PCA layout until its own lands."""

    method: str
    points: np.ndarray
    missing: tuple[tuple[int, int], ...]
    stand_in: tuple[tuple[int, int], ...] = ()


def normalise_layout(coordinates: np.ndarray, low: float = 0.5, high: float = 99.5) -> np.ndarray:
    """``[n, 2]`` -> ``[n, 2]`` float32 in the unit square, aspect kept, centred; the outer
    ``low`` / ``100 - high`` percent of each axis is clipped to the edge so outliers cannot shrink the rest."""
    lower = np.nanpercentile(coordinates, low, axis=0)
    upper = np.nanpercentile(coordinates, high, axis=0)
    span = float(np.max(upper - lower)) or 1.0
    centred = (coordinates - (lower + upper) / 2) / span + 0.5
    return np.clip(centred, 0.0, 1.0).astype(np.float32)


def marker_stamp(path: Path) -> int:
    """A marker file's modification time in ns (what is re-read when it changes), -1 when absent."""
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return -1


def unique_names(paths: list[Path]) -> list[str]:
    """Directory names, made unique with ``-2``, ``-3`` ... in the order given."""
    names: list[str] = []
    for path in paths:
        name, suffix = Path(path).resolve().name or "run", 2
        candidate = name
        while candidate in names:
            candidate, suffix = f"{name}-{suffix}", suffix + 1
        names.append(candidate)
    return names


class RunData:
    """One run as the app sees it."""

    def __init__(self, run: Run | StoredRun, name: str):
        self.run: Run = run if isinstance(run, Run) else open_run(run.path)
        run = self.run
        self.name = name
        self.tokens: pd.DataFrame = run.tokens
        self.sentences: pd.DataFrame = run.sentences
        self.features = token_features(self.tokens)
        self.colours = colour_choices(self.tokens)     # an image run's colours, or a text run's
        #: an image run's patch thumbnails and grid (hover, the image view), None for a text run
        self.patches = ImagePatches(run) if run.is_image_run else None
        self.token_index = run_token_index(run)     # stored by 'qkviz index', else built here (milliseconds)
        self.display_text = plotly_texts(self.tokens.token)   # [token] labels, escaped for Plotly
        self._all_layouts: dict[str, HeadLayouts] = {}
        self._layouts_lock = threading.RLock()
        self._correlations: tuple[float, pd.DataFrame | None] | None = None
        self._atlas: tuple[int, HeadAtlas | None] | None = None
        self._related: tuple[int, HeadSimilarity | None] | None = None
        self._available: tuple[float, dict[tuple[str, int], int]] = (-np.inf, {})
        self._worker_mark: tuple[int, bool] | None = None     # the worker's (done, running) when last counted
        self._counting = threading.Lock()
        self._failures: tuple[float, dict[tuple[int, int, str, int], str]] = (-np.inf, {})
        self.layout = lru_cache(maxsize=32)(self._layout)
        self.norms = lru_cache(maxsize=32)(self._norms)
        #: ``aggregate(layer, head, hide_first, hide_special, by_value_norm)``, see :func:`aggregate_attention`
        self.aggregate = lru_cache(maxsize=16)(partial(aggregate_attention, run))
        self.partners = lru_cache(maxsize=64)(self._partners)
        self.layout_overlap = lru_cache(maxsize=32)(self._layout_overlap)
        #: served read-only (``qkviz serve --read-only``): the app writes none of the run's files
        self.read_only = False
        #: the worker making this run's default layouts while the app runs (set by ``qkviz serve``), or None
        self.worker: LayoutWorker | None = None
        #: the last lasso / box selection in the single view, one row per selected point (see
        #: :func:`dash_app.panels.selection.selection_frame`), or None before any; ``Run.selection`` reads it
        self.selection: pd.DataFrame | None = None

    @property
    def n_total_heads(self) -> int:
        return self.run.n_layers * self.run.n_heads

    @property
    def shape(self) -> RunShape:
        return RunShape(self.name, self.run.n_layers, self.run.n_heads, self.run.n_tokens, self.run.n_sentences,
                        self.default_method(), self.atlas_sorts(), self.offered_layouts(), self.colours)

    # -- what is cached -------------------------------------------------------------------
    def layout_entry(self, layer: int, head: int, method: str, dim: int) -> tuple[str, Path]:
        """The default layout's cache key and the ``.npy`` file holding it (which may not exist yet)."""
        return self.run.projection_file(layer, head, method, dim)

    def is_cached(self, layer: int, head: int, method: str, dim: int) -> bool:
        """Whether the default layout's entry exists (its integrity is checked when it is loaded)."""
        return self.run.has_projection(layer, head, method, dim)

    def available(self) -> dict[tuple[str, int], int]:
        """``{(method, dim): number of heads cached}`` for every method and dimension.

        Re-counted at most every :data:`AVAILABLE_TTL` seconds, so layouts made while the app runs appear, and
        whenever the background worker has made more (or stopped): a view that reads its method as finished
        must find its layouts counted, not the count from before they landed. One request counts at a time; the
        others wait for its count (every callback asks, through the run's shape)."""
        worker_mark = None if self.worker is None else (self.worker.progress().done, self.worker.progress().running)
        with self._counting:
            if time.monotonic() - self._available[0] > AVAILABLE_TTL or worker_mark != self._worker_mark:
                self._available = (time.monotonic(), self.run.projection_counts())
                self._worker_mark = worker_mark
            return self._available[1]

    def in_background(self, method: str) -> bool:
        """Whether ``method``'s 2D layouts are being made in the background now."""
        return self.worker is not None and self.worker.method == method and self.worker.progress().running

    def pending(self, layer: int, head: int, method: str) -> bool:
        """Whether this head's ``method`` 2D layout is still to come from the background worker."""
        return self.worker is not None and self.worker.method == method and self.worker.pending(layer, head)

    def offered_layouts(self) -> tuple[tuple[str, int], ...]:
        """The ``(method, dim)`` of which some head has a layout, or which are being made now; PCA 2D when
        none (the app then says how to make layouts)."""
        available = self.available()
        offered = tuple((method, dim) for method, dim in available
                        if available[(method, dim)] or (dim == 2 and self.in_background(method)))
        return offered or ((FIRST_METHOD, 2),)

    def offered_methods(self) -> list[str]:
        """The methods of :meth:`offered_layouts` (those with a 2D layout or being made)."""
        return [method for method in method_names() if (method, 2) in self.offered_layouts()]

    def layout_failure(self, layer: int, head: int, method: str, dim: int) -> str | None:
        """Why this head's layout could not be made (in the background now, or by an earlier ``qkviz project``)."""
        if self.worker is not None and self.worker.method == method and dim == 2:
            failure = self.worker.failure(layer, head)
            if failure is not None:
                return failure
        return self._recorded_failures().get((layer, head, method, dim))

    def _recorded_failures(self) -> dict[tuple[int, int, str, int], str]:
        """The run's recorded failures of default layouts, re-read at most every :data:`AVAILABLE_TTL` seconds."""
        if time.monotonic() - self._failures[0] > AVAILABLE_TTL:
            self._failures = (time.monotonic(), self.run.projection_failures())
        return self._failures[1]

    def default_method(self) -> str:
        """The most faithful method (the catalogue's order) with every head's 2D layout, else the one being made in the
        background (its missing heads drawn in PCA), else the one with the most heads."""
        if self.worker is not None and self.in_background(self.worker.method):
            return self.worker.method
        available = self.available()
        for method in method_names():
            if available.get((method, 2)) == self.n_total_heads:
                return method
        return max(method_names(), key=lambda method: available.get((method, 2), 0))

    # -- per head ---------------------------------------------------------------------------
    def _layout(self, layer: int, head: int, method: str, dim: int) -> np.ndarray:
        """``[2 * n_tokens, dim]`` float32, queries first; QkvizError naming the command when missing."""
        return self.run.projection(layer, head, method, dim, make=False)

    def _partners(self, layer: int, head: int, point: int, k: int, skip_special: bool = False,
                  skip_first: bool = False) -> Partners:
        """The top ``k`` partners of joint-layout ``point`` anywhere in the corpus, special tokens and each
        sentence's first token (a decoder's attention sink) skipped or not."""
        exclude = np.zeros(self.run.n_tokens, dtype=bool)
        if skip_special:
            exclude |= self.tokens.is_special.to_numpy()
        if skip_first:
            exclude |= self.tokens.position.to_numpy() == 0
        return self.run.partners(layer, head, point, k, exclude=exclude if exclude.any() else None)

    def _layout_overlap(self, layer: int, head: int, method: str, dim: int, k: int = 10) -> dict[str, float]:
        """How much of the head's top-``k`` partners its layout keeps near each point, averaged over a
        seeded sample (see :func:`qkviz.search.partner_index.head_layout_overlap`); ``sample`` is its size."""
        overlap = head_layout_overlap(self.run.partner_indexes, layer, head, self.layout(layer, head, method, dim), k,
                                      sample=LAYOUT_OVERLAP_SAMPLE)
        return {**overlap, "sample": min(LAYOUT_OVERLAP_SAMPLE, self.run.n_tokens)}

    def _norms(self, layer: int, head: int) -> np.ndarray:
        """``[2 * n_tokens]`` float32: each query's norm, then each key's."""
        return np.concatenate([np.linalg.norm(self.run.queries(layer, head), axis=1),
                               np.linalg.norm(self.run.keys(layer, head), axis=1)]).astype(np.float32)

    def all_layouts(self, method: str) -> HeadLayouts:
        """Every head's normalised 2D layout of ``method``: read once, then only the heads that land later (one
        thread at a time: the server's warm-up and a first request read them once, not twice)."""
        with self._layouts_lock:
            return self._read_layouts(method)

    def _read_layouts(self, method: str) -> HeadLayouts:
        known = self._all_layouts.get(method)
        if known is not None and not any(self.is_cached(layer, head, method, 2) or
                                         ((layer, head) in known.stand_in) != self.pending(layer, head, method)
                                         for layer, head in known.missing):
            return known
        n_heads = self.run.n_heads
        if known is None:
            points = np.full((self.n_total_heads, 2 * self.run.n_tokens, 2), np.nan, dtype=np.float32)
            unread = [(layer, head) for layer in range(self.run.n_layers) for head in range(n_heads)]
        else:
            points, unread = known.points.copy(), list(known.missing)
        missing, stand_in = [], []
        for layer, head in unread:
            if self.is_cached(layer, head, method, 2):
                points[layer * n_heads + head] = normalise_layout(self.run.projection(layer, head, method, 2, make=False))
                continue
            missing.append((layer, head))
            points[layer * n_heads + head] = np.nan
            if (method != FIRST_METHOD and self.pending(layer, head, method)
                    and self.is_cached(layer, head, FIRST_METHOD, 2)):
                points[layer * n_heads + head] = self.all_layouts(FIRST_METHOD).points[layer * n_heads + head]
                stand_in.append((layer, head))
        self._all_layouts[method] = HeadLayouts(method, points, tuple(missing), tuple(stand_in))
        logger.debug("%s: %d of %d heads have their %s 2D layout", self.name, self.n_total_heads - len(missing),
                    self.n_total_heads, method)
        return self._all_layouts[method]

    def matrix_sample(self) -> np.ndarray:
        """Sorted int64 ``[m]`` token indices drawn in the matrix view, the same for every head (seeded)."""
        budget = max(50, MATRIX_POINT_BUDGET // (2 * self.n_total_heads))
        count = min(self.run.n_tokens, MATRIX_TOKENS_PER_HEAD, budget)
        return np.sort(np.random.default_rng(0).choice(self.run.n_tokens, size=count, replace=False))

    # -- sentences ----------------------------------------------------------------------------
    def sentence_of(self, token: int) -> int:
        return int(self.tokens.sentence.iat[token])

    def sentence_rows(self, sentence: int) -> np.ndarray:
        """int64 token indices of ``sentence``, in order."""
        rows = self.run.sentence_tokens(sentence)
        return np.arange(rows.start, rows.stop)

    # -- correlation report -------------------------------------------------------------------
    def correlations(self) -> pd.DataFrame | None:
        """The correlation report's table (layer, head, space, n_pairs, pearson, spearman, ...), or None.

        Re-read when the report's file changes, so a report made while the app runs shows up."""
        path = self.run.result_marker("correlations")
        stamp = path.stat().st_mtime if path.exists() else -1.0
        if self._correlations is None or self._correlations[0] != stamp:
            self._correlations = (stamp, self.run.correlations if stamp >= 0 else None)
        return self._correlations[1]

    def correlation_space(self, method: str, dim: int = 2) -> str | None:
        """The report's space for this layout (``"tsne-2d"``), else the projected space, else None."""
        table = self.correlations()
        if table is None:
            return None
        spaces = set(table.space)
        for space in (f"{method}-{dim}d", "translated+scaled"):
            if space in spaces:
                return space
        return None

    def mean_recall(self, space: str) -> float | None:
        """The report's partner recall@10 in ``space`` (mean of both sides over heads), or None without it."""
        table = self.correlations()
        if table is None or "recall_query" not in table.columns:
            return None
        rows = table[table.space == space]
        return None if rows.empty else float((rows.recall_query + rows.recall_key).mean() / 2)

    def correlation_grid(self, space: str) -> np.ndarray:
        """float64 ``[layer * n_heads + head]``: the report's Pearson correlation in ``space`` (NaN if absent)."""
        grid = np.full(self.n_total_heads, np.nan)
        table = self.correlations()
        if table is not None:
            rows = table[table.space == space]
            grid[rows["layer"].to_numpy() * self.run.n_heads + rows["head"].to_numpy()] = rows.pearson.to_numpy()
        return grid

    # -- head atlas ----------------------------------------------------------------------------
    def atlas_stamp(self) -> int:
        """``stats/atlas.json``'s modification time in ns (written last by ``qkviz stats``), -1 when absent."""
        return marker_stamp(self.run.result_marker("atlas"))

    def atlas(self) -> HeadAtlas | None:
        """The run's head atlas (``qkviz stats``), or None.

        Re-read when ``stats/atlas.json`` changes, so an atlas made while the app runs shows up."""
        stamp = self.atlas_stamp()
        if self._atlas is None or self._atlas[0] != stamp:
            self._atlas = (stamp, self._read_atlas() if stamp >= 0 else None)
        return self._atlas[1]

    def _read_atlas(self) -> HeadAtlas | None:
        try:
            return self.run.atlas
        except (KeyError, TypeError, ValueError, OSError) as error:   # half-written or from an older qkviz
            logger.warning("%s: could not read the head atlas (%s: %s); make it again with 'qkviz stats --run %s'",
                           self.name, type(error).__name__, error, self.run.path)
            return None

    def atlas_sorts(self) -> tuple[str, ...]:
        """``label`` and the atlas's numeric columns (empty without an atlas)."""
        atlas = self.atlas()
        return sortable_columns(atlas.table) if atlas is not None else ()

    def atlas_grid(self, column: str) -> np.ndarray:
        """float64 ``[layer * n_heads + head]``: the atlas's ``column`` per head (for ``label``, its index in
        :data:`qkviz.analysis.labels.registry.LABELS`); NaN for heads the atlas lacks, all NaN without an atlas."""
        grid = np.full(self.n_total_heads, np.nan)
        atlas = self.atlas()
        if atlas is not None and (column in atlas.table or column == LABEL_SORT):
            table = atlas.table
            values = label_codes(table.label.to_numpy()) if column == LABEL_SORT else table[column].to_numpy(float)
            grid[table["layer"].to_numpy() * self.run.n_heads + table["head"].to_numpy()] = values
        return grid

    def atlas_row(self, layer: int, head: int) -> pd.Series | None:
        """The atlas table's row of one head, or None."""
        atlas = self.atlas()
        if atlas is None:
            return None
        rows = atlas.table[(atlas.table["layer"] == layer) & (atlas.table["head"] == head)]
        return rows.iloc[0] if len(rows) else None

    # -- related heads -------------------------------------------------------------------------
    def related_stamp(self) -> int:
        """``related/related.json``'s modification time in ns (written last by ``qkviz related``), -1 when absent."""
        return marker_stamp(self.run.result_marker("related"))

    def related(self) -> HeadSimilarity | None:
        """The run's head similarity (``qkviz related``), or None; re-read when its marker changes."""
        stamp = self.related_stamp()
        if self._related is None or self._related[0] != stamp:
            self._related = (stamp, self.run.related if stamp >= 0 else None)
        return self._related[1]
