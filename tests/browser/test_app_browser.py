"""End to end in headless Chromium: ``qkviz serve`` on a tiny run (and a copy with a head atlas), every
view, clicks, search, reload."""

import re

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from support.browser import HEATMAP_CELL_JS, chromium_page, click_point, copy_run, served_app, wait_idle

GRAPH_DRAWN = """([graphId, traces]) => {
  const graph = document.querySelector('#' + graphId + ' .js-plotly-plot');
  return graph && graph.offsetParent !== null && graph.data && graph.data.length >= traces;
}"""
VISIBLE = "(id) => document.getElementById(id).offsetParent !== null"


@pytest.fixture(scope="module")
def atlas_run(app_run, tmp_path_factory):
    return copy_run(app_run, tmp_path_factory.mktemp("browser-atlas") / "tiny-atlas")


@pytest.fixture(scope="module")
def served(app_run, atlas_run):
    """The app over the tiny run (run 0, no atlas) and its copy with an atlas (run 1)."""
    with served_app([app_run.path, atlas_run.path]) as url:
        yield url


@pytest.fixture(scope="module")
def page(served):
    """The browser, closed before the server stops."""
    with chromium_page() as page:
        yield page


def shown_view(page) -> list[str]:
    return [view for view in ("matrix-view", "single-view", "sentence-view", "positions-view")
            if page.evaluate(VISIBLE, view)]


def test_views_clicks_search_and_reload(page, served, app_run):
    responses = []
    page.on("response", lambda response: responses.append(response)
            if "_dash-update-component" in response.url and response.status == 200 else None)
    page.goto(served)
    page.wait_for_function(GRAPH_DRAWN, arg=["matrix-graph", 5], timeout=30_000)
    wait_idle(page)
    assert shown_view(page) == ["matrix-view"]

    # a click on a point of layer 1 head 2 (flat index 6) opens that head
    index = page.evaluate("""() => Array.from(document.querySelector('#matrix-graph .js-plotly-plot')
                             ._fullData[0].customdata).indexOf(6)""")
    click_point(page, "matrix-graph", 0, index)
    page.wait_for_function(GRAPH_DRAWN, arg=["single-graph", 12], timeout=20_000)
    wait_idle(page)
    assert shown_view(page) == ["single-view"]
    assert "layer=1&head=2" in page.url and "layer 1 head 2" in page.inner_text("#single-graph")
    single = [text for text in (response.text() for response in responses)
              if '"single-graph"' in text and '"queries"' in text]
    assert single and '"bdata"' in single[-1]                               # typed arrays, not lists

    # a click on query 10 highlights its sentence and draws its attention lines
    click_point(page, "single-graph", 0, 10)
    page.wait_for_function("""() => { const g = document.querySelector('#single-graph .js-plotly-plot');
                              return g.data[4].x && g.data[4].x.length > 0 && g.data[11].x.length == 1; }""",
                           timeout=20_000)
    # Plotly picks the point nearest the mouse (points overlap in a tiny run): check what it picked
    point, sentence = int(re.search(r"point=(\d+)", page.url)[1]), int(re.search(r"sentence=(\d+)", page.url)[1])
    assert sentence == int(app_run.tokens.sentence.iat[point % app_run.n_tokens])
    highlighted = page.evaluate("""() => Array.from(document.querySelector('#single-graph .js-plotly-plot')
                                   ._fullData[4 + (%d >= %d ? 1 : 0)].customdata)""" % (point, app_run.n_tokens))
    assert point in highlighted
    # the Clicked point panel is a callback of its own, answered after the figure's or before it
    page.wait_for_function("() => /\\((query|key)\\)/.test(document.querySelector('#single-point').innerText)",
                           timeout=20_000)

    # its corpus partners: ten buttons in the panel and ten stars in the layout; a partner click selects it
    page.wait_for_function("""() => document.querySelectorAll('#single-partners button').length === 10 &&
                              document.querySelector('#single-graph .js-plotly-plot').data[12].x.length === 10""",
                           timeout=20_000)
    assert "exact search" in page.inner_text("#single-partners")
    page.click("#single-partners button >> nth=0")
    page.wait_for_function("(old) => !location.search.includes('point=' + old + '&') && "
                           "!location.search.endsWith('point=' + old)", arg=point, timeout=20_000)
    partner = int(re.search(r"point=(\d+)", page.url)[1])
    assert (partner < app_run.n_tokens) != (point < app_run.n_tokens)      # a query's partner is a key, and back
    wait_idle(page)
    page.click("#next-head")
    page.wait_for_function("() => location.search.includes('head=3')", timeout=20_000)
    wait_idle(page)

    # its sentence: two token columns, hovering a token leaves only its lines
    page.click("#open-sentence")
    page.wait_for_function(GRAPH_DRAWN, arg=["sentence-graph", 3], timeout=20_000)
    wait_idle(page)
    assert shown_view(page) == ["sentence-view"]
    count_visible = """() => document.querySelector('#sentence-graph .js-plotly-plot').data
                       .filter((trace, index) => index >= 2 && trace.visible !== false).length"""
    all_lines = page.evaluate(count_visible)
    page.wait_for_timeout(300)
    click_point(page, "sentence-graph", 0, 3)
    page.wait_for_function(f"() => ({count_visible})() < {all_lines}", timeout=10_000)
    assert page.evaluate(count_visible) > 0

    # search: the count equals the token table's, also for the first token of the run
    tokens = app_run.tokens.token.str.strip().str.lower()
    for query in ("the", tokens.iat[0].upper()):
        page.fill("#search-input", query)
        page.press("#search-input", "Enter")
        expected = int((tokens == query.lower()).sum())
        page.wait_for_function("(n) => document.getElementById('search-count').innerText.startsWith(n + ' token')",
                               arg=expected, timeout=10_000)
    assert expected == app_run.n_sentences
    page.fill("#search-input", "<b>the</b>")
    page.press("#search-input", "Enter")
    page.wait_for_function("() => document.getElementById('search-count').innerText === '0 tokens'", timeout=10_000)
    assert page.locator("#search-count b").count() == 0

    # typing alone searches nothing: the search runs on Enter (or when the box loses focus), not while typing
    page.fill("#search-input", "the")
    page.wait_for_timeout(900)                        # three times the former 0.3 s debounce
    wait_idle(page)
    assert page.inner_text("#search-count") == "0 tokens" and "search=the" not in page.url

    # back to the matrix: matches highlighted in every head; the URL restores the view on reload
    page.press("#search-input", "Enter")
    page.click("#view-tabs >> text=Matrix")          # at once: the view and the search must both hold
    page.wait_for_function("""() => { const g = document.querySelector('#matrix-graph .js-plotly-plot');
                              return g.offsetParent !== null && g._fullData[2].x.length > 0; }""", timeout=20_000)
    wait_idle(page)
    url = page.url
    assert re.search(r"view=matrix&layer=1&head=3&.*search=the", url)
    page.reload()
    page.wait_for_function(GRAPH_DRAWN, arg=["matrix-graph", 5], timeout=20_000)
    wait_idle(page)
    assert page.url == url and page.input_value("#search-input") == "the"
    assert page.inner_text("#search-count").startswith(f"{int((tokens == 'the').sum())} token")


