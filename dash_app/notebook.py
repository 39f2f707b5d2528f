"""``Run.show()``: the whole app over one run, served from the notebook's own kernel and shown inline (Dash's
Jupyter mode: ``app.run(jupyter_mode=...)``), in a link, or in a new browser tab.

The server keeps ``qkviz serve``'s rules (:mod:`dash_app.server`): it listens on 127.0.0.1 and answers only
for its own host names (:mod:`dash_app.guard`), every head's PCA layout is made before it serves (never
inside a request), and the missing attention t-SNE layouts are made in the background while the app is in
use. Showing the same run again replaces its server (same port); the background layouts keep going.
Outside Jupyter (a script, a test), the server (waitress) runs in a background thread of this process and its
address is logged.

Inside JupyterHub (``JUPYTERHUB_SERVICE_PREFIX`` is set, e.g. ``/user/x/``) the browser reaches the app through
the user's server and jupyter-server-proxy, at ``{prefix}proxy/{port}/``: the app is served with that root path
(:mod:`dash_app.wsgi_server`), its URL is that path (under the hub's public URL when ``JUPYTERHUB_PUBLIC_URL``
names it), and its host guard also answers for the hub's host name, which the proxy passes on: the public
URL's, and any given in ``allow_hosts``.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from dash_app.app import build_app
from dash_app.guard import allowed_hosts
from dash_app.data.run_data import RunData
from dash_app.server import attach_workers, check_port, make_pca, start_in_turn
from dash_app.wsgi_server import serve_in_thread, stop_server
from qkviz import QkvizError
from qkviz.projection import BACKGROUND_METHOD

logger = logging.getLogger(__name__)

HOST = "127.0.0.1"
MODES = ("inline", "external", "tab")


@dataclass
class NotebookApp:
    """The app shown for one run: where it answers, the data it serves, and its server."""

    url: str
    port: int
    data: RunData
    background: threading.Thread | None = None
    _server: object | None = field(default=None, repr=False)      # waitress's, when served outside Jupyter

    @property
    def selection(self):
        """The last lasso / box selection made in the app's single-head view (a DataFrame), or None."""
        return self.data.selection

    def stop(self) -> None:
        """Stop the server (the background layouts finish on their own)."""
        _stop_server(self.port, self._server)


#: the app shown for each run directory in this process
_shown: dict[Path, NotebookApp] = {}


def show(run, mode: str = "inline", port: int | None = None, height: int = 900, width: str = "100%",
         background: str | None = BACKGROUND_METHOD, jobs: int = 1, progress: bool = True,
         allow_hosts: tuple[str, ...] = ()) -> NotebookApp:
    """Serve the app over ``run`` and show it (see the module); return where it answers.

    ``mode``: ``"inline"`` (in the cell's output), ``"external"`` (a link to open) or ``"tab"`` (a new browser
    tab). ``port``: default the port this run was shown on before, else a free one. ``background``: the method
    whose missing 2D layouts are made while the app runs (None: none). ``allow_hosts``: more host names the app
    answers for (in JupyterHub, the hub's, when ``JUPYTERHUB_PUBLIC_URL`` does not name it)."""
    if mode not in MODES:
        raise QkvizError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if not isinstance(height, int) or height < 200:
        raise QkvizError(f"height must be a whole number of pixels, at least 200, got {height!r}")
    if isinstance(allow_hosts, str) or not all(isinstance(name, str) and name for name in allow_hosts):
        raise QkvizError(f"allow_hosts must be a tuple of host names, got {allow_hosts!r}")
    key = Path(run.path).resolve()
    previous = _shown.pop(key, None)
    if port is None:
        port = previous.port if previous is not None else _free_port()
    if previous is not None and previous.port == port:
        previous.stop()
        _wait_for_port(port)       # the stopped server's last open connections still hold the port a moment
    check_port(HOST, port)
    data = RunData(run, Path(run.path).name)
    make_pca(data, progress=progress)
    still_running = previous is not None and previous.background is not None and previous.background.is_alive()
    workers = attach_workers([data], background, jobs) if background is not None and not still_running else []
    if still_running:                       # the earlier call's worker goes on: show its progress in this app
        data.worker = previous.data.worker
    where = proxied_location(port)
    hub_hosts = (where.host,) if where is not None and where.host else ()
    if where is not None and not hub_hosts and not allow_hosts:
        logger.warning("in JupyterHub without JUPYTERHUB_PUBLIC_URL: if the app refuses the hub's host name, show it "
                       "again with allow_hosts=('hub.example.org',)")
    root_path = where.root_path if where is not None else "/"
    app = build_app([data], allowed_hosts(HOST, (*hub_hosts, *allow_hosts)), root_path)
    thread = start_in_turn(workers) if workers else (previous.background if still_running else None)
    url = where.url if where is not None else f"http://{HOST}:{port}/"
    shown = NotebookApp(url=url, port=port, data=data, background=thread)
    if _in_jupyter():
        server_url = None if where is None else where.url[:-len(root_path)]   # the iframe's address: the hub's
        app.run(jupyter_mode=mode, jupyter_height=height, jupyter_width=width, jupyter_server_url=server_url,
                host=HOST, port=port, debug=False)
    else:
        shown._server = serve_in_thread(app.server, HOST, port, name=f"qkviz-app-{port}")
        logger.info("serving %s at %s (not in Jupyter: open it in a browser)", data.name, url)
    _shown[key] = shown
    return shown


@dataclass(frozen=True)
class ProxiedLocation:
    """Where the browser reaches an app that JupyterHub's user server proxies."""

    root_path: str       #: ``/user/x/proxy/8050/``
    url: str             #: the root path under the hub's public URL when known, else the root path alone
    host: str | None     #: the hub's host name when known


def proxied_location(port: int) -> ProxiedLocation | None:
    """The app's location through jupyter-server-proxy inside JupyterHub (None outside): its root path is
    ``{JUPYTERHUB_SERVICE_PREFIX}proxy/{port}/``; the hub's public URL (``JUPYTERHUB_PUBLIC_URL``) gives its
    scheme and host."""
    prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "").strip()
    if not prefix:
        return None
    root_path = "/" + "/".join([*(part for part in prefix.split("/") if part), "proxy", str(port)]) + "/"
    public = urlsplit(os.environ.get("JUPYTERHUB_PUBLIC_URL", "").strip())
    if public.scheme in ("http", "https") and public.hostname:
        origin = f"{public.scheme}://{public.netloc}"
        return ProxiedLocation(root_path, origin + root_path, public.hostname)
    return ProxiedLocation(root_path, root_path, None)


def _in_jupyter() -> bool:
    """A Jupyter kernel that Dash can show the app in (Dash's own test, made when dash was imported)."""
    from dash import jupyter_dash

    return bool(jupyter_dash.active)


#: how long a re-shown app waits for the port its stopped server held
PORT_RELEASE_S = 5.0


def _wait_for_port(port: int, timeout_s: float = PORT_RELEASE_S) -> None:
    """Until ``port`` can be bound again (at most ``timeout_s``; :func:`check_port` then says what holds it)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            check_port(HOST, port)
            return
        except QkvizError:
            time.sleep(0.05)


def _stop_server(port: int, server) -> None:
    if server is not None:
        stop_server(server)
        return
    from dash import jupyter_dash   # the server Dash started in Jupyter mode

    started = jupyter_dash._servers.pop((HOST, port), None)
    if started is not None:
        started.shutdown()
        started.server_close()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return probe.getsockname()[1]
