"""In headless Chromium: a page of the app that opens on the matrix and then shows every view in turn logs no
error in the console (Dash writes its own complaints there, a callback whose output is not in the page among
them) and meets no uncaught JavaScript error; its graphs are drawn by the app's own plotly.js build where set-up made
one (dash_app.plotly_bundle), which holds every trace type they draw."""

from support.browser import console_errors, copy_run, launch_chromium, new_page, served_in_thread, wait_idle

import qkviz
from dash_app import ids
from dash_app.app import VIEWS
from dash_app.plotly_bundle import ROUTE, TRACES, usable_bundle

#: true when the view's container shows and every graph in it is drawn
VIEW_DRAWN_JS = """(container) => {
  const view = document.getElementById(container);
  if (!view || view.offsetParent === null) { return false; }
  return Array.from(view.querySelectorAll('.js-plotly-plot')).every(graph => graph._fullData);
}"""
#: the trace types of every graph drawn in the page, the trace types the page's plotly.js holds, and whether the page
#: loaded the app's build
TRACES_JS = """(route) => ({
  drawn: Array.from(document.querySelectorAll('.js-plotly-plot')).flatMap(graph => (graph._fullData || [])
    .map(trace => trace.type)),
  registered: Object.keys(Plotly.PlotSchema.get().traces),
  build: Array.from(document.scripts).some(script => script.src.includes(route)),
})"""


def test_showing_every_view_logs_no_error_in_the_console(app_run, reseeded_run, tmp_path):
    """Two runs over the same tokens (so that Compare is offered too), a text run (Document, Composition): every
    registered view has its tab."""
    from playwright.sync_api import sync_playwright

    from dash_app.app import create_app

    other = copy_run(reseeded_run("llama", max_sentences=20), tmp_path / "tiny-other", atlas=False)
    qkviz.project(other, methods=["pca"], dims=[2], progress=False)
    with served_in_thread(create_app([app_run.path, other.path])) as url, sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        page, errors = new_page(browser)
        logged = console_errors(page)
        page.goto(url)
        page.wait_for_function(VIEW_DRAWN_JS, arg=VIEWS[0].container, timeout=30_000)
        wait_idle(page)
        tabs = page.eval_on_selector_all(f"#{ids.VIEW_TABS} .tab", "tabs => tabs.map(tab => tab.innerText.trim())")
        assert tabs == [view.label for view in VIEWS]
        for view in (*VIEWS[1:], VIEWS[0]):
            page.click(f"#{ids.VIEW_TABS} >> text={view.label}")
            page.wait_for_function(VIEW_DRAWN_JS, arg=view.container, timeout=30_000)
            wait_idle(page)
        page.wait_for_timeout(1500)           # a poll or two (the compare view's) while every view is mounted
        traces = page.evaluate(TRACES_JS, ROUTE)
        browser.close()
    assert not logged, logged
    assert not errors, errors
    assert traces["drawn"] and set(traces["drawn"]) <= set(traces["registered"]), traces
    assert traces["build"] == (usable_bundle() is not None)
    if traces["build"]:
        assert sorted(traces["registered"]) == sorted(TRACES)
