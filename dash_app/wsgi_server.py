"""The production side of serving: the app under a path prefix, on waitress (a pure-Python WSGI server with a
pool of threads), with the guard's body limit.

Behind a proxy the browser sees the app at a prefix, ``https://hub.example.org/user/x/proxy/8050/``; the page
must ask for its scripts and callbacks under that prefix (Dash's ``requests_pathname_prefix``). What reaches
the server depends on the proxy: nginx's ``proxy_pass http://127.0.0.1:8050;`` and jupyter-server-proxy's
``/proxy/absolute/<port>/`` forward the full path, jupyter-server-proxy's ``/proxy/<port>/`` and nginx's
``proxy_pass http://127.0.0.1:8050/;`` strip the prefix. :class:`PrefixedPaths` takes both: a path under the
prefix is served with the prefix moved to ``SCRIPT_NAME``, any other as it is.
"""

from __future__ import annotations

import logging
import re
import threading

from dash_app.guard import MAX_REQUEST_BYTES
from qkviz import QkvizError

logger = logging.getLogger(__name__)

#: waitress's worker threads: requests answered at once (a slow callback does not hold up the others)
THREADS = 8
#: what a root path may hold: URL path characters, no dot segments, no query or fragment
ROOT_PATH = re.compile(r"^/(?:[A-Za-z0-9_~%:@!$&'()*+,;=-][A-Za-z0-9._~%:@!$&'()*+,;=-]*/)*$")


def root_path(text: str) -> str:
    """``"user/x/proxy/8050"`` -> ``"/user/x/proxy/8050/"``: the prefix with one slash at each end (a QkvizError
    for a path it cannot be: a query, a fragment, ``..``, spaces)."""
    path = "/" + "/".join(part for part in text.strip().split("/") if part) + "/"
    path = "/" if path == "//" else path
    if not ROOT_PATH.match(path) or any(part in (".", "..") for part in path.split("/")):
        raise QkvizError(f"--root-path must be a URL path such as /user/x/proxy/8050/, got {text!r}")
    return path


class PrefixedPaths:
    """WSGI middleware: a request under ``prefix`` is served as the same path without it (``SCRIPT_NAME`` holds
    the prefix); any other request is served as it came (a proxy that stripped the prefix)."""

    def __init__(self, app, prefix: str):
        self.app = app
        self.prefix = prefix.rstrip("/")

    def __call__(self, environ, start_response):
        path = environ.get("PATH_INFO", "")
        if self.prefix and (path == self.prefix or path.startswith(self.prefix + "/")):
            environ["SCRIPT_NAME"] = environ.get("SCRIPT_NAME", "") + self.prefix
            environ["PATH_INFO"] = path[len(self.prefix):] or "/"
        return self.app(environ, start_response)


def production_server(wsgi_app, host: str, port: int, threads: int = THREADS):
    """A waitress server for ``wsgi_app`` bound to ``host:port`` (not yet serving: call ``run()``; ``close()``
    stops it). Bodies over :data:`MAX_REQUEST_BYTES` are refused with 413 before they are read (waitress refuses
    a body of ``max_request_body_size`` bytes or more, hence the one added); chunked bodies too."""
    from waitress.server import create_server

    return create_server(wsgi_app, host=host, port=port, threads=threads, ident="qkviz",
                         max_request_body_size=MAX_REQUEST_BYTES + 1, clear_untrusted_proxy_headers=True)


def serve_in_thread(wsgi_app, host: str, port: int, name: str):
    """A :func:`production_server` serving from a daemon thread; returns the server (:func:`stop_server` stops it)."""
    server = production_server(wsgi_app, host, port)
    threading.Thread(target=server.run, name=name, daemon=True).start()
    return server


def stop_server(server, timeout: float = 5.0) -> None:
    """Stop a server that :func:`serve_in_thread` started. Its sockets are closed by its own loop, woken through
    its trigger: closed from this thread, they would be pulled from under the loop's ``select`` (``EBADF`` in the
    server's thread). Then the loop finds nothing left to serve and ends, and the request threads are stopped."""
    from waitress import wasyncore

    sockets = server.map if hasattr(server, "map") else server._map      # several listening sockets: one map
    trigger = getattr(server, "trigger", None) or next((s.trigger for s in sockets.values() if hasattr(s, "trigger")),
                                                       None)
    if trigger is None or trigger._closed:          # stopped already
        return
    closed = threading.Event()

    def close_in_loop():
        wasyncore.close_all(sockets, ignore_all=True)
        closed.set()

    try:
        trigger.pull_trigger(close_in_loop)
    except OSError:         # its pipe closed between the check and the pull: the loop has ended, nothing selects now
        close_in_loop()
    closed.wait(timeout)
    server.task_dispatcher.shutdown(timeout=1)
