"""Selections in a 2D Plotly graph in headless Chromium: a box or a lasso dragged with the mouse (the tool picked
from the figure's toolbar), and the points that must (or may) fall inside, computed from the points' page
coordinates."""

from __future__ import annotations

import numpy as np

#: the page coordinates of a 2D graph's plot area: [left, top, width, height]
PLOT_AREA_JS = """(graphId) => {
  const graph = document.querySelector('#' + graphId + ' .js-plotly-plot');
  const box = graph.getBoundingClientRect(), size = graph._fullLayout._size;
  return [box.left + size.l, box.top + size.t, size.w, size.h];
}"""
#: [customdata, page x, page y] of every point of traces 0 and 1 (queries and keys) of a 2D graph
POINTS_JS = """(graphId) => {
  const graph = document.querySelector('#' + graphId + ' .js-plotly-plot');
  const layout = graph._fullLayout, rect = graph.getBoundingClientRect(), points = [];
  [0, 1].forEach((trace) => {
    const data = graph._fullData[trace];
    for (let i = 0; i < data.x.length; i++) {
      points.push([Number(data.customdata[i]), rect.left + layout._size.l + layout.xaxis.l2p(data.x[i]),
                   rect.top + layout._size.t + layout.yaxis.l2p(data.y[i])]);
    }
  });
  return points;
}"""


def box_select(page, graph_id: str, fractions: tuple[float, float, float, float]) -> list[int]:
    """Drag a box over the plot area's ``fractions`` (x0, y0, x1, y1 of its width and height) in select mode
    (chosen from the figure's toolbar); returns the box in page pixels."""
    page.evaluate("(id) => document.getElementById(id).scrollIntoView({block: 'start'})", graph_id)
    left, top, width, height = page.evaluate(PLOT_AREA_JS, graph_id)
    box = [round(left + fractions[0] * width), round(top + fractions[1] * height),
           round(left + fractions[2] * width), round(top + fractions[3] * height)]
    page.mouse.move(box[0] - 5, box[1] - 5)
    page.click(f"#{graph_id} .modebar-btn[data-attr='dragmode'][data-val='select']")
    page.mouse.move(box[0], box[1])
    page.mouse.down()
    page.mouse.move((box[0] + box[2]) / 2, (box[1] + box[3]) / 2, steps=5)
    page.mouse.move(box[2], box[3], steps=5)
    page.mouse.up()
    return box


def lasso_select(page, graph_id: str, fractions: list[tuple[float, float]]) -> list[list[int]]:
    """Draw a lasso through the plot area's points ``fractions`` (of its width and height) in lasso mode;
    returns the polygon in page pixels."""
    page.evaluate("(id) => document.getElementById(id).scrollIntoView({block: 'start'})", graph_id)
    left, top, width, height = page.evaluate(PLOT_AREA_JS, graph_id)
    polygon = [[round(left + x * width), round(top + y * height)] for x, y in fractions]
    page.mouse.move(polygon[0][0] - 5, polygon[0][1] - 5)
    page.click(f"#{graph_id} .modebar-btn[data-attr='dragmode'][data-val='lasso']")
    page.mouse.move(*polygon[0])
    page.mouse.down()
    for corner in polygon[1:] + polygon[:1]:
        page.mouse.move(*corner, steps=8)
    page.mouse.up()
    return polygon


def expected_in_polygon(page, graph_id: str, polygon: list[list[int]], margin: float = 1.0) -> tuple[set[int], set[int]]:
    """The points surely inside a polygon of page pixels (ray casting), and those within ``margin`` pixels of one
    of its sides (either way is right)."""
    points = np.array(page.evaluate(POINTS_JS, graph_id))
    ids, xy = points[:, 0].astype(int), points[:, 1:]
    corners = np.array(polygon, dtype=float)
    starts, ends = corners, np.roll(corners, -1, axis=0)
    sides = ends - starts                                                          # [side, 2]
    along = np.clip(((xy[:, None] - starts) * sides).sum(-1) / (sides ** 2).sum(-1), 0, 1)   # [point, side]
    near = (np.hypot(*np.moveaxis(xy[:, None] - starts - along[..., None] * sides, -1, 0)) < margin).any(axis=1)
    crosses = ((starts[:, 1] > xy[:, 1:2]) != (ends[:, 1] > xy[:, 1:2])) & (
        xy[:, 0:1] < sides[:, 0] * (xy[:, 1:2] - starts[:, 1]) / np.where(sides[:, 1] == 0, 1, sides[:, 1]) + starts[:, 0])
    inside = crosses.sum(axis=1) % 2 == 1
    return set(ids[inside & ~near]), set(ids[near])


def expected_in_box(page, graph_id: str, box: list[int]) -> tuple[set[int], set[int]]:
    """:func:`expected_in_polygon` of a box ``[x0, y0, x1, y1]``."""
    x0, y0, x1, y1 = box
    return expected_in_polygon(page, graph_id, [[x0, y0], [x1, y0], [x1, y1], [x0, y1]])


def check_selected(selected: set[int], inside: set[int], edge: set[int]) -> None:
    assert inside <= selected <= inside | edge, (len(selected), len(inside), len(edge))
