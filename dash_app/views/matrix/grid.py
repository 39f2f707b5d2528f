"""The matrix view's grid: how many rows and columns, which head sits in which cell, and where its layout lies
inside the cell, fitted to the browser window.

The browser sends its window's size (``matrixViewport`` in ``assets/clientside.js``, checked here by
:func:`plot_box`); the figure then fills the box its graph has. Two kinds of grid:

* the **model grid** (:func:`model_grid`): layers x heads in model order, layers as rows or as columns,
  whichever gives each head's layout the larger square; its axes name the layers and heads (``L3``, ``H7``),
  so the cells carry no name of their own;
* the **list grid** (:func:`list_grid`): the heads shown, in a given order (a sort, or what a filter keeps),
  row by row in as many columns as make the largest cells; the cells name their heads when there is room.

Cells need not be square: a cell is :data:`CELL` x :data:`CELL` grid units on both axes, drawn at the box's
pixel aspect, and the head's layout lies in a square (in pixels) inside it (:attr:`Grid.inner`), under a band
for the cell's text when it has one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dash_app.state.view_state import bounded_number

CELL = 1000                 # grid units per cell, on both axes
#: the window the figure is fitted to before the browser has said its size (and what the browser tests use)
DEFAULT_WINDOW = (1400, 900)
#: the window sizes taken from the browser (anything else is clipped into them)
WINDOW_RANGE = ((320, 8192), (240, 8192))
#: pixels of the page beside the figure: the body's margins across; down, what lies above the graph at 1400 px
#: across (the top bar's two rows, 82; the run's line, 23; the two rows of controls, 84; the message line's fixed
#: two-line slot, 40: the graph's top at about 245, see assets/qkviz.css) and 35 to spare below it, room for the
#: progress line of layouts being made and for other fonts: the page and the axes' labels stay inside the window
PAGE_WIDTH_PX, PAGE_HEIGHT_PX = 32, 280
MIN_GRAPH_HEIGHT_PX = 420
#: a cell's padding around its layout, as a share of its smaller side
PADDING = 0.06
#: the smallest cell (pixels, across and down) that writes its text, and a text line's height
TEXT_CELL_PX = (56, 30)
LINE_PX = 12


@dataclass(frozen=True)
class Box:
    """The figure's plot area in pixels (what the cells share)."""

    width: float
    height: float


def window_size(viewport) -> tuple[int, int]:
    """The browser's ``{"width", "height"}`` as the server takes it: whole pixels in :data:`WINDOW_RANGE`,
    :data:`DEFAULT_WINDOW` for anything that is not a number."""
    viewport = viewport if isinstance(viewport, dict) else {}
    return tuple(bounded_number(viewport.get(name), default, low, high, whole=True)
                 for name, default, (low, high) in zip(("width", "height"), DEFAULT_WINDOW, WINDOW_RANGE))


def graph_height(window: tuple[int, int]) -> int:
    """The graph's height in pixels for a window (its CSS: ``calc(100vh - PAGE_HEIGHT_PX)``, at least
    :data:`MIN_GRAPH_HEIGHT_PX`)."""
    return max(window[1] - PAGE_HEIGHT_PX, MIN_GRAPH_HEIGHT_PX)


def plot_box(window: tuple[int, int], margin: dict) -> Box:
    """The plot area of a figure with ``margin`` (``l r t b``) in the graph of a window."""
    return Box(max(window[0] - PAGE_WIDTH_PX - margin["l"] - margin["r"], 40),
               max(graph_height(window) - margin["t"] - margin["b"], 40))


