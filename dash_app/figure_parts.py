"""The parts the views build their figures from: colours and colour scales, text Plotly shows literally, empty
figures, attention-line opacity steps, category legends, typed arrays for a Patch, and PNG images drawn on the server."""

from __future__ import annotations

import base64
import struct
import zlib

import numpy as np
import plotly.graph_objects as go

QUERY_COLOUR = "#1b9e77"    # queries green, keys pink, as in AttentionViz
KEY_COLOUR = "#e7298a"
QUERY_MATCH_COLOUR = "#00441b"
KEY_MATCH_COLOUR = "#67001f"
LINE_COLOUR = "#3f4f8f"
#: queries and keys in two hues of one sequential scale, light (low) to dark (high); the light end is still
#: a clear tint, never near-white, so low values stay visible on the white background
QUERY_SCALE = [[0.0, "#8fd4b0"], [0.5, "#2f9e63"], [1.0, "#00441b"]]
KEY_SCALE = [[0.0, "#f4a3cb"], [0.5, "#d0408c"], [1.0, "#67001f"]]
#: one colour per category of a categorical colouring (Okabe-Ito: told apart with colour-blindness too)
CATEGORY_COLOURS = ("#0072b2", "#e69f00", "#009e73", "#cc79a7", "#d55e00", "#56b4e9", "#f0e442")
#: a search match: drawn on top, enlarged, ringed in a colour no scale uses
MATCH_RING = "#ffb000"
#: line opacity is drawn in this many steps (one trace per step; Plotly has one opacity per trace)
OPACITY_STEPS = 5


def plotly_text(text: str) -> str:
    """``text`` as Plotly shows it literally: its labels read a small HTML subset, so ``& < >`` are escaped."""
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def plotly_texts(texts) -> np.ndarray:
    """:func:`plotly_text` of each entry, as an object array."""
    return np.array([plotly_text(text) for text in texts], dtype=object)


#: what a graph shows before its first drawing: nothing, not even axes (an empty figure's default axes cost Plotly a
#: drawing and its text measurements, on a page's first load, for a graph that is hidden or about to be redrawn)
BLANK_FIGURE = {"data": [], "layout": {"xaxis": {"visible": False}, "yaxis": {"visible": False}}}


def message_figure(message: str = "") -> go.Figure:
    """An empty figure without axes (the message, if any, as its only text)."""
    figure = go.Figure()
    figure.update_layout(xaxis_visible=False, yaxis_visible=False, plot_bgcolor="white", height=200,
                         margin=dict(l=10, r=10, t=10, b=10))
    if message:
        figure.add_annotation(text=plotly_text(message), showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    return figure


def opacity_step(weights: np.ndarray) -> np.ndarray:
    """int ``[n]``: the opacity step (0 .. OPACITY_STEPS - 1) of each weight in ``[0, 1]``."""
    return np.minimum((np.asarray(weights) * OPACITY_STEPS).astype(int), OPACITY_STEPS - 1)


def step_opacity(step: int) -> float:
    """The opacity a step is drawn with: its upper bound, so a weight of 0.1 is still visible."""
    return (step + 1) / OPACITY_STEPS


def category_scale(n: int) -> list[list]:
    """A stepped colour scale mapping category ``i`` of ``n`` (values ``0 .. n - 1``, with ``cmin = -0.5`` and
    ``cmax = n - 0.5``) to :data:`CATEGORY_COLOURS` ``[i]``."""
    scale = []
    for index in range(n):
        colour = CATEGORY_COLOURS[index % len(CATEGORY_COLOURS)]
        scale += [[index / n, colour], [(index + 1) / n, colour]]
    return scale


def category_marker(n: int) -> dict:
    """The marker fields that colour values ``0 .. n - 1`` by category, with no colour bar."""
    return dict(colorscale=category_scale(n), cmin=-0.5, cmax=n - 0.5, showscale=False)


def legend_entries(names, colours, trace=go.Scatter, legendgroup: str = "colours", title: str | None = None) -> list:
    """One legend-only trace per category (no points: ``x = [None]``), named and coloured, for a colouring
    whose points carry their colour as values on a stepped scale (:func:`category_marker`)."""
    entries = []
    for index, (name, colour) in enumerate(zip(names, colours)):
        extra = {"z": [None]} if trace is go.Scatter3d else {}
        entries.append(trace(x=[None], y=[None], **extra, mode="markers", name=str(name), hoverinfo="skip",
                             legendgroup=legendgroup, marker=dict(color=colour, size=9),
                             legendgrouptitle=dict(text=title) if title and index == 0 else None))
    return entries


def typed_arrays(trace: dict) -> dict:
    """A trace's dict with its numpy arrays as Plotly's typed arrays (``{"dtype", "bdata"}``, as a figure sends
    them), since a ``Patch`` would send them as JSON lists (2-3 times the bytes, and slower to encode)."""
    return {name: {"dtype": value.dtype.str.lstrip("<|"), "bdata": base64.b64encode(value.tobytes()).decode("ascii")}
            if isinstance(value, np.ndarray) and value.dtype.kind in "uif" else value for name, value in trace.items()}


def png_bytes(image: np.ndarray, level: int = 6) -> bytes:
    """An RGB ``[height, width, 3]`` or RGBA ``[height, width, 4]`` uint8 image as a PNG file's bytes (no filter,
    zlib-compressed at ``level``); images drawn on the server (a document's attention map, the matrix's head
    thumbnails) go out as these."""
    image = np.ascontiguousarray(image, dtype=np.uint8)
    height, width, channels = image.shape
    rows = np.concatenate([np.zeros((height, 1), np.uint8), image.reshape(height, -1)], axis=1)

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 6 if channels == 4 else 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows.tobytes(), level))
            + chunk(b"IEND", b""))


def png_data_uri(image: np.ndarray) -> str:
    """:func:`png_bytes` as a ``data:`` URI (an image trace's ``source``)."""
    return "data:image/png;base64," + base64.b64encode(png_bytes(image)).decode("ascii")
