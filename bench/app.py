"""How fast the app is in a real browser: ``python -m bench.app --run runs/minilm --run runs/smollm2``.

For each run, starts ``qkviz serve`` on it alone and drives Debian's headless Chromium (Playwright's
Python package, ``/usr/bin/chromium``; software WebGL, no GPU) and reports:

Every interactive timing is from the user's action (navigation, the click, Enter) to the result drawn in the
page, and is given as min / median / max of ``--repeats`` (at least 5) runs:

* matrix view interactive after navigation: from the start of navigation to the matrix drawn with
  no callback pending (the first, cold load apart, then ``--repeats`` warm loads), and what an
  empty Dash page with one Plotly WebGL graph takes in the same browser (the floor: loading
  plotly.js, the same as the app's page loads, and starting WebGL; the result says which, ``plotly_js``);
* with a head atlas (``qkviz stats``): the same for the matrix ordered and coloured by an atlas
  statistic (``?sort=entropy_normalised``: a translucent heatmap under the points, badges) and for the
  Positions view (the relative-position heatmap), ``--repeats`` loads;
* switching heads in the single view: from the click on "head >" to the next head's figure (its title) drawn;
* search across all heads: from Enter to the highlighted matrix drawn, one token after another (different
  tokens); beside it, the server's part, the matrix callback's request start to its answer's arrival (localhost). The page
  records every matrix-figure request it sends with the search its state carries (``window.fetch`` wrapped before
  the page loads): a search is drawn only once the answer to a request carrying that search has arrived and
  Plotly has drawn the graph after it (its ``plotly_afterplot`` / ``plotly_react`` events), so the previous search's
  matches never stop the clock, and each search has its own server timing (a search without one is an error);
* bytes sent per single-head figure and for the matrix figure (the callbacks' JSON responses);
* the server's resident memory after start-up and its peak after the whole bench.

``--json`` (default ``bench/results/app.json``) records every run's figures with the date, machine, load averages
and arguments. ``--smoke``: the same steps once each (``--repeats 1``) on the run given, the result in a temporary
file.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.harness import Recorder, smoke_arguments, summary
from bench.support.browser import free_port, launch_chromium

SEARCHES = ("the", "and", "of", "to", "in", "a", "is", "was")
ATLAS_SORT = "entropy_normalised"
DRAWN = """([graphId, traces]) => {
  const graph = document.querySelector('#' + graphId + ' .js-plotly-plot');
  const ready = graph && graph.offsetParent !== null && graph.data && graph.data.length >= traces
                && !document.querySelector('[data-dash-is-loading="true"]');
  return ready && (window.__done = performance.now());
}"""
#: installed before a page loads: every matrix-figure request the page sends (Dash's callbacks go through
#: ``window.fetch``), with the search its state carries, when it left and when its answer arrived (the response's
#: headers: the server sends them once the callback is done; ``performance.now()`` ms), and its HTTP status
MATRIX_REQUESTS = """(() => {
  window.__matrixRequests = [];
  const original = window.fetch;
  window.fetch = function (input, init) {
    const url = typeof input === 'string' ? input : (input && input.url) || '';
    const body = init && typeof init.body === 'string' ? init.body : '';
    if (!url.includes('_dash-update-component') || !body.includes('matrix-graph.figure')) {
      return original.apply(this, arguments);
    }
    let search = null;
    try {
      for (const item of JSON.parse(body).inputs || []) {
        if (item && item.value && typeof item.value === 'object' && 'search' in item.value) { search = item.value.search; }
      }
    } catch (error) { /* not a callback's JSON: no search */ }
    const request = {search: search, start: performance.now(), end: null, status: null};
    window.__matrixRequests.push(request);
    return original.apply(this, arguments).then(response => {
      request.end = performance.now();
      request.status = response.status;
      return response;
    });
  };
})();"""
#: hooked once the matrix is drawn: the time of Plotly's last drawing of the matrix graph
PLOTTED = """() => {
  const graph = document.querySelector('#matrix-graph .js-plotly-plot');
  const mark = () => { window.__lastPlotted = performance.now(); };
  graph.on('plotly_afterplot', mark);
  graph.on('plotly_react', mark);
  window.__lastPlotted = performance.now();
}"""
#: this search's matches drawn: every matrix request carrying ``query`` since the clock started has its answer
#: (at least one did, and answered 200), Plotly drew the graph after the last of them, and its match traces hold points
SEARCH_DRAWN = """([query, since]) => {
  const mine = window.__matrixRequests.filter(r => r.search === query && r.start >= since);
  if (!mine.length || mine.some(r => r.end === null) || !mine.some(r => r.status === 200)) { return false; }
  const answered = Math.max(...mine.map(r => r.end));
  const graph = document.querySelector('#matrix-graph .js-plotly-plot');
  return window.__lastPlotted > answered && graph._fullData[2].x.length > 0;
}"""
FLOOR_APP = """
import flask, numpy as np, plotly.graph_objects as go, sys
from dash import Dash, dcc
from dash_app.plotly_bundle import page_scripts
x = np.random.default_rng(0).random(10000).astype(np.float32)
server = flask.Flask(__name__)
app = Dash(__name__, server=server, external_scripts=page_scripts(server, "/"))
app.layout = dcc.Graph(id="graph", figure=go.Figure(go.Scattergl(x=x, y=x[::-1], mode="markers")))
app.run(port=int(sys.argv[1]), debug=False)
"""


def page_plotly_js() -> str:
    """Which plotly.js the app's pages (and the floors beside them) load: the app's build (its version and traces),
    or the plotly package's, whole (:mod:`dash_app.plotly_bundle`)."""
    from plotly.offline import get_plotlyjs_version

    from dash_app.plotly_bundle import TRACES, usable_bundle

    if usable_bundle() is not None:
        return f"qkviz's build of plotly.js v{get_plotlyjs_version()} ({', '.join(TRACES)})"
    return f"the plotly package's plotly.js v{get_plotlyjs_version()}, every trace type"


