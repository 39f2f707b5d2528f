"""In headless Chromium: a box or lasso selection in the single view lists exactly the points inside it, in the
table and in the CSV download; the compare view of two runs over the same tokens shows qkviz.attention_change's
values, links hover and selection between its two figures, and opens a head from a heatmap cell."""

import numpy as np
import pandas as pd
import pytest
from support.browser import chromium_page, POINT_JS, click_point, copy_run, served_in_thread, wait_idle
from support.selection import box_select, check_selected, expected_in_box, expected_in_polygon, lasso_select

import qkviz

GRAPH_DRAWN = """([graphId, traces]) => {
  const graph = document.querySelector('#' + graphId + ' .js-plotly-plot');
  return graph && graph.offsetParent !== null && graph.data && graph.data.length >= traces;
}"""


@pytest.fixture(scope="module")
def runs(app_run, reseeded_run, tmp_path_factory):
    """The tiny Llama run and a run of the same model with other weights over the same sentences, both with
    PCA layouts (copied: layouts are written into it)."""
    other = copy_run(reseeded_run("llama", max_sentences=20), tmp_path_factory.mktemp("compare") / "tiny-other",
                     atlas=False)
    qkviz.project(other, methods=["pca"], dims=[2], progress=False)
    return app_run, other


@pytest.fixture(scope="module")
def served(runs):
    """The app over both runs, served in this process (no background layouts)."""
    from dash_app.app import create_app

    with served_in_thread(create_app([run.path for run in runs])) as url:
        yield url


@pytest.fixture(scope="module")
def browser_page(served):
    with chromium_page() as page:
        yield page


def shown_points(page) -> list[int]:
    """The point column of the selection table's rows."""
    return [int(text) for text in page.eval_on_selector_all(
        "#selection-table tbody tr", "rows => rows.map(row => row.lastElementChild.innerText)")]


def test_box_and_lasso_selections_list_the_points_inside_and_download_them(browser_page, served, runs):
    page, run = browser_page, runs[0]
    page.goto(served + "?view=single&layer=1&head=2&method=pca&dim=2")
    page.wait_for_function(GRAPH_DRAWN, arg=["single-graph", 12], timeout=30_000)
    wait_idle(page)
    # a clicked point first: its sentence's overlay traces repeat points, which the selection must not count twice
    click_point(page, "single-graph", 0, 10)
    page.wait_for_function("() => document.querySelector('#single-graph .js-plotly-plot').data[4].x.length > 0",
                           timeout=20_000)
    wait_idle(page)

    page.hover("#single-graph .js-plotly-plot")
    for tool in ("select", "lasso"):                       # the toolbar offers both tools, once each
        assert page.locator(f"#single-graph .modebar-btn[data-attr='dragmode'][data-val='{tool}']").count() == 1
    box = box_select(page, "single-graph", (0.3, 0.3, 0.7, 0.7))
    page.wait_for_function("() => document.getElementById('selection-table').innerText.includes('points selected')",
                           timeout=20_000)
    inside, edge = expected_in_box(page, "single-graph", box)
    assert 0 < len(inside) < 2 * run.n_tokens
    summary = page.inner_text("#selection-table .hint")
    count = int(summary.split(" points")[0].replace(",", ""))
    shown = shown_points(page)
    assert len(shown) == min(count, 100) and shown == sorted(shown)
    selected = set(shown)
    if count <= 100:
        check_selected(selected, inside, edge)
    with page.expect_download() as download:
        page.click("#selection-csv-button")
    csv = pd.read_csv(download.value.path(), keep_default_na=False)
    assert len(csv) == count and list(csv.point[:len(shown)]) == shown
    check_selected(set(csv.point), inside, edge)
    tokens = run.tokens
    rows = csv.point % run.n_tokens
    assert (csv.token.to_numpy() == tokens.token.to_numpy()[rows]).all()
    assert (csv.sentence.to_numpy() == tokens.sentence.to_numpy()[rows]).all()
    assert (csv.kind == np.where(csv.point >= run.n_tokens, "key", "query")).all()
    norms = np.concatenate([np.linalg.norm(run.queries(1, 2), axis=1), np.linalg.norm(run.keys(1, 2), axis=1)])
    assert np.allclose(csv.norm, norms[csv.point], rtol=1e-5)
    assert all("«" in text and "»" in text for text in csv.in_sentence)

    # a lasso: a triangle over the middle of the plot (started outside the box, which a drag inside would move)
    polygon = lasso_select(page, "single-graph", [(0.2, 0.25), (0.8, 0.4), (0.35, 0.8)])
    inside, edge = expected_in_polygon(page, "single-graph", polygon)
    page.wait_for_function("(n) => !document.getElementById('selection-table').innerText.startsWith(n + ' points')",
                           arg=f"{count:,}", timeout=20_000)
    assert 0 < len(inside) < 2 * run.n_tokens
    with page.expect_download() as download:
        page.click("#selection-csv-button")
    check_selected(set(pd.read_csv(download.value.path(), keep_default_na=False).point), inside, edge)

    # the whole plot: every query and key, the table shows the first 100, the CSV holds them all
    box = box_select(page, "single-graph", (0.005, 0.005, 0.995, 0.995))
    page.wait_for_function("(n) => document.getElementById('selection-table').innerText.startsWith(n + ' points')",
                           arg=f"{2 * run.n_tokens:,}", timeout=20_000)
    assert len(shown_points(page)) == 100 and "the CSV holds all" in page.inner_text("#selection-table .hint")
    with page.expect_download() as download:
        page.click("#selection-csv-button")
    csv = pd.read_csv(download.value.path(), keep_default_na=False)
    assert list(csv.point) == list(range(2 * run.n_tokens))

    # another head drops the table
    page.click("#next-head")
    page.wait_for_function("() => document.getElementById('selection-table').innerText.startsWith('Select points')",
                           timeout=20_000)


