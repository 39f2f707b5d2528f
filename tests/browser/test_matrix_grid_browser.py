"""The matrix view fitted to the window, in headless Chromium at 1400 x 900: the drawn grid of 6 x 12, 12 x 12,
30 x 9 and 32 x 32 heads spans >= 60% of the window's width and >= 55% of its height (issue 28), and the page fits
the window whole, the grid's last row and its axes' labels inside it, the projection menu's longest label uncut
(issue 40); a click on a head of the 1,024 opens it; a filter by pattern label hides or fades the other heads. The
runs are random Llama-shaped models of those grids over two sentences (tests/support/grid_runs.py)."""

import re

import pytest
from support.browser import DRAWN_JS, served_app, wait_idle
from support.grid_runs import GRIDS, grid_run

from qkviz.cli import main
from qkviz.projection import method_labels

#: the drawn grid (the cells' heatmap image) as shares of the window, and its rows and columns
GRID_SHARE_JS = """() => { const g = document.querySelector('#matrix-graph .js-plotly-plot');
  const r = g.querySelector('.heatmaplayer image').getBoundingClientRect(), cells = g._fullData[5];
  const right = Math.min(r.right, window.innerWidth), bottom = Math.min(r.bottom, window.innerHeight);
  return [(right - Math.max(r.left, 0)) / window.innerWidth, (bottom - Math.max(r.top, 0)) / window.innerHeight,
          cells.y.length, cells.x.length]; }"""
#: page coordinates of the centre of head ``flat``'s cell (slot 5), and its hover text
CELL_JS = """(flat) => {
  const graph = document.querySelector('#matrix-graph .js-plotly-plot'), layout = graph._fullLayout;
  const cells = graph._fullData[5], box = graph.getBoundingClientRect();
  const row = cells.customdata.findIndex(r => r.includes(flat)), column = cells.customdata[row].indexOf(flat);
  return [box.left + layout._size.l + layout.xaxis.l2p(cells.x[column]),
          box.top + layout._size.t + layout.yaxis.l2p(cells.y[row])];
}"""
#: the page's height, the bottoms of the drawn grid and of the lowest axis label, the axes' label counts, and the
#: message line's height
FIT_JS = """() => { const g = document.querySelector('#matrix-graph .js-plotly-plot');
  const labels = Array.from(g.querySelectorAll('.xtick text, .ytick text')).map(t => t.getBoundingClientRect().bottom);
  return {page: document.documentElement.scrollHeight, grid: g.querySelector('.heatmaplayer image').getBoundingClientRect().bottom,
          labels: Math.max(...labels), x: g.querySelectorAll('.xtick text').length, y: g.querySelectorAll('.ytick text').length,
          message: document.getElementById('matrix-message').getBoundingClientRect().height}; }"""
#: whether the figure is drawn at its graph's size (a responsive graph resizes after it is first drawn)
SETTLED_JS = """() => { const g = document.querySelector('#matrix-graph .js-plotly-plot');
  return !!g && !!g._fullLayout && g.querySelectorAll('.xtick text').length > 0 && g.querySelector('.heatmaplayer image') !== null
         && Math.abs(g._fullLayout.height - g.getBoundingClientRect().height) < 2
         && Math.abs(g._fullLayout.width - g.getBoundingClientRect().width) < 2; }"""
#: the projection menu's shown label set to ``text``: [its width, the room its closed control gives it]
MENU_LABEL_JS = """(text) => { const shown = document.querySelector('#method-select .dash-dropdown-value');
  shown.querySelector('.dash-dropdown-value-item span').textContent = text;
  return [shown.scrollWidth, shown.clientWidth]; }"""
#: the flat heads that have a cell
SHOWN_JS = """() => document.querySelector('#matrix-graph .js-plotly-plot')._fullData[5].customdata
                       .flat().filter(flat => flat !== null && flat !== undefined)"""


@pytest.fixture(scope="module")
def grid_runs(tmp_path_factory, tiny_corpus):
    """One run per grid of GRIDS, in that order; the first (6 x 12) with a head atlas."""
    directory = tmp_path_factory.mktemp("grids")
    runs = [grid_run(directory, name, tiny_corpus, max_sentences=2) for name in GRIDS]
    assert main(["-q", "stats", "--run", str(runs[0].path)]) == 0
    return runs


@pytest.fixture(scope="module")
def served(grid_runs):
    with served_app([run.path for run in grid_runs], timeout=180) as url:
        yield url