def rss_mb(pid: int, field: str = "VmRSS") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def start(command: list[str], port: int) -> subprocess.Popen:
    import urllib.request

    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env=dict(os.environ, HF_HUB_OFFLINE="1"))
    for _ in range(600):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2)
            return server
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{command} did not answer")


def stop(server: subprocess.Popen) -> None:
    server.terminate()
    server.wait(timeout=10)


def load_ms(browser, url: str, graph: str, traces: int) -> float:
    """Milliseconds from the start of navigation to ``graph`` drawn with nothing pending (fresh page)."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(url)
    page.wait_for_function(DRAWN, arg=[graph, traces], timeout=60_000, polling="raf")
    done = page.evaluate("() => window.__done")
    page.close()
    return done


def floor_ms(browser, repeats: int) -> float:
    port = free_port()
    server = start([sys.executable, "-c", FLOOR_APP, str(port)], port)
    try:
        load_ms(browser, f"http://127.0.0.1:{port}/", "graph", 1)
        return summary([load_ms(browser, f"http://127.0.0.1:{port}/", "graph", 1) for _ in range(repeats)], 0)
    finally:
        stop(server)


def timed_action(page, action_js: str, graph: str, traces: int, condition: str = "true") -> float:
    """Milliseconds from running ``action_js`` in the page to ``graph`` drawn with ``condition`` true."""
    page.evaluate("() => { window.__done = null; }")
    start_ms = page.evaluate(f"() => {{ const t = performance.now(); {action_js}; return t; }}")
    page.wait_for_function(f"(arg) => ({condition}) && ({DRAWN})(arg)", arg=[graph, traces], timeout=60_000,
                           polling="raf")
    return page.evaluate("() => window.__done") - start_ms


def timed_search(page, query: str) -> dict:
    """One search across all heads, from Enter to its own matches drawn (:data:`SEARCH_DRAWN`), and the server's
    part: the matrix request carrying this search, from its start to its answer's arrival (one per search; how
    many requests carried it is recorded)."""
    page.fill("#search-input", query)
    page.evaluate("() => { window.__done = null; }")
    # the box searches on Enter (dcc.Input's debounce=True reads the keypress): the clock starts at the key
    start_ms = page.evaluate("() => { const t = performance.now(); document.getElementById('search-input')"
                             ".dispatchEvent(new KeyboardEvent('keypress', {key: 'Enter', keyCode: 13, charCode: 13, "
                             "which: 13, bubbles: true})); return t; }")
    page.wait_for_function(f"(arg) => ({SEARCH_DRAWN})(arg) && ({DRAWN})(['matrix-graph', 5])", arg=[query, start_ms],
                           timeout=60_000, polling="raf")
    drawn = page.evaluate("() => window.__done")
    requests = page.evaluate("([query, since]) => window.__matrixRequests.filter(r => r.search === query && "
                             "r.start >= since)", [query, start_ms])
    answered = [request for request in requests if request["status"] == 200]
    return {"query": query, "Enter to drawn ms": round(drawn - start_ms), "matrix requests": len(requests),
            "server ms": round(answered[-1]["end"] - answered[-1]["start"]),
            "answered before drawn": all(request["end"] <= drawn for request in requests)}


def bench_run(browser, run: Path, repeats: int, background: str = "none") -> dict:
    from qkviz import open_run
    from qkviz.analysis import load_atlas

    opened = open_run(run)
    port = free_port()
    server = start([sys.executable, "-m", "qkviz", "serve", "--run", str(run), "--port", str(port),
                    "--background", background], port)
    url = f"http://127.0.0.1:{port}/"
    result = {"run": run.name, "model": opened.model_id, "tokens": opened.n_tokens,
              "heads": f"{opened.n_layers} x {opened.n_heads}", "points per head": 2 * opened.n_tokens,
              # what the run held: every method's 2D layouts (heads), and whether it has a head atlas
              "layouts": {method: count for (method, dim), count in opened.projection_counts().items()
                          if dim == 2 and count},
              "atlas": load_atlas(opened) is not None, "rss start MB": rss_mb(server.pid)}
    try:
        result["matrix cold ms"] = load_ms(browser, url, "matrix-graph", 5)
        result["matrix warm ms"] = summary([load_ms(browser, url, "matrix-graph", 5) for _ in range(repeats)], 0)
        if load_atlas(opened) is not None:
            result["matrix coloured ms"] = summary(
                [load_ms(browser, url + f"?sort={ATLAS_SORT}", "matrix-graph", 6) for _ in range(repeats)], 0)
            result["positions ms"] = summary(
                [load_ms(browser, url + "?view=positions", "positions-graph", 1) for _ in range(repeats)], 0)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        responses = []
        page.on("response", lambda response: responses.append(response) if "_dash-update" in response.url else None)

        page.goto(url + "?view=single&layer=0&head=0")
        page.wait_for_function(DRAWN, arg=["single-graph", 12], timeout=60_000)
        switches = []
        for step in range(1, 2 * repeats + 3):
            head = step % opened.n_heads
            # the new head's figure itself, not only its URL (the state callback comes first)
            switches.append(timed_action(page, "document.getElementById('next-head').click()", "single-graph", 12,
                                         f"location.search.includes('&head={head}&') && (() => {{ const g = document"
                                         f".querySelector('#single-graph .js-plotly-plot'); return g.layout.title"
                                         f".text.includes('head {head} ·'); }})()"))
        result["head switch ms"] = summary(switches, 0)
        sizes = [len(response.body()) for response in responses
                 if '"single-graph"' in (response.request.post_data or "") and response.status == 200]
        result["single figure MB"] = statistics.median(sizes) / 1e6

        responses.clear()
        page.close()
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.on("response", lambda response: responses.append(response) if "_dash-update" in response.url else None)
        page.add_init_script(MATRIX_REQUESTS)
        page.goto(url)
        page.wait_for_function(DRAWN, arg=["matrix-graph", 5], timeout=60_000)
        result["matrix figure MB"] = max(len(response.body()) for response in responses
                                         if "matrix-graph.figure" in (response.request.post_data or "")) / 1e6
        page.evaluate(PLOTTED)
        searches = [timed_search(page, query) for query in SEARCHES[:repeats]]
        result["searches"] = searches
        result["search Enter to drawn ms"] = summary([search["Enter to drawn ms"] for search in searches], 0)
        result["search server ms"] = summary([search["server ms"] for search in searches], 0)
        page.close()
        result["rss peak MB"] = rss_mb(server.pid, "VmHWM")
    finally:
        stop(server)
    return result


#: what the smoke test adds to ``--smoke`` (``{run}``: a copy of a tiny run; ``bench.support.tiny_run``)
SMOKE_ARGUMENTS = ("--run", "{run}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, action="append", required=True)
    parser.add_argument("--repeats", type=int, default=5, help=f"runs of each timing, 5 to {len(SEARCHES)}")
    parser.add_argument("--background", default="none",
                        help="the server's --background method (default none: nothing projected while measuring)")
    parser.add_argument("--json", type=Path, help="default: bench/results/app.json")
    args = smoke_arguments(parser, argv, out="json", repeats=1)
    if not args.smoke and not 5 <= args.repeats <= len(SEARCHES):
        parser.error(f"--repeats must be 5 to {len(SEARCHES)} (min / median / max of at least 5 runs)")
    recorder = Recorder("app", vars(args), args.json)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        floor = floor_ms(browser, args.repeats)
        results = [bench_run(browser, run, args.repeats, args.background) for run in args.run]
        browser.close()
    written = recorder.write(floor_ms=floor, plotly_js=page_plotly_js(), runs=results)
    print(f"floor: an empty Dash page with one 10,000-point WebGL graph is drawn {floor['min']:.0f} / "
          f"{floor['median']:.0f} / {floor['max']:.0f} ms after navigation")
    for result in results:
        print(" | ".join(f"{name}: {value['min']:,.0f} / {value['median']:,.0f} / {value['max']:,.0f}"
                         if isinstance(value, dict) and "median" in value else f"{name}: {value:,.0f}" if isinstance(value, (int, float))
                         and value > 10 else f"{name}: {value:.2f}" if isinstance(value, float) else f"{name}: {value}"
                         for name, value in result.items()))
    print(written)


if __name__ == "__main__":
    main()
