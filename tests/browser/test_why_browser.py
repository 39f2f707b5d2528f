"""The why panel and the composition view in headless Chromium, over ``qkviz serve`` on a copy of the tiny Llama run
with its circuits stored (the model is loaded on demand from its saved directory):

* single-head view: a query clicked, then one of its sentence's keys it may attend to: the panel shows the two
  tokens, the logit (the stored query and key's) and bars whose every set adds up to it; a key after it (masked) is
  refused in the panel in one line;
* document view: a cell of the map clicked is the pair, explained the same way;
* composition view: drawn from the stored circuits, a click on a head node opens that head in the single view.
"""

import re

import pytest
from support.browser import click_point, copy_run, isolated_point, open_view, start_server, stop_server, wait_idle

from dash_app import ids

LAYER, HEAD = 1, 2
#: each bar trace's sum in the why panel of the view whose panel id is given, and the logit it shows
WHY_JS = """(panelId) => {
  const panel = document.getElementById(panelId);
  const logit = panel.querySelector('.why-logit');
  const graph = panel.querySelector('.why-bars .js-plotly-plot');
  if (!logit || !graph || !graph._fullData) { return null; }
  const sums = graph._fullData.map(t => Array.from(t.x).reduce((a, b) => a + Number(b), 0));
  return {logit: Number(logit.textContent), sums: sums, text: panel.innerText};
}"""
#: page coordinates of cell (row, column) of the document map (token j's cell is centred on j)
CELL_JS = """([graphId, row, column]) => {
  const graph = document.querySelector('#' + graphId + ' .js-plotly-plot');
  const layout = graph._fullLayout, box = graph.getBoundingClientRect();
  return [box.left + layout._size.l + layout.xaxis.l2p(column), box.top + layout._size.t + layout.yaxis.l2p(row)];
}"""
#: the index of the trace named `name` in a graph
TRACE_JS = """([graphId, name]) => document.querySelector('#' + graphId + ' .js-plotly-plot')._fullData
  .findIndex(t => t.name === name)"""


@pytest.fixture(scope="module")
def why_run(app_run, tmp_path_factory):
    from qkviz.explain import compute_circuits

    run = copy_run(app_run, tmp_path_factory.mktemp("why-browser") / "tiny-why", atlas=False)
    compute_circuits(run, budget=200)
    return run


@pytest.fixture(scope="module")
def served(why_run):
    server, url = start_server([why_run.path])
    yield url
    output = stop_server(server)
    assert "Traceback" not in output, output


def explained(page, panel_id: str) -> dict:
    page.wait_for_function(f"() => ({WHY_JS})('{panel_id}') !== null", timeout=90_000)
    wait_idle(page)
    return page.evaluate(WHY_JS, panel_id)


def stored_logit(run, query: int, key: int) -> float:
    return run.scale(LAYER) * float(run.queries(LAYER, HEAD)[query] @ run.keys(LAYER, HEAD)[key])


def check_bars(shown: dict, run, query: int, key: int) -> None:
    assert shown["logit"] == pytest.approx(stored_logit(run, query, key), abs=1e-3)
    assert len(shown["sums"]) == 3                         # key side, query side, bands
    assert all(total == pytest.approx(shown["logit"], abs=1e-3) for total in shown["sums"]), shown
    assert str(run.tokens.token.iat[query]).strip() in shown["text"]
    assert str(run.tokens.token.iat[key]).strip() in shown["text"]


def test_a_query_then_its_partner_opens_the_why_panel_whose_bars_add_up_to_the_logit(page, served, why_run):
    run = why_run
    n = run.n_tokens
    open_view(page, served, f"view=single&layer={LAYER}&head={HEAD}&method=pca&dim=2", ids.SINGLE_GRAPH, 13)
    rows = run.sentence_tokens(3)
    # one of the sentence's later queries, one that no other point covers (a click opens the point nearest it)
    chosen = isolated_point(page, ids.SINGLE_GRAPH, 0, range(rows.start + 3, rows.stop))
    click_point(page, ids.SINGLE_GRAPH, 0, chosen)
    page.wait_for_function(f"() => /point={chosen}(&|$)/.test(location.search)", timeout=20_000)
    page.wait_for_function("() => document.querySelector('#single-graph .js-plotly-plot')._fullData[5].x.length > 0",
                           timeout=20_000)
    wait_idle(page)
    assert page.locator(f"#{ids.why_ids('single').panel}").is_hidden()
    # a key of its sentence (drawn over the keys in sentence order) the causal mask lets it meet: at or before it
    key_point = isolated_point(page, ids.SINGLE_GRAPH, 5, range(chosen - rows.start + 1))
    click_point(page, ids.SINGLE_GRAPH, 5, key_point)
    page.wait_for_function("() => /pair=\\d+/.test(location.search)", timeout=20_000)
    point = int(re.search(r"point=(\d+)", page.url)[1])
    pair = int(re.search(r"pair=(\d+)", page.url)[1])
    query, key = min(point, pair), max(point, pair) - n
    assert query == chosen and rows.start <= key < rows.stop
    check_bars(explained(page, ids.why_ids("single").panel), run, query, key)