def test_bad_url_parameters_show_a_notice(page, served):
    page.goto(served + "?view=single&layer=7&colour=%3Cscript%3E&zoom=2")
    page.wait_for_selector(".notice", timeout=20_000)
    wait_idle(page)
    notice = page.inner_text(".notice")
    assert "unknown URL parameter 'zoom'" in notice and "layer='7'" in notice and "colour='<script>'" in notice
    assert shown_view(page) == ["single-view"] and "layer=0" in page.url


def test_positions_row_opens_its_head_whose_exemplar_opens_its_sentence(page, served, atlas_run):
    from qkviz.analysis.atlas.head_atlas import load_atlas

    atlas = load_atlas(atlas_run)
    page.goto(served + "?run=1&sort=label")                  # the matrix coloured by label: cells under the points
    page.wait_for_function(GRAPH_DRAWN, arg=["matrix-graph", 6], timeout=20_000)
    wait_idle(page)
    assert page.evaluate("() => document.querySelector('#matrix-graph .js-plotly-plot')._fullData[5].type") == "heatmap"

    page.click("#view-tabs >> text=Positions")
    page.wait_for_function(GRAPH_DRAWN, arg=["positions-graph", 1], timeout=20_000)
    wait_idle(page)
    assert shown_view(page) == ["positions-view"] and "view=positions" in page.url
    x, y = page.evaluate(HEATMAP_CELL_JS, ["positions-graph", 7, 3])                    # row 7 = layer 1 head 3
    opened = "() => location.search.includes('view=single&layer=1&head=3&')"
    for attempt in range(2):            # a click that lands while Plotly still binds its events (under load) is lost
        page.mouse.move(x - 3, y)
        page.mouse.move(x, y)
        page.mouse.click(x, y)
        try:
            page.wait_for_function(opened, timeout=10_000 if attempt == 0 else 20_000)
            break
        except PlaywrightTimeout:
            if attempt:
                raise
    page.wait_for_function(GRAPH_DRAWN, arg=["single-graph", 12], timeout=20_000)
    wait_idle(page)
    assert shown_view(page) == ["single-view"]
    row = atlas.table.query("layer == 1 and head == 3").iloc[0]
    assert page.inner_text("#single-atlas").startswith(f"strongest label: {row.label} {row.label_detail}")
    # the side panel, taller than the graph, must not stretch it (a resize redraws WebGL: 65 -> 350 ms a head):
    # the graph's height follows the window's
    heights = page.evaluate("""() => [document.getElementById('single-graph').getBoundingClientRect().height,
                                      document.querySelector('.side-panel').getBoundingClientRect().height,
                                      window.innerHeight]""")
    assert heights[0] == heights[2] - 195 < heights[1], heights

    exemplar = atlas.exemplars.query("layer == 1 and head == 3 and rank == 0").iloc[0]
    page.click("#single-atlas button.exemplar >> nth=0")
    page.wait_for_function("(s) => location.search.includes('view=sentence&layer=1&head=3&') && "
                           "location.search.includes('&sentence=' + s + '&')", arg=int(exemplar.sentence),
                           timeout=20_000)
    page.wait_for_function(GRAPH_DRAWN, arg=["sentence-graph", 3], timeout=20_000)
    wait_idle(page)
    assert shown_view(page) == ["sentence-view"]
    bold = page.evaluate("""() => document.querySelector('#sentence-graph .js-plotly-plot')._fullData[0]
                            .textfont.weight.indexOf('bold')""")
    assert bold == int(exemplar["query"])                    # the exemplar's query token (nothing is hidden)

    page.goto(served + "?run=0&view=positions")              # no atlas: the command that makes it
    page.wait_for_function("() => (document.getElementById('positions-message')?.innerText || '').includes('qkviz stats')",
                           timeout=20_000)
    assert "qkviz stats --run " in page.inner_text("#positions-message")
