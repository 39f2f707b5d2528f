"""A small reverse proxy on loopback, as JupyterHub's jupyter-server-proxy or nginx sit in front of ``qkviz
serve``: it answers under a path prefix (``/user/x/proxy/8050/``) and forwards each request to the app with the
public host name in ``Host`` (as a proxy that preserves the browser's Host does), either with the full path
(nginx ``proxy_pass http://app;``, jupyter-server-proxy's ``/proxy/absolute/<port>/``) or with the prefix
stripped (jupyter-server-proxy's ``/proxy/<port>/``). Anything outside the prefix is a 404 of its own.
"""

from __future__ import annotations

import contextlib
import http.client
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

#: headers that belong to one connection, never forwarded
HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade"}


def proxy_handler(upstream_port: int, prefix: str, public_host: str, strip: bool):
    """The request handler class of a proxy to ``127.0.0.1:upstream_port`` (see the module)."""

    class Forward(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):      # quiet: the tests read what the browser and the app say
            pass

        def forward(self):
            if not (self.path == prefix.rstrip("/") or self.path.startswith(prefix)):
                body = b"not under the proxy's prefix\n"
                self.send_response(404)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            path = "/" + self.path[len(prefix):] if strip else self.path
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            headers = {name: value for name, value in self.headers.items() if name.lower() not in HOP_BY_HOP}
            headers["Host"] = public_host
            headers["X-Forwarded-Prefix"] = prefix.rstrip("/")
            upstream = http.client.HTTPConnection("127.0.0.1", upstream_port, timeout=60)
            try:
                upstream.request(self.command, path, body=body, headers=headers)
                response = upstream.getresponse()
                payload = response.read()
                self.send_response(response.status, response.reason)
                for name, value in response.getheaders():
                    if name.lower() not in HOP_BY_HOP and name.lower() != "content-length":
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(payload)
            finally:
                upstream.close()

        do_GET = do_POST = do_HEAD = forward

    return Forward


@contextlib.contextmanager
def reverse_proxy(upstream_port: int, prefix: str, public_host: str = "hub.example.org", strip: bool = False):
    """Serve a proxy to the app on ``upstream_port`` on a free loopback port; yields the URL the browser opens
    (``http://127.0.0.1:<proxy port><prefix>``)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), proxy_handler(upstream_port, prefix, public_host, strip))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="reverse-proxy", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}{prefix}"
    finally:
        server.shutdown()
        server.server_close()
