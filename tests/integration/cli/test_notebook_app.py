"""``Run.show()`` outside Jupyter: the app served for real from this process, with ``qkviz serve``'s rules
(127.0.0.1, its own host names, PCA before serving, attention t-SNE in the background). Inside a Jupyter
kernel (Dash's Jupyter mode) it is tested by executing the example notebook (tests/integration/first_use/test_notebook.py)."""

import http.client
import json
import re
import subprocess
import urllib.error
import urllib.request
import sys

import pandas as pd
import pytest
from support.browser import copy_run

import qkviz
from dash_app import notebook


def get(port: int, path: str = "/", host: str | None = None) -> tuple[int, str]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    connection.request("GET", path, headers={"Host": host or f"127.0.0.1:{port}"})
    response = connection.getresponse()
    body = response.read().decode("utf-8", "replace")
    connection.close()
    return response.status, body


@pytest.fixture
def fresh_run(tiny_run, tmp_path):
    """A copy of the tiny Llama run without any layout."""
    run = qkviz.open_run(copy_run(tiny_run("llama"), tmp_path / "run", atlas=False).path)
    with pytest.raises(qkviz.QkvizError, match="no pca 2D projection"):
        run.projection(0, 0, method="pca", make=False)
    return run


def test_external_mode_serves_the_app_to_its_own_host_only(fresh_run):
    run = fresh_run
    assert run.selection is None and run.app_url is None
    run.show(mode="external", background=None, progress=False)
    shown = run._shown
    try:
        assert run.app_url == shown.url == f"http://127.0.0.1:{shown.port}/"
        for layer in range(run.n_layers):        # every head's PCA was made before serving
            for head in range(run.n_heads):
                assert run.projection(layer, head, method="pca").shape == (2 * run.n_tokens, 2)
        status, body = get(shown.port)
        assert status == 200 and "<title>qkviz</title>" in body
        status, layout = get(shown.port, "/_dash-layout")
        assert status == 200 and run.path.name in layout
        status, body = get(shown.port, host="attacker.example")
        assert status == 403 and "does not answer for the host 'attacker.example'" in body
        status, _ = get(shown.port, host=f"localhost:{shown.port}")
        assert status == 200

        shown.data.selection = pd.DataFrame({"token": ["the"], "kind": ["query"]})   # as the app's callback sets it
        assert run.selection.token.tolist() == ["the"]

        run.show(mode="external", background=None, progress=False)    # shown again: same port, a new app
        assert run._shown.port == shown.port and run._shown.data is not shown.data
        assert get(shown.port)[0] == 200 and run.selection is None
    finally:
        run._shown.stop()
    with pytest.raises(OSError):     # refused, or reset where a forked process still holds the closed socket
        get(shown.port)


def test_missing_layouts_are_made_in_the_background(fresh_run):
    run = fresh_run
    shown = notebook.show(run, mode="external", progress=False)
    try:
        assert shown.data.worker is not None and shown.background is not None
        shown.background.join(timeout=240)
        assert not shown.background.is_alive()
        assert run.projection(0, 0, method="attn-tsne").shape == (2 * run.n_tokens, 2)
        assert get(shown.port)[0] == 200
    finally:
        shown.stop()


def test_bad_arguments_are_one_line_errors(fresh_run):
    with pytest.raises(qkviz.QkvizError, match="^mode must be one of inline, external, tab, got 'window'$"):
        fresh_run.show(mode="window")
    with pytest.raises(qkviz.QkvizError, match="^height must be a whole number of pixels"):
        fresh_run.show(height="tall")
    with pytest.raises(qkviz.QkvizError, match="cannot listen on 127.0.0.1:"):
        import socket

        with socket.socket() as holder:
            holder.bind(("127.0.0.1", 0))
            holder.listen()
            fresh_run.show(mode="external", port=holder.getsockname()[1], background=None, progress=False)


def test_without_dash_show_names_the_extra(tiny_run):
    code = ("import sys; sys.modules['dash'] = None; import qkviz\n"
            f"run = qkviz.open_run({str(tiny_run('llama').path)!r})\n"
            "try:\n    run.show()\nexcept qkviz.QkvizError as error:\n    print(error)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout == ("run.show() needs the app's optional dependencies (dash is missing): "
                             "pip install 'qkviz[app]'\n"), result.stdout


def test_inside_jupyterhub_the_app_is_served_at_its_proxied_url_for_the_hubs_host(fresh_run, monkeypatch):
    """JUPYTERHUB_SERVICE_PREFIX set (as JupyterHub sets it in a user's server): the app answers under
    ``{prefix}proxy/{port}/``, through a proxy that strips the prefix (jupyter-server-proxy's ``/proxy/<port>/``)
    or keeps it, for the hub's host name from JUPYTERHUB_PUBLIC_URL, and for no other; HOST changes nothing."""
    from support.reverse_proxy import reverse_proxy
    from support.serving import listening_addresses

    monkeypatch.setenv("JUPYTERHUB_SERVICE_PREFIX", "/user/x/")
    monkeypatch.setenv("JUPYTERHUB_PUBLIC_URL", "https://hub.example.org/user/x/")
    monkeypatch.setenv("HOST", "0.0.0.0")
    fresh_run.show(mode="external", background=None, progress=False)
    shown = fresh_run._shown
    try:
        prefix = f"/user/x/proxy/{shown.port}/"
        assert fresh_run.app_url == shown.url == f"https://hub.example.org{prefix}"
        assert listening_addresses(shown.port) == {"127.0.0.1"}
        for strip in (True, False):
            with reverse_proxy(shown.port, prefix, "hub.example.org", strip=strip) as url:
                for path in ("", "_dash-layout"):
                    with urllib.request.urlopen(url + path, timeout=30) as response:
                        body = response.read().decode()
                        assert response.status == 200
                assert fresh_run.path.name in body
            with reverse_proxy(shown.port, prefix, "attacker.example", strip=strip) as url:
                with pytest.raises(urllib.error.HTTPError, match="403"):
                    urllib.request.urlopen(url, timeout=30)
        status, page = get(shown.port, prefix, host="hub.example.org")
        config = re.search(r'<script id="_dash-config" type="application/json">(.*?)</script>', page, re.S).group(1)
        assert status == 200 and json.loads(config)["requests_pathname_prefix"] == prefix
    finally:
        shown.stop()


def test_inside_jupyterhub_without_its_public_url_the_hub_host_is_given(fresh_run, monkeypatch, caplog):
    monkeypatch.setenv("JUPYTERHUB_SERVICE_PREFIX", "/user/x")
    monkeypatch.delenv("JUPYTERHUB_PUBLIC_URL", raising=False)
    with caplog.at_level("WARNING", logger="dash_app.notebook"):
        shown = notebook.show(fresh_run, mode="external", background=None, progress=False)
    try:
        assert shown.url == f"/user/x/proxy/{shown.port}/"                  # under the page's own origin
        assert "allow_hosts=('hub.example.org',)" in caplog.text
        assert get(shown.port, shown.url, host="hub.example.org")[0] == 403
    finally:
        shown.stop()
    fresh_run.show(mode="external", background=None, progress=False, allow_hosts=("hub.example.org",))
    try:
        assert get(fresh_run._shown.port, fresh_run.app_url, host="hub.example.org")[0] == 200
    finally:
        fresh_run._shown.stop()
    with pytest.raises(qkviz.QkvizError, match="allow_hosts must be a tuple of host names"):
        fresh_run.show(mode="external", allow_hosts="hub.example.org")
