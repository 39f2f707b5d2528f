"""The report's pages in headless Chromium, opened from ``file://`` with every network request refused: plotly.js
comes from the report's own ``assets/``, every graph is drawn, and nothing is logged as an error."""

import re

from support.browser import copy_run, launch_chromium

from qkviz.cli import main

#: graphs on the page, and those Plotly has drawn (laid out, with their SVG)
GRAPHS_JS = """() => { const graphs = [...document.querySelectorAll('.plotly-graph-div')];
  return [graphs.length, graphs.filter(g => g._fullLayout && g.querySelector('.main-svg')).length]; }"""
#: the head of each point of the correlation distribution's first box, as Plotly decoded it
BOX_HEADS_JS = """() => { const box = [...document.querySelectorAll('.plotly-graph-div')]
    .map(g => g._fullData && g._fullData[0]).find(trace => trace && trace.type === 'box');
  return Array.from(box.customdata, pair => Array.from(pair)); }"""


def test_report_pages_open_from_file_and_draw_every_graph_with_no_network(app_run, tmp_path):
    from playwright.sync_api import sync_playwright

    run = copy_run(app_run, tmp_path / "run")          # with a head atlas, so both pages are written
    out = tmp_path / "report"
    assert main(["-q", "report", "--run", str(run.path), "--out", str(out)]) == 0
    with sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        for name in ("index.html", "atlas.html"):
            context = browser.new_context(viewport={"width": 1400, "height": 1000})
            refused, errors, scripts = [], [], []
            context.route(re.compile(r"^(?!file:).*"), lambda route: (refused.append(route.request.url), route.abort()))
            page = context.new_page()
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
            page.on("requestfinished", lambda request: scripts.append(request.url)
                    if request.resource_type == "script" else None)
            page.goto((out / name).as_uri(), wait_until="load")
            page.wait_for_function(f"() => {{ const [n, drawn] = ({GRAPHS_JS})(); return n > 0 && drawn == n; }}",
                                   timeout=60_000)
            total, drawn = page.evaluate(GRAPHS_JS)
            assert drawn == total >= 4, (name, drawn, total)
            assert [url.rsplit("/", 2)[-2:] for url in scripts] == [["assets", f"plotly-cartesian-{_plotly_js_version()}.min.js"]]
            assert page.evaluate("() => typeof Plotly.newPlot") == "function"
            if name == "index.html":      # per-point head names come from an index pair, decoded from a typed array
                heads = page.evaluate(BOX_HEADS_JS)
                assert heads == [[layer, head] for layer in range(run.n_layers) for head in range(run.n_heads)]
            context.close()
            assert not refused and not errors, (name, refused, errors)
        browser.close()


def _plotly_js_version() -> str:
    from plotly.offline import get_plotlyjs_version

    return get_plotlyjs_version()
