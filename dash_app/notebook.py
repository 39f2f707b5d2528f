"""``Run.show()``: the whole app over one run, served from the notebook's own kernel and shown inline (Dash's
Jupyter mode: ``app.run(jupyter_mode=...)``), in a link, or in a new browser tab.

The server keeps ``qkviz serve``'s rules (:mod:`dash_app.server`): it listens on 127.0.0.1 and answers only
for its own host names (:mod:`dash_app.guard`), every head's PCA layout is made before it serves (never
inside a request), and the missing attention t-SNE layouts are made in the background while the app is in
use. Showing the same run again replaces its server (same port); the background layouts keep going.
Outside Jupyter (a script, a test), the server runs in a background thread of this process and its address
is logged.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from werkzeug.serving import BaseWSGIServer, make_server

from dash_app.app import build_app
from dash_app.guard import allowed_hosts
from dash_app.run_data import RunData
from dash_app.server import attach_workers, check_port, make_pca, start_in_turn
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
    _server: BaseWSGIServer | None = field(default=None, repr=False)

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
         background: str | None = BACKGROUND_METHOD, jobs: int = 1, progress: bool = True) -> NotebookApp:
    """Serve the app over ``run`` and show it (see the module); return where it answers.

    ``mode``: ``"inline"`` (in the cell's output), ``"external"`` (a link to open) or ``"tab"`` (a new browser
    tab). ``port``: default the port this run was shown on before, else a free one. ``background``: the method
    whose missing 2D layouts are made while the app runs (None: none)."""
    if mode not in MODES:
        raise QkvizError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if not isinstance(height, int) or height < 200:
        raise QkvizError(f"height must be a whole number of pixels, at least 200, got {height!r}")
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
    app = build_app([data], allowed_hosts(HOST))
    thread = start_in_turn(workers) if workers else (previous.background if still_running else None)
    url = f"http://{HOST}:{port}/"
    shown = NotebookApp(url=url, port=port, data=data, background=thread)
    if _in_jupyter():
        app.run(jupyter_mode=mode, jupyter_height=height, jupyter_width=width, host=HOST, port=port, debug=False)
    else:
        shown._server = _serve_in_thread(app, port)
        logger.info("serving %s at %s (not in Jupyter: open it in a browser)", data.name, url)
    _shown[key] = shown
    return shown


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


def _serve_in_thread(app, port: int) -> BaseWSGIServer:
    server = make_server(HOST, port, app.server, threaded=True)
    threading.Thread(target=server.serve_forever, name=f"qkviz-app-{port}", daemon=True).start()
    return server


def _stop_server(port: int, server: BaseWSGIServer | None) -> None:
    if server is not None:
        server.shutdown()
        server.server_close()
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