def open_matrix(page, url: str, query: str) -> None:
    page.goto(f"{url}?view=matrix&method=pca&{query}")
    page.wait_for_function(DRAWN_JS, arg=["matrix-graph", 6], timeout=60_000)
    wait_idle(page, 60_000)
    page.wait_for_timeout(200)


def test_the_matrix_fills_the_window_for_every_grid(page, served, grid_runs):
    assert page.viewport_size == {"width": 1400, "height": 900}
    shares = {}
    for index, (name, (layers, heads, _)) in enumerate(GRIDS.items()):
        open_matrix(page, served, f"run={index}")
        width, height, rows, columns = page.evaluate(GRID_SHARE_JS)
        shares[name] = (round(width, 3), round(height, 3))
        assert rows * columns == layers * heads
        if name == "30x9":
            assert (rows, columns) == (9, 30)                    # layers as columns: not a narrow column of cells
        assert width >= 0.6 and height >= 0.55, shares
    # the axes name the layers and heads, the cells do not
    ticks = page.evaluate("() => Array.from(document.querySelectorAll('#matrix-graph .ytick text')).map(t => t.textContent)")
    assert ticks[:2] == ["L0", "L1"] and page.locator("#matrix-graph .textpoint text").count() == 0


def test_the_matrix_fits_the_window_whole_with_its_axes(page, served):
    """Issue 40: at 1400 x 900 the page is no taller than the window for every grid, the grid's last row and the axes'
    labels inside it (the layout leaves about 35 px below the graph: matrix_grid.PAGE_HEIGHT_PX), the message line a
    fixed two-line slot whatever it says, and the projection menu's longest label fits its closed control."""
    fits = {}
    for index, name in enumerate(GRIDS):
        for search in ("", "&search=the"):
            page.goto(f"{served}?view=matrix&method=pca&run={index}{search}")
            page.wait_for_function(DRAWN_JS, arg=["matrix-graph", 6], timeout=60_000)
            wait_idle(page, 60_000)
            page.wait_for_function(SETTLED_JS, timeout=30_000)
            if search:
                page.wait_for_function("() => document.getElementById('matrix-message').innerText.includes('Cluster badges')",
                                       timeout=30_000)
            fits[name, search] = fit = page.evaluate(FIT_JS)
            assert fit["page"] <= 900 and fit["grid"] <= 900 and fit["labels"] <= 900, fits
            assert fit["x"] >= 2 and fit["y"] >= 2, fits                  # both axes are labelled
    assert {round(fit["message"]) for fit in fits.values()} == {32}, fits     # the message's slot, empty or not
    # the longest label the menu can show: the longest method's name, every head but one, being made, a recall
    longest = f"{max(method_labels().values(), key=len)} (1023/1024 heads, being made, recall 30%)"
    width, room = page.evaluate(MENU_LABEL_JS, longest)
    assert 400 <= width <= room, (width, room)


def test_a_click_on_a_head_of_the_1024_opens_it(page, served):
    open_matrix(page, served, "run=3")
    flat = 3 * 32 + 5
    x, y = page.evaluate(CELL_JS, flat)
    page.mouse.move(x - 2, y)
    page.mouse.move(x, y)
    page.wait_for_function("() => (document.querySelector('#matrix-graph .hovertext') || {}).textContent === 'L3 H5'",
                           timeout=10_000)
    page.mouse.click(x, y)
    page.wait_for_function(DRAWN_JS, arg=["single-graph", 12], timeout=30_000)
    assert re.search(r"view=single.*layer=3&head=5", page.url)


def test_a_filter_hides_or_fades_the_other_heads(page, served, grid_runs):
    table = grid_runs[0].atlas.table
    middle = float(table.entropy_normalised.median())
    kept = sorted(int(row.layer) * 12 + int(row.head) for row in table.itertuples() if row.entropy_normalised >= middle)
    assert 0 < len(kept) < 72
    open_matrix(page, served, f"run=0&filter=entropy_normalised&filter_min={middle!r}&filter_mode=hide")
    assert sorted(page.evaluate(SHOWN_JS)) == kept
    assert (f"{len(kept)} of 72 heads kept by normalised entropy; the others left out"
            in page.inner_text("#matrix-message"))
    width, height, _, _ = page.evaluate(GRID_SHARE_JS)
    assert width >= 0.6 and height >= 0.55                       # the heads kept fill the window
    page.click("#matrix-filter-mode >> text=fade the others")
    page.wait_for_function(f"() => ({SHOWN_JS})().length === 72", timeout=30_000)
    page.wait_for_function("() => document.getElementById('matrix-message').innerText.includes('the others faded')",
                           timeout=30_000)
    assert "filter_mode" not in page.url and "filter=entropy_normalised" in page.url
