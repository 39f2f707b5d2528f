"""The matrix view's thumbnails as one image, for runs too large to draw every head's points at once.

Past :func:`raster_threshold` points per head (queries and keys), or :data:`RASTER_TOTAL_POINTS` over all the
heads, the matrix shows every head's *all* points as pixels of one PNG, the **sheet**, instead of a WebGL sample
of them: no WebGL context is started until a head is opened, and the browser draws one image however many heads
there are. A head's square of the sheet (:func:`head_thumbnail`, as many pixels across as its layout's square has
on the screen) counts the points falling in each pixel (``numpy.bincount``, no projection is computed); its
opacity grows with the log of the count and its colour is the count-weighted mix of its points' colours (queries
green and keys pink, a category's colour, or a continuous value on the queries' or keys' scale).

:class:`HeadThumbnails` draws each head's square from its cached layout on first use and keeps it in memory (by a
hash of its layout's cache entry -- key, file size and modification time --, the colouring, its range and the
size), and keeps each sheet in memory and on disk in the run's :data:`RASTER_DIRECTORY` (next to its projection
cache), named by a hash of its heads' squares, where they lie and which a filter dims: a layout made again
gets a new sheet. A run directory that cannot be written keeps them in memory only.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import json
import logging
import os
import threading
import weakref
from pathlib import Path

import numpy as np
from plotly.colors import hex_to_rgb, sample_colorscale, unlabel_rgb

from dash_app.figure_parts import CATEGORY_COLOURS, KEY_COLOUR, KEY_SCALE, QUERY_COLOUR, QUERY_SCALE, png_bytes
from dash_app.data.run_data import RunData, normalise_layout
from dash_app.views.matrix.grid import CELL, Grid
from qkviz import QkvizError
from qkviz.projection import FIRST_METHOD
from qkviz.report import CATEGORIES, colour_values

logger = logging.getLogger(__name__)

#: points per head (queries and keys) above which the matrix draws its heads as one image ...
RASTER_POINTS = 20_000
#: ... unless this environment variable sets another number (0: always images)
RASTER_POINTS_ENV = "QKVIZ_MATRIX_RASTER_POINTS"
#: ... or points over all the heads above which it does (the bundled MiniLM's 72 heads over 5,000 tokens have
#: 720,000: a WebGL sample of them took the browser about a second to draw, the image a tenth of that)
RASTER_TOTAL_POINTS = 200_000
#: a head's side in pixels where no grid says it (the default of :func:`head_thumbnail`)
THUMBNAIL_PIXELS = 96
#: the opacity of a pixel holding one point (one holding the head's densest count is opaque) ...
MIN_ALPHA = 0.3
#: ... in this many levels; colour channels are rounded to multiples of COLOUR_STEP (smaller PNG files)
ALPHA_LEVELS, COLOUR_STEP = 16, 8
#: the run's subdirectory holding the thumbnails' PNG files
RASTER_DIRECTORY = "matrix_rasters"
#: changes when the way thumbnails are drawn changes (old files are then no longer read)
RASTER_VERSION = 3
#: the opacity of a head's thumbnail that a filter dims
DIMMED_OPACITY = 0.15
#: colours a continuous scale is sampled into
SCALE_STEPS = 256


def raster_threshold() -> int:
    """Points per head above which thumbnails are images: :data:`RASTER_POINTS` or :data:`RASTER_POINTS_ENV`."""
    threshold = environment_threshold()
    return RASTER_POINTS if threshold is None else threshold


def environment_threshold() -> int | None:
    """The points per head :data:`RASTER_POINTS_ENV` sets, None when unset (a QkvizError when not a number)."""
    value = os.environ.get(RASTER_POINTS_ENV)
    if value is None or not value.strip():
        return None
    try:
        threshold = int(value)
    except ValueError:
        threshold = -1
    if threshold < 0:
        raise QkvizError(f"{RASTER_POINTS_ENV}={value!r} is not a number of points: set it to a whole number "
                         f"(0 draws every run's thumbnails as images) or unset it for {RASTER_POINTS:,}.")
    return threshold


def rasterised(data: RunData) -> bool:
    """Whether the matrix draws this run's heads as one image: more points per head than :func:`raster_threshold`,
    or, unless the environment sets that threshold, more over all heads than :data:`RASTER_TOTAL_POINTS`."""
    per_head = 2 * data.run.n_tokens
    threshold = environment_threshold()
    if threshold is not None:
        return per_head > threshold
    return per_head > RASTER_POINTS or per_head * data.n_total_heads > RASTER_TOTAL_POINTS


# -- drawing --------------------------------------------------------------------------------
def _rgb(colour: str) -> np.ndarray:
    return np.array(hex_to_rgb(colour), dtype=np.float32)


@functools.cache
def side_scale(side: int) -> np.ndarray:
    """float32 ``[SCALE_STEPS, 3]``: the queries' (``side`` 0) or keys' (1) colour scale, sampled evenly."""
    samples = sample_colorscale((QUERY_SCALE, KEY_SCALE)[side], list(np.linspace(0.0, 1.0, SCALE_STEPS)))
    return np.array([unlabel_rgb(sample) for sample in samples], dtype=np.float32)


def pixel_index(points: np.ndarray, pixels: int) -> np.ndarray:
    """int64 ``[n]``: the pixel (``row * pixels + column``, row 0 at the top) of each point of ``points``
    ``[n, 2]`` in the unit square; -1 for a point with a NaN coordinate."""
    finite = np.isfinite(points).all(axis=1)
    cells = np.clip(np.floor(np.nan_to_num(points) * pixels), 0, pixels - 1).astype(np.int64)
    index = (pixels - 1 - cells[:, 1]) * pixels + cells[:, 0]
    return np.where(finite, index, -1)


def head_thumbnail(points: np.ndarray, values: np.ndarray | None = None, colour: str = "type",
                   value_range: tuple[float, float] = (0.0, 1.0), pixels: int = THUMBNAIL_PIXELS) -> np.ndarray:
    """uint8 ``[pixels, pixels, 4]`` RGBA image of one head's normalised layout ``points`` ``[2 * n_tokens, 2]``
    (queries first, unit square, y up), transparent where no point falls.

    ``values`` ``[2 * n_tokens]`` colour the points as the matrix's markers do: None (queries
    :data:`QUERY_COLOUR`, keys :data:`KEY_COLOUR`), category indices of ``colour`` (its
    :data:`CATEGORY_COLOURS`), or a continuous value on the queries' and keys' scales over ``value_range``."""
    n_tokens = len(points) // 2
    index = pixel_index(points, pixels)
    side = np.repeat(np.array([0, 1]), n_tokens)
    area = pixels * pixels
    if values is not None and colour in CATEGORIES:
        n_groups = len(CATEGORIES[colour])
        groups = np.clip(np.nan_to_num(values, nan=0).astype(np.int64), 0, n_groups - 1)
        colours = np.stack([_rgb(CATEGORY_COLOURS[group % len(CATEGORY_COLOURS)]) for group in range(n_groups)])
    else:
        n_groups, groups = 2, side
        colours = np.stack([_rgb(QUERY_COLOUR), _rgb(KEY_COLOUR)])
    keep = index >= 0
    slot = groups[keep] * area + index[keep]
    counts = np.bincount(slot, minlength=n_groups * area).reshape(n_groups, area).astype(np.float32)
    if values is not None and colour not in CATEGORIES:             # each side's mean value, on its own scale
        low, high = value_range
        scaled = np.clip((np.nan_to_num(values, nan=low) - low) / ((high - low) or 1.0), 0.0, 1.0)[keep]
        sums = np.bincount(slot, weights=scaled, minlength=2 * area).reshape(2, area)
        means = sums / np.maximum(counts, 1)
        steps = np.rint(means * (SCALE_STEPS - 1)).astype(np.int64)
        per_pixel = np.stack([side_scale(0)[steps[0]], side_scale(1)[steps[1]]])          # [2, area, 3]
    else:
        per_pixel = np.broadcast_to(colours[:, None, :], (n_groups, area, 3))
    total = counts.sum(axis=0)
    rgb = np.einsum("ga,gac->ac", counts, per_pixel) / np.maximum(total, 1)[:, None]
    densest = float(total.max()) if total.size else 0.0
    alpha = np.where(total > 0, MIN_ALPHA + (1 - MIN_ALPHA) * np.log1p(total) / np.log1p(max(densest, 1.0)), 0.0)
    # a few levels of each, which the eye does not tell apart in a thumbnail: a PNG half the size
    image = np.concatenate([np.rint(rgb / COLOUR_STEP) * COLOUR_STEP,
                            255 * np.rint(alpha * (ALPHA_LEVELS - 1))[:, None] / (ALPHA_LEVELS - 1)], axis=1)
    return np.rint(image).clip(0, 255).astype(np.uint8).reshape(pixels, pixels, 4)


def data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


# -- the figure's parts --------------------------------------------------------------------
def sheet_pixels(grid: Grid) -> tuple[int, int, int]:
    """``(width, height, side)`` of a grid's sheet in pixels: the plot area's, and a head's layout square's."""
    across, down = grid.cell_px
    _, _, width, _ = grid.inner
    return (max(int(round(grid.n_cols * across)), 1), max(int(round(grid.n_rows * down)), 1),
            max(int(round(width / CELL * across)), 1))


def head_corners(grid: Grid) -> np.ndarray:
    """int64 ``[flat head, 2]``: the sheet pixel (column, row from the top) of each head's layout square's top
    left corner (-1 for a head not drawn), where :func:`dash_app.views.matrix.points.place` puts its points."""
    across, down = grid.cell_px
    x0, y0, _, height = grid.inner
    origins = grid.origins()
    left = (origins[:, 0] + x0) / CELL * across
    top = (grid.n_rows * CELL - (origins[:, 1] + y0 + height)) / CELL * down
    corners = np.stack([left, top], axis=1)
    return np.where(np.isfinite(corners), np.rint(np.nan_to_num(corners)), -1).astype(np.int64)


def sheet_image(source: str, grid: Grid) -> dict:
    """``layout.images``' one entry: the sheet over the whole plot area, above the cells' background, under the
    WebGL traces (the search's matches, the only WebGL a rasterised matrix draws)."""
    return dict(source=source, xref="x", yref="y", x=0.0, y=float(grid.n_rows * CELL), sizex=float(grid.n_cols * CELL),
                sizey=float(grid.n_rows * CELL), xanchor="left", yanchor="top", sizing="stretch", layer="above",
                name="heads")


# -- the cache ------------------------------------------------------------------------------
class HeadThumbnails:
    """One run's thumbnails, made on first use from its cached layouts and kept in memory and on disk."""

    def __init__(self, data: RunData, pixels: int = THUMBNAIL_PIXELS):
        self.data = data
        self.pixels = pixels
        self.directory = Path(data.run.path) / RASTER_DIRECTORY
        self._memory: dict[str, np.ndarray] = {}        # a head's square by its name
        self._sheets: dict[str, str] = {}               # a sheet's data URI by its name
        self._ranges: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()
        #: ``(layer, head, method, dim) -> (cache key, file)`` of each layout (its file is looked at each time)
        self._entry = functools.lru_cache(maxsize=None)(data.layout_entry)
        #: heads' squares drawn from a layout, and sheets composed (not read from memory or disk), since the app started
        self.drawn = 0
        self.sheets_drawn = 0

    def value_range(self, colour: str) -> tuple[float, float]:
        """The continuous colouring's range over every head (the matrix's colour bars show it), computed once."""
        if colour not in self._ranges:
            if colour == "norm":
                lows, highs = zip(*((float(np.nanmin(norms)), float(np.nanmax(norms)))
                                    for norms in (self.data.norms(flat // self.data.run.n_heads, flat % self.data.run.n_heads)
                                                  for flat in range(self.data.n_total_heads))))
                low, high = min(lows), max(highs)
            else:
                values = self.colour_values(colour, 0)
                low, high = float(np.nanmin(values)), float(np.nanmax(values))
            self._ranges[colour] = (low, high if high > low else low + 1)
        return self._ranges[colour]

    def colour_values(self, colour: str, flat: int) -> np.ndarray | None:
        """``[2 * n_tokens]`` what head ``flat``'s points are coloured by, None for query vs key."""
        if colour == "type":
            return None
        if colour == "norm":
            return self.data.norms(flat // self.data.run.n_heads, flat % self.data.run.n_heads)
        values = colour_values(self.data.features[colour].to_numpy(), colour)
        return np.concatenate([values, values])

    def _key(self, layer: int, head: int, method: str, colour: str, side: int) -> str | None:
        """A head's square's name: a hash of its layout's cache entry and file, the colouring and the drawing."""
        entry, path = self._entry(layer, head, method, 2)
        try:
            stat = path.stat()
        except OSError:
            return None
        value_range = self.value_range(colour) if colour != "type" and colour not in CATEGORIES else None
        identity = [RASTER_VERSION, side, entry, stat.st_size, stat.st_mtime_ns, colour,
                    None if value_range is None else [round(bound, 6) for bound in value_range]]
        return hashlib.sha256(json.dumps(identity).encode()).hexdigest()[:32]

    def thumbnail(self, layer: int, head: int, method: str, colour: str, side: int | None = None
                  ) -> tuple[str, np.ndarray] | None:
        """The head's square (its name, and uint8 RGBA ``[side, side, 4]``) of its 2D ``method`` layout; None when
        that layout is not cached."""
        side = self.pixels if side is None else side
        key = self._key(layer, head, method, colour, side)
        return None if key is None else (key, self._square(key, layer, head, method, colour, side))

    def _square(self, key: str, layer: int, head: int, method: str, colour: str, side: int) -> np.ndarray:
        if key not in self._memory:
            flat = layer * self.data.run.n_heads + head
            points = normalise_layout(self.data.run.projection(layer, head, method, 2, make=False))
            value_range = self.value_range(colour) if colour != "type" and colour not in CATEGORIES else (0.0, 1.0)
            self.drawn += 1
            self._memory[key] = head_thumbnail(points, self.colour_values(colour, flat), colour, value_range, side)
        return self._memory[key]

    def sheet(self, method: str, colour: str, grid: Grid, kept: np.ndarray | None = None,
              stand_in: tuple[tuple[int, int], ...] = ()) -> str:
        """The sheet of ``grid`` as a PNG data URI: every drawn head's square where its points would lie (heads in
        ``stand_in`` from their PCA layout, heads without a layout left empty, heads ``kept`` False faded to
        :data:`DIMMED_OPACITY`). Named by its heads' squares' names (from their layouts' files, not their points), so a
        sheet in memory or on disk is used without reading a layout. One thread at a time: the server's warm-up and
        a first request draw it once."""
        width, height, side = sheet_pixels(grid)
        corners = head_corners(grid)
        n_heads = self.data.run.n_heads
        with self._lock:
            heads = {}                                  # flat head -> (its square's name, layer, head, method)
            for flat in np.flatnonzero(grid.positions >= 0):
                layer, head = divmod(int(flat), n_heads)
                drawn_with = FIRST_METHOD if (layer, head) in stand_in else method
                key = self._key(layer, head, drawn_with, colour, side)
                if key is not None:
                    heads[int(flat)] = (key, layer, head, drawn_with)
            identity = [RASTER_VERSION, width, height, side, corners.tolist(),
                        sorted((flat, key) for flat, (key, *_) in heads.items()),
                        None if kept is None else np.flatnonzero(~np.asarray(kept, bool)).tolist()]
            name = hashlib.sha256(json.dumps(identity).encode()).hexdigest()[:32]
            if name in self._sheets:
                return self._sheets[name]
            path = self.directory / f"sheet-{name}.png"
            try:
                png = path.read_bytes()
            except OSError:
                squares = {flat: self._square(key, layer, head, drawn_with, colour, side)
                           for flat, (key, layer, head, drawn_with) in heads.items()}
                png = png_bytes(self._compose(width, height, side, corners, squares, kept), level=6)
                self.sheets_drawn += 1
                self._write(path, png)
            self._sheets[name] = data_uri(png)
            return self._sheets[name]

    @staticmethod
    def _compose(width: int, height: int, side: int, corners: np.ndarray, squares: dict[int, np.ndarray],
                 kept: np.ndarray | None) -> np.ndarray:
        sheet = np.zeros((height, width, 4), np.uint8)
        for flat, square in squares.items():
            left, top = corners[flat]
            block = sheet[max(top, 0):top + side, max(left, 0):left + side]
            block[...] = square[max(-top, 0):max(-top, 0) + block.shape[0], max(-left, 0):max(-left, 0) + block.shape[1]]
            if kept is not None and not kept[flat]:
                block[..., 3] = np.rint(block[..., 3] * DIMMED_OPACITY).astype(np.uint8)
        return sheet

    def _write(self, path: Path, png: bytes) -> None:
        """Write atomically (a temporary file renamed, removed if the write fails); a run directory that cannot be
        written is only logged, and a run served read-only is not written (the thumbnail stays in memory)."""
        if self.data.read_only:
            return
        partial = path.with_suffix(f".{os.getpid()}.part")
        try:
            self.directory.mkdir(exist_ok=True)
            partial.write_bytes(png)
            partial.replace(path)
        except OSError as error:
            with contextlib.suppress(OSError):
                partial.unlink(missing_ok=True)
            logger.info("matrix thumbnails kept in memory only (%s)", error)


_THUMBNAILS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def thumbnails_of(data: RunData) -> HeadThumbnails:
    """The run's :class:`HeadThumbnails` (one per :class:`RunData`, made on first use)."""
    if data not in _THUMBNAILS:
        _THUMBNAILS[data] = HeadThumbnails(data)
    return _THUMBNAILS[data]
