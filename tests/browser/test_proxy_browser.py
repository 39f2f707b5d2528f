"""Issue 30 in headless Chromium: ``qkviz serve --root-path /user/x/proxy/8050/ --allow-host hub.example.org`` on
a fresh run, reached through a reverse proxy on loopback (tests/support/reverse_proxy.py) that forwards the full
path or strips the prefix, as JupyterHub's and nginx's do; another host refused; a server bug shown on the page
with the id the log has; a read-only run browsed and left byte for byte as it was."""

import logging
import re

import pytest
from support.browser import DRAWN_JS, copy_run, wait_idle
from support.reverse_proxy import reverse_proxy
from support.serving import serving, snapshot

PREFIX = "/user/x/proxy/8050/"
HUB = "hub.example.org"


@pytest.fixture(scope="module")
def proxied(tiny_run, tmp_path_factory):
    """The port of 'qkviz serve' under PREFIX for HUB, over a fresh copy of the tiny run (no layouts)."""
    run = copy_run(tiny_run("llama"), tmp_path_factory.mktemp("proxied") / "run", atlas=False)
    with serving([run.path], "--root-path", PREFIX, "--allow-host", HUB, "--background", "none",
                 ready_path=PREFIX) as (_, port):
        yield port


def draw_every_view(page, url: str) -> list[str]:
    """Open ``url``, wait for the matrix, then show each view's tab in turn; returns the tabs' labels."""
    page.goto(url)
    page.wait_for_function(DRAWN_JS, arg=["matrix-graph", 1], timeout=60_000)
    wait_idle(page, 30_000)
    labels = page.locator("#view-tabs .tab").all_inner_texts()
    for label in labels:
        page.locator("#view-tabs .tab", has_text=label).first.click()
        page.wait_for_timeout(300)
        wait_idle(page, 30_000)
    return labels


@pytest.mark.parametrize("strip", [False, True], ids=["full-path", "prefix-stripped"])
def test_the_app_draws_through_a_proxy_under_its_prefix(page, proxied, strip):
    requested = []
    page.on("request", lambda request: requested.append(request.url))
    with reverse_proxy(proxied, PREFIX, HUB, strip=strip) as url:
        labels = draw_every_view(page, url)
        page.locator("#view-tabs .tab", has_text=labels[0]).first.click()
        page.wait_for_function(DRAWN_JS, arg=["matrix-graph", 1], timeout=30_000)
    assert len(labels) >= 3, labels
    assert page.locator("#qkviz-server-error").count() == 0
    outside = [address for address in requested if not address.startswith(url)]
    assert not outside, outside[:5]                  # every script, style and callback under the prefix
    assert sum("_dash-update-component" in address for address in requested) > 5


def test_a_proxy_for_another_host_is_refused(page, proxied):
    with reverse_proxy(proxied, PREFIX, "attacker.example") as url:
        response = page.goto(url)
        assert response.status == 403
        assert "does not answer for the host 'attacker.example'" in page.inner_text("body")


def test_a_server_bug_shows_its_id_on_the_page_and_in_the_log(page, app_run, monkeypatch, caplog):
    from dash_app.app import build_app, open_runs
    from dash_app.data.token_search import TokenSearch
    from dash_app.wsgi_server import serve_in_thread

    counted = TokenSearch.count_text

    def broken(self, query, *args):
        if query == "boom":
            raise RuntimeError("a bug in the search count")
        return counted(self, query, *args)

    monkeypatch.setattr(TokenSearch, "count_text", broken)
    server = serve_in_thread(build_app(open_runs([app_run.path])).server, "127.0.0.1", 0, name="test-bug")
    try:
        with caplog.at_level(logging.ERROR, logger="dash_app.guard"):
            page.goto(f"http://127.0.0.1:{server.effective_port}/")
            page.wait_for_function(DRAWN_JS, arg=["matrix-graph", 1], timeout=60_000)
            wait_idle(page, 30_000)
            assert page.locator("#qkviz-server-error").count() == 0
            page.fill("#search-input", "boom")
            page.press("#search-input", "Enter")      # the search runs on Enter, not while typing
            page.wait_for_selector("#qkviz-server-error", timeout=20_000)
            shown = page.inner_text("#qkviz-server-error")
    finally:
        server.close()
    error_id = re.search(r"qkviz server error, id ([0-9a-f]{8}); the server's log has the details", shown).group(1)
    logged = [record for record in caplog.records if error_id in record.getMessage()]
    assert len(logged) == 1 and logged[0].exc_info is not None, caplog.text


def test_a_run_served_read_only_is_left_byte_for_byte_after_browsing(page, app_run, tmp_path):
    run = copy_run(app_run, tmp_path / "run", atlas=True)
    before = snapshot(run.path)
    with serving([run.path], "--read-only") as (server, port):
        labels = draw_every_view(page, f"http://127.0.0.1:{port}/")
        page.fill("#search-input", "the")
        page.press("#search-input", "Enter")
        page.wait_for_function("() => /^[0-9,]+ tokens?/.test(document.getElementById('search-count').innerText)",
                               timeout=20_000)
        wait_idle(page, 30_000)
        page.goto("about:blank")                    # no fetch in flight when the server stops
    assert len(labels) >= 3 and "read-only" in server.output
    assert snapshot(run.path) == before