def test_compare_view_shows_the_change_links_hover_and_selection_and_opens_a_head(browser_page, served, runs):
    page = browser_page
    expected = qkviz.attention_change(*runs, progress=False)
    page.goto(served + "?view=compare&method=pca")
    page.wait_for_selector("#view-tabs >> text=Compare", timeout=30_000)
    page.wait_for_function("() => document.querySelectorAll('#compare-table tbody tr').length > 0", timeout=60_000)
    wait_idle(page)

    # the table and the heatmap hold qkviz.attention_change's values
    rows = page.eval_on_selector_all("#compare-table tbody tr",
                                     "rows => rows.map(row => Array.from(row.children).map(cell => cell.innerText))")
    top = expected.sort_values("mean_js", ascending=False, kind="stable")
    assert [(int(r[0]), int(r[1]), r[2], r[3]) for r in rows] == [
        (row.layer, row.head, f"{row.mean_js:.4f}", f"{row.median_js:.4f}") for row in top.itertuples()]
    heatmap_js = "() => document.querySelector('#compare-heatmap .js-plotly-plot')"
    page.wait_for_function(f"() => {{ const g = ({heatmap_js})(); return g && g._fullData && g._fullData.length > 0; }}",
                           timeout=20_000)       # the table can come before the graph's component has drawn
    grid = np.array(page.evaluate(f"() => ({heatmap_js})()._fullData[0].z"),
                    dtype=float)
    assert np.allclose(grid, expected.mean_js.to_numpy().reshape(runs[0].n_layers, runs[0].n_heads), atol=1e-12)

    # hovering a point of the left figure rings the same token in the right one
    page.wait_for_function(GRAPH_DRAWN, arg=["compare-graph-a", 3], timeout=20_000)
    page.wait_for_function(GRAPH_DRAWN, arg=["compare-graph-b", 3], timeout=20_000)
    wait_idle(page)
    x, y = page.evaluate(POINT_JS, ["compare-graph-a", 0, 25])
    page.mouse.move(x - 3, y)
    page.mouse.move(x, y)
    page.wait_for_function("() => document.querySelector('#compare-graph-b .js-plotly-plot').data[2].x.length === 1",
                           timeout=10_000)
    hovered = page.evaluate("""() => { const g = document.querySelector('#compare-graph-a .js-plotly-plot');
                               const h = g._hoverdata[0]; return Number(g._fullData[h.curveNumber].customdata[h.pointNumber]); }""")
    ring = page.evaluate("""() => { const g = document.querySelector('#compare-graph-b .js-plotly-plot');
                            return [g.data[2].customdata[0], g.data[2].x[0], g.data[2].y[0]]; }""")
    n_tokens = runs[1].n_tokens
    layout_b = runs[1].projection(0, 0, "pca", 2)
    assert ring[0] == hovered
    assert np.allclose(ring[1:], layout_b[hovered], atol=1e-5)

    # a box selection in the left figure selects the same points in the right one
    box = box_select(page, "compare-graph-a", (0.25, 0.25, 0.75, 0.75))
    page.wait_for_function("""() => { const d = document.querySelector('#compare-graph-b .js-plotly-plot').data;
                              return Array.isArray(d[0].selectedpoints) || ArrayBuffer.isView(d[0].selectedpoints); }""",
                           timeout=10_000)
    inside, edge = expected_in_box(page, "compare-graph-a", box)
    picked = page.evaluate("""() => { const d = document.querySelector('#compare-graph-b .js-plotly-plot').data;
                              return [Array.from(d[0].selectedpoints), Array.from(d[1].selectedpoints)]; }""")
    selected_b = set(picked[0]) | {n_tokens + index for index in picked[1]}
    assert inside
    check_selected(selected_b, inside, edge)

    # a click on a heatmap cell opens that head in both figures
    cell = page.evaluate("""([row, column]) => {
      const graph = document.querySelector('#compare-heatmap .js-plotly-plot');
      const layout = graph._fullLayout, box = graph.getBoundingClientRect();
      return [box.left + layout._size.l + layout.xaxis.d2p(column), box.top + layout._size.t + layout.yaxis.d2p(row)];
    }""", [1, 3])
    page.mouse.click(*cell)
    page.wait_for_function("""() => ['a', 'b'].every(side => document.querySelector('#compare-graph-' + side)
                              .innerText.includes('layer 1 head 3'))""", timeout=20_000)
    assert page.inner_text("#compare-layer") == "1" and page.inner_text("#compare-head") == "3"