@dataclass(frozen=True)
class Grid:
    """Where every head is drawn. ``positions`` int64 ``[flat head]``: its cell (``row * n_cols + column``, row
    0 at the top), -1 for a head not drawn; ``model``: a model grid (``layers_as_rows`` says its orientation),
    else a list grid; ``cell_px``: a cell's pixels ``(across, down)``; ``text_lines``: lines of text each cell
    keeps room for above its layout."""

    n_rows: int
    n_cols: int
    positions: np.ndarray
    model: bool
    layers_as_rows: bool
    cell_px: tuple[float, float]
    text_lines: int = 0

    def origins(self) -> np.ndarray:
        """float64 ``[flat head, 2]``: the lower-left corner of each head's cell in grid units (NaN: not drawn)."""
        shown = self.positions >= 0
        rows, columns = self.positions // self.n_cols, self.positions % self.n_cols
        origins = np.stack([columns * CELL, (self.n_rows - 1 - rows) * CELL], axis=1).astype(np.float64)
        origins[~shown] = np.nan
        return origins

    @property
    def inner(self) -> tuple[float, float, float, float]:
        """``(x, y, width, height)`` in grid units of the square (in pixels) a head's layout fills inside its cell,
        from the cell's lower-left corner: centred across, under the cell's text band."""
        across, down = self.cell_px
        band = min(self.text_lines * LINE_PX, down / 2)
        side = max(min(across, down - band) * (1 - 2 * PADDING), 1.0)
        width, height = side / across * CELL, side / down * CELL
        top = CELL - (band / down * CELL if band else (CELL - height) / 2)
        return (CELL - width) / 2, top - height, width, height

    def cell_heads(self) -> np.ndarray:
        """int64 ``[n_rows, n_cols]``: the flat head in each cell (-1: an empty cell), row 0 at the top."""
        heads = np.full(self.n_rows * self.n_cols, -1, dtype=np.int64)
        shown = np.flatnonzero(self.positions >= 0)
        heads[self.positions[shown]] = shown
        return heads.reshape(self.n_rows, self.n_cols)

    def fits_uint16(self) -> bool:
        """Whether the grid's coordinates fit uint16 (half of float32's bytes in the figure)."""
        return max(self.n_cols, self.n_rows) * CELL < np.iinfo(np.uint16).max

    def shows_text(self) -> bool:
        """Whether cells are large enough to write their text."""
        return self.cell_px[0] >= TEXT_CELL_PX[0] and self.cell_px[1] >= TEXT_CELL_PX[1]


def model_grid(n_layers: int, n_heads: int, box: Box, text_lines: int = 0) -> Grid:
    """Layers x heads in model order, layers as rows or as columns: whichever gives the larger layout square
    (rows on a tie)."""
    best = None
    for layers_as_rows in (True, False):
        n_rows, n_cols = (n_layers, n_heads) if layers_as_rows else (n_heads, n_layers)
        cell = (box.width / n_cols, box.height / n_rows)
        if best is None or min(cell) > min(best[2]) + 1e-9:
            best = (layers_as_rows, (n_rows, n_cols), cell)
    layers_as_rows, (n_rows, n_cols), cell = best
    flat = np.arange(n_layers * n_heads)
    layer, head = flat // n_heads, flat % n_heads
    positions = layer * n_cols + head if layers_as_rows else head * n_cols + layer
    return Grid(n_rows, n_cols, positions.astype(np.int64), True, layers_as_rows, cell, text_lines)


def list_columns(count: int, box: Box) -> int:
    """The columns that give ``count`` cells, row by row, the largest square in ``box`` (fewest empty cells on a
    tie)."""
    def size(columns: int) -> tuple[float, int]:
        rows = math.ceil(count / columns)
        return min(box.width / columns, box.height / rows), -(rows * columns - count)
    return max(range(1, max(count, 1) + 1), key=size)


def list_grid(shown: np.ndarray, n_total: int, box: Box, text_lines: int = 0) -> Grid:
    """The flat heads ``shown``, in that order, row by row (the others not drawn)."""
    count = max(len(shown), 1)
    n_cols = list_columns(count, box)
    n_rows = math.ceil(count / n_cols)
    positions = np.full(n_total, -1, dtype=np.int64)
    positions[np.asarray(shown, dtype=np.int64)] = np.arange(len(shown))
    return Grid(n_rows, n_cols, positions, False, True, (box.width / n_cols, box.height / n_rows), text_lines)


def axis_ticks(count: int, cell_px: float, label_px: float, prefix: str, downwards: bool = False) -> dict:
    """A model grid's axis: ``{prefix}{i}`` at cell centres (``downwards``: index 0 at the top), every so many
    cells so that labels stay ``label_px`` apart."""
    step = max(1, math.ceil(label_px / max(cell_px, 1e-9)))
    shown = list(range(0, count, step))
    return dict(tickmode="array", tickvals=[((count - 1 - index if downwards else index) + 0.5) * CELL
                                            for index in shown],
                ticktext=[f"{prefix}{index}" for index in shown], showticklabels=True)