def test_a_cell_of_the_document_map_is_explained(page, served, why_run):
    run = why_run
    rows = run.sentence_tokens(2)
    open_view(page, served, f"view=document&layer={LAYER}&head={HEAD}&method=pca&sentence=2", ids.DOCUMENT_GRAPH, 1)
    row, column = rows.stop - rows.start - 1, 1                 # the last query with the second key
    x, y = page.evaluate(CELL_JS, [ids.DOCUMENT_GRAPH, row, column])
    page.mouse.move(x - 2, y)
    page.mouse.move(x, y)
    page.mouse.click(x, y)
    page.wait_for_function("() => /pair=\\d+/.test(location.search)", timeout=20_000)
    assert int(re.search(r"point=(\d+)", page.url)[1]) == rows.start + row
    check_bars(explained(page, ids.why_ids("document").panel), run, rows.start + row, rows.start + column)


def test_the_composition_view_opens_the_head_clicked(page, served):
    open_view(page, served, "view=composition&method=pca", ids.COMPOSITION_GRAPH, 3)
    message = page.locator(f"#{ids.COMPOSITION_MESSAGE}").inner_text()
    assert "edges drawn" in message and "qkviz stats" not in message
    heads = page.evaluate(TRACE_JS, [ids.COMPOSITION_GRAPH, "heads"])
    assert heads >= 0
    click_point(page, ids.COMPOSITION_GRAPH, heads, LAYER * 4 + HEAD)     # 4 heads a layer
    page.wait_for_function("() => /view=single/.test(location.search)", timeout=20_000)
    assert f"layer={LAYER}" in page.url and f"head={HEAD}" in page.url
    page.wait_for_function(f"() => document.querySelector('#{ids.SINGLE_GRAPH}').offsetParent !== null",
                           timeout=20_000)


def test_ablate_this_head_shows_the_mean_change_an_independent_ablation_gives(page, served, why_run):
    """The head panel's "Ablate this head": the model runs in the background (never in the request), and the mean
    change drawn equals ``run.ablate`` computed here."""
    open_view(page, served, f"view=single&layer={LAYER}&head={HEAD}&method=pca&dim=2", ids.SINGLE_GRAPH, 13)
    page.click(f"#{ids.ABLATE_BUTTON}")
    page.wait_for_selector(".ablation-mean", timeout=120_000)
    wait_idle(page)
    shown = float(page.inner_text(".ablation-mean"))
    expected = why_run.ablate(LAYER, HEAD).attrs["mean_change"]
    assert shown == pytest.approx(expected, abs=1.5e-4)
    assert page.locator(".ablation-tokens tbody tr").count() > 0


#: the number of heatmaps drawn in the composition view's layer matrix, or null before it is drawn
LAYER_MATRIX_JS = """() => {
  const graph = document.querySelector('#%s .js-plotly-plot');
  if (!graph || !graph._fullData || graph.offsetParent === null) { return null; }
  return graph._fullData.filter(t => t.type === 'heatmap').length;
}""" % ids.COMPOSITION_LAYER_GRAPH
#: page coordinates of cell (target, source) of the layer matrix's first heatmap (its axes' own offsets: the matrix
#: keeps its cells square, so its plot area is narrower than the graph's)
MATRIX_CELL_JS = """([target, source]) => {
  const graph = document.querySelector('#%s .js-plotly-plot');
  const layout = graph._fullLayout, box = graph.getBoundingClientRect();
  return [box.left + layout.xaxis._offset + layout.xaxis.l2p(source),
          box.top + layout.yaxis._offset + layout.yaxis.l2p(target)];
}""" % ids.COMPOSITION_LAYER_GRAPH


def test_the_composition_view_by_layer_opens_the_layer_clicked(page, served, why_run):
    """The layer x layer matrix (one heatmap per side), a click on a cell opens its target layer: the head graph of
    that layer's edges, every one into or out of it."""
    open_view(page, served, "view=composition&method=pca", ids.COMPOSITION_GRAPH, 3)
    page.locator(f"#{ids.COMPOSITION_LEVEL} input[value='layers']").check()
    page.wait_for_function(f"() => ({LAYER_MATRIX_JS})() === 3", timeout=30_000)
    wait_idle(page)
    message = page.locator(f"#{ids.COMPOSITION_MESSAGE}").inner_text()
    assert "summed |contribution|" in message and "Click a cell" in message
    assert page.evaluate(f"() => document.querySelector('#{ids.COMPOSITION_GRAPH}').offsetParent") is None
    target, source = why_run.n_layers - 1, 0
    x, y = page.evaluate(MATRIX_CELL_JS, [target, source])
    page.mouse.move(x - 2, y)
    page.mouse.move(x, y)
    page.mouse.click(x, y)
    page.wait_for_function(f"() => document.querySelector('#{ids.COMPOSITION_GRAPH}').offsetParent !== null",
                           timeout=30_000)
    wait_idle(page)
    message = page.locator(f"#{ids.COMPOSITION_MESSAGE}").inner_text()
    assert "edges drawn" in message
    assert page.locator(f"#{ids.COMPOSITION_LAYERS}").inner_text().strip() == str(target)
    ends = page.evaluate(f"""() => document.querySelector('#{ids.COMPOSITION_GRAPH} .js-plotly-plot')._fullData
        .filter(t => t.name === 'edge ends')[0].hovertext""")
    assert ends and all(f"→ L{target}H" in text or text.startswith(f"L{target}") for text in ends)
