"""What the server accepts: only its own Host names, request bodies of a few MB, and requests its callbacks
can take (anything else is a 4xx with one line, never a 500 or a stack trace).

A page on another site can make the browser send requests to ``127.0.0.1:8050`` under a host name it
controls (DNS rebinding); checking the ``Host`` header against the names the server was started for
refuses them. Bodies are capped so that a forged request cannot make the server read (and parse)
hundreds of MB; the app's own requests are a few KB.
"""

from __future__ import annotations

import logging
import socket

import flask
from werkzeug.exceptions import HTTPException

logger = logging.getLogger(__name__)

#: the names a server on a loopback address answers to
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
#: the largest request body read (larger: HTTP 413)
MAX_REQUEST_BYTES = 2 * 1024 * 1024
#: listen addresses that mean every interface
WILDCARD_HOSTS = ("0.0.0.0", "::", "")


def host_name(header: str) -> str:
    """``"127.0.0.1:8050"`` -> ``"127.0.0.1"``, ``"[::1]:8050"`` -> ``"::1"``, lower case."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def allowed_hosts(listen: str = "127.0.0.1", extra: tuple[str, ...] = ()) -> frozenset[str]:
    """The loopback names, the listen address, and ``extra`` names; for a wildcard listen address, also
    this machine's host name, its fully qualified name and their addresses."""
    names = {*LOOPBACK_HOSTS, *extra}
    if listen in WILDCARD_HOSTS:
        hostname = socket.gethostname()
        names |= {hostname, socket.getfqdn()}
        try:
            names |= {info[4][0] for info in socket.getaddrinfo(hostname, None)}
        except OSError:
            pass
    else:
        names.add(listen)
    return frozenset(host_name(name) for name in names if name)


def guard(server: flask.Flask, hosts: frozenset[str]) -> None:
    """Refuse requests for other hosts (HTTP 403) and bodies over :data:`MAX_REQUEST_BYTES` (HTTP 413)."""
    server.config["MAX_CONTENT_LENGTH"] = MAX_REQUEST_BYTES

    @server.before_request
    def check_host():
        if host_name(flask.request.host) not in hosts:
            return (f"qkviz does not answer for the host {flask.request.host!r}; open it at one of "
                    f"{', '.join(sorted(hosts))}, or start 'qkviz serve' with --allow-host NAME\n", 403,
                    {"Content-Type": "text/plain; charset=utf-8"})
        return None

    @server.errorhandler(Exception)
    def refuse_broken_request(error):
        """A request the app's callbacks cannot take (a forged or garbled body) is a 400 with one line, never a
        500 with a stack trace; the traceback goes to the server's log, where a bug of ours shows too."""
        if isinstance(error, HTTPException):
            return error
        logger.error("refused a request to %s it could not take", flask.request.path, exc_info=error)
        return ("qkviz could not take this request (it does not match the app's callbacks); reload the page\n", 400,
                {"Content-Type": "text/plain; charset=utf-8"})
