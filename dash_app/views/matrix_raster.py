"""The matrix view's thumbnails as images, for runs too large to draw every head's points.

Past :func:`raster_threshold` points per head (queries and keys), the matrix shows each head as a small
PNG (:data:`THUMBNAIL_PIXELS` square) of *all* its points instead of a WebGL sample of them: each pixel
counts the points falling in it (``numpy.bincount``, no projection is computed), its opacity grows with
the log of the count and its colour is the count-weighted mix of its points' colours (queries green and
keys pink, a category's colour, or a continuous value on the queries' or keys' scale).

Thumbnails are made from the cached layouts on first use and kept by :class:`HeadThumbnails` in memory and
on disk in the run's :data:`RASTER_DIRECTORY` (next to its projection cache), each named by a hash of its
layout's cache entry (key, file size and modification time), the colouring and its range: a layout made
again gets a new thumbnail. A run directory that cannot be written keeps them in memory only.
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
from dash_app.run_data import RunData, normalise_layout
from dash_app.views.matrix_grid import Grid
from qkviz import QkvizError
from qkviz.projection import FIRST_METHOD
from qkviz.report import CATEGORIES, colour_values

logger = logging.getLogger(__name__)

#: points per head (queries and keys) above which the matrix draws thumbnails as images ...
RASTER_POINTS = 20_000
#: ... unless this environment variable sets another number (0: always images)
RASTER_POINTS_ENV = "QKVIZ_MATRIX_RASTER_POINTS"
#: each thumbnail's side in pixels (a cell is 56-100 screen pixels, its layout 76% of that)
THUMBNAIL_PIXELS = 96
#: the opacity of a pixel holding one point (one holding the head's densest count is opaque) ...
MIN_ALPHA = 0.3
#: ... in this many levels; colour channels are rounded to multiples of COLOUR_STEP (smaller PNG files)
ALPHA_LEVELS, COLOUR_STEP = 16, 8
#: the run's subdirectory holding the thumbnails' PNG files
RASTER_DIRECTORY = "matrix_rasters"
#: changes when the way thumbnails are drawn changes (old files are then no longer read)
RASTER_VERSION = 2
#: the opacity of a head's thumbnail that a filter dims
DIMMED_OPACITY = 0.15
#: colours a continuous scale is sampled into
SCALE_STEPS = 256


def raster_threshold() -> int:
    """Points per head above which thumbnails are images: :data:`RASTER_POINTS` or :data:`RASTER_POINTS_ENV`."""
    value = os.environ.get(RASTER_POINTS_ENV)
    if value is None or not value.strip():
        return RASTER_POINTS
    try:
        threshold = int(value)
    except ValueError:
        threshold = -1
    if threshold < 0:
        raise QkvizError(f"{RASTER_POINTS_ENV}={value!r} is not a number of points: set it to a whole number "
                         f"(0 draws every run's thumbnails as images) or unset it for {RASTER_POINTS:,}.")
    return threshold


def rasterised(data: RunData) -> bool:
    """Whether the matrix draws this run's heads as images (more points per head than :func:`raster_threshold`)."""
    return 2 * data.run.n_tokens > raster_threshold()


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
def thumbnail_images(thumbnails: list[str | None], grid: Grid, kept: np.ndarray | None = None) -> list[dict]:
    """``layout.images``: each head's thumbnail (flat order, None: left out) exactly where its points would lie
    in its cell (see :func:`dash_app.views.matrix_points.place`), above the cells' background, under the WebGL
    traces (the search's matches, the only WebGL a rasterised matrix draws); heads the grid does not draw left
    out, heads a filter dims (``kept`` False) faded. They are not dimmed during a search as sampled points are:
    changing 72 images' opacity took 0.2-0.4 s in the browser, and the matches, ringed, stand out anyway."""
    origins = grid.origins()
    x0, y0, width, height = grid.inner
    return [dict(source=source, xref="x", yref="y", x=float(origins[flat, 0] + x0),
                 y=float(origins[flat, 1] + y0 + height), sizex=width, sizey=height, xanchor="left",
                 yanchor="top", sizing="stretch", layer="above", name=f"head {flat}",
                 opacity=1.0 if kept is None or kept[flat] else DIMMED_OPACITY)
            for flat, source in enumerate(thumbnails) if source is not None and grid.positions[flat] >= 0]


# -- the cache ------------------------------------------------------------------------------
class HeadThumbnails:
    """One run's thumbnails, made on first use from its cached layouts and kept in memory and on disk."""

    def __init__(self, data: RunData, pixels: int = THUMBNAIL_PIXELS):
        self.data = data
        self.pixels = pixels
        self.directory = Path(data.run.path) / RASTER_DIRECTORY
        self._memory: dict[str, str] = {}
        self._ranges: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()
        #: ``(layer, head, method, dim) -> (cache key, file)`` of each layout (its file is looked at each time)
        self._entry = functools.lru_cache(maxsize=None)(data.layout_entry)
        #: thumbnails drawn from a layout (not read from memory or disk) since the app started
        self.drawn = 0

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

    def _key(self, layer: int, head: int, method: str, colour: str) -> str | None:
        """The thumbnail's name: a hash of its layout's cache entry and file, the colouring and the drawing."""
        entry, path = self._entry(layer, head, method, 2)
        try:
            stat = path.stat()
        except OSError:
            return None
        value_range = self.value_range(colour) if colour != "type" and colour not in CATEGORIES else None
        identity = [RASTER_VERSION, self.pixels, entry, stat.st_size, stat.st_mtime_ns, colour,
                    None if value_range is None else [round(bound, 6) for bound in value_range]]
        return hashlib.sha256(json.dumps(identity).encode()).hexdigest()[:32]

    def thumbnail(self, layer: int, head: int, method: str, colour: str) -> str | None:
        """The head's thumbnail of its 2D ``method`` layout as a PNG data URI; None when that layout is not cached."""
        key = self._key(layer, head, method, colour)
        if key is None:
            return None
        if key in self._memory:
            return self._memory[key]
        path = self.directory / f"{key}.png"
        try:
            png = path.read_bytes()
        except OSError:
            png = self._draw(layer, head, method, colour)
            self._write(path, png)
        self._memory[key] = data_uri(png)
        return self._memory[key]

    def _draw(self, layer: int, head: int, method: str, colour: str) -> bytes:
        flat = layer * self.data.run.n_heads + head
        points = normalise_layout(self.data.run.projection(layer, head, method, 2, make=False))
        value_range = self.value_range(colour) if colour != "type" and colour not in CATEGORIES else (0.0, 1.0)
        self.drawn += 1
        return png_bytes(head_thumbnail(points, self.colour_values(colour, flat), colour, value_range, self.pixels),
                         level=9)

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

    def all(self, method: str, colour: str, stand_in: tuple[tuple[int, int], ...] = ()) -> list[str | None]:
        """Every head's thumbnail (flat order), heads in ``stand_in`` drawn from their PCA layout (one thread at a
        time: the server's warm-up and a first request draw them once)."""
        with self._lock:
            return [self.thumbnail(layer, head, FIRST_METHOD if (layer, head) in stand_in else method, colour)
                    for layer, head in (divmod(flat, self.data.run.n_heads) for flat in range(self.data.n_total_heads))]


_THUMBNAILS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def thumbnails_of(data: RunData) -> HeadThumbnails:
    """The run's :class:`HeadThumbnails` (one per :class:`RunData`, made on first use)."""
    if data not in _THUMBNAILS:
        _THUMBNAILS[data] = HeadThumbnails(data)
    return _THUMBNAILS[data]
