"""Related heads in headless Chromium: a click on the Heads map opens that head, and a related-head button
opens another (moved from tests/integration/app/test_app_related.py, whose fixture ``related_data`` is shared)."""

from dash_app import ids
from qkviz.analysis.atlas.head_similarity import related_heads


def test_in_chromium_a_heads_map_click_opens_the_head_and_a_related_button_opens_another(related_data):
    from support.browser import click_point, launch_chromium, new_page, start_server, stop_server, wait_idle
    from playwright.sync_api import sync_playwright

    expected = related_heads(related_data.related(), 1, 2, 1)[0]
    server, url = start_server([related_data.run.path])
    try:
        with sync_playwright() as playwright:
            browser = launch_chromium(playwright)
            page, errors = new_page(browser)
            page.goto(url + "?view=heads&method=pca")
            page.wait_for_function("""() => { const g = document.querySelector('#heads-graph .js-plotly-plot');
                                      return g && g.offsetParent !== null && g.data && g.data.length == 2; }""",
                                   timeout=30_000)
            wait_idle(page)
            click_point(page, ids.HEADS_GRAPH, 0, 6)                             # L1 H2
            page.wait_for_function("() => location.search.includes('view=single&layer=1&head=2')", timeout=20_000)
            button = page.locator(f"#{ids.SINGLE_RELATED} button").first
            button.wait_for(timeout=20_000)
            assert button.inner_text().startswith(f"L{expected.layer} H{expected.head}")
            wait_idle(page)
            button.click()
            page.wait_for_function(f"() => location.search.includes('layer={expected.layer}&head={expected.head}')",
                                   timeout=20_000)
            assert page.evaluate(f"() => document.getElementById('{ids.SINGLE_VIEW}').offsetParent !== null")
            browser.close()
            assert not errors, errors
    finally:
        output = stop_server(server)
    assert "Traceback" not in output, output
