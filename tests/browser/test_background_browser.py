"""Serve before project, in headless Chromium: a run with only its PCA layouts is drawn at once (every head
in PCA, marked as waiting), and once the background worker starts, each head's attention t-SNE layout
switches in as it lands -- with no reload of the page, the projection menu counting the heads with the progress
line, and no error in its console (a landing redraws only the view that shows)."""

import threading

from support.browser import console_errors, copy_run, free_port, launch_chromium, new_page, wait_idle

from dash_app import ids
from dash_app.app import build_app
from dash_app.data.run_data import RunData
from dash_app.server import attach_workers, make_pca, start_in_turn

LABELS_JS = """() => { const g = document.querySelector('#matrix-graph .js-plotly-plot');
                       return g && g.data && g.data.length >= 5 && g.data[4].hovertext ? Array.from(g.data[4].hovertext) : null; }"""


def test_pca_first_then_each_head_switches_to_its_layout_without_a_reload(tiny_run, tmp_path):
    from playwright.sync_api import sync_playwright
    from werkzeug.serving import make_server

    run = copy_run(tiny_run("llama", max_sentences=5), tmp_path / "bare", atlas=False)
    data = RunData(run, "bare")
    make_pca(data, progress=False)
    workers = attach_workers([data], "attn-tsne")
    assert [worker.progress().total for worker in workers] == [8]
    server = make_server("127.0.0.1", free_port(), build_app([data]).server, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with sync_playwright() as playwright:
            browser = launch_chromium(playwright)
            page, errors = new_page(browser)
            logged = console_errors(page)      # a landing redraws no view whose graphs are not in the page yet
            page.goto(f"http://127.0.0.1:{server.server_port}/")
            page.wait_for_function(f"() => ({LABELS_JS})() !== null", timeout=30_000)
            wait_idle(page)
            labels = page.evaluate(LABELS_JS)
            assert len(labels) == 8 and all("PCA, waiting" in label for label in labels), labels
            assert "attention t-SNE layouts: 0/8 heads" in page.inner_text(f"#{ids.LAYOUT_PROGRESS}")
            assert "attention t-SNE (0/8 heads, being made" in page.inner_text(f"#{ids.METHOD_SELECT}")
            page.evaluate("() => { window.notReloaded = true; }")

            start_in_turn(workers)
            page.wait_for_function(f"() => ({LABELS_JS})().every(label => !label.includes('PCA, waiting'))",
                                   timeout=180_000)
            assert page.evaluate("() => window.notReloaded === true")          # switched in, not reloaded
            page.wait_for_function(f"""() => document.getElementById('{ids.LAYOUT_PROGRESS}').innerText
                                           .includes('8/8 heads')""", timeout=20_000)
            assert "being made" not in page.inner_text(f"#{ids.LAYOUT_PROGRESS}")
            # the projection menu followed the landings with the line (the page has made no action since it loaded)
            menu = page.inner_text(f"#{ids.METHOD_SELECT}")
            assert "attention t-SNE (8/8 heads" in menu and "being made" not in menu, menu
            page.click("#view-tabs >> text=Single head")
            # the single view's graph enters the page when the view first shows
            page.wait_for_function("() => (document.getElementById('single-graph')?.innerText ?? '')"
                                   ".includes('attention t-SNE 2D')", timeout=20_000)
            assert "waiting" not in page.inner_text("#single-graph")
            browser.close()
            assert not errors, errors
            assert not logged, logged
    finally:
        server.shutdown()
