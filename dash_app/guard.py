"""What the server accepts: only its own Host names, request bodies up to :data:`MAX_REQUEST_BYTES`, and
callback requests that match the app's callbacks; and what it says when something goes wrong.

A page on another site can make the browser send requests to ``127.0.0.1:8050`` under a host name it
controls (DNS rebinding); checking the ``Host`` header against the names the server was started for
refuses them (403). Bodies are capped so that a forged request cannot make the server read (and parse)
hundreds of MB; the app's own requests are a few KB (413; waitress and Flask keep the same limit).

The truth about failures: a request that does not match the app's callbacks (a forged or garbled body) is
the client's mistake, a 400 with one line; anything that then goes wrong inside the server is a bug of
ours, a 500 whose body names a short id that the server's log repeats with the traceback, and which the page
shows (``assets/server_errors.js``).
"""

from __future__ import annotations

import ipaddress
import logging
import secrets
import socket
from collections.abc import Callable

import flask
from werkzeug.exceptions import HTTPException

from qkviz import QkvizError

logger = logging.getLogger(__name__)

#: the names a server on a loopback address answers to
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
#: the largest request body read, in bytes (one more: HTTP 413)
MAX_REQUEST_BYTES = 2 * 1024 * 1024
#: listen addresses that mean every interface
WILDCARD_HOSTS = ("0.0.0.0", "::", "")
#: the path the Dash renderer posts callback requests to (under the routes' prefix)
CALLBACK_PATH = "/_dash-update-component"
TEXT = {"Content-Type": "text/plain; charset=utf-8"}


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


def is_loopback(listen: str) -> bool:
    """Whether ``listen`` is a loopback address (``127.0.0.0/8``, ``::1``) or ``localhost``."""
    if listen.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(listen.strip("[]")).is_loopback
    except ValueError:
        return False


def check_listen(listen: str, extra: tuple[str, ...]) -> None:
    """Listening beyond this machine needs the names clients will use: ``--allow-host`` (a QkvizError
    otherwise), so that opening the app to the network is a decision, and the host guard knows its names."""
    if not is_loopback(listen) and not extra:
        raise QkvizError(f"--host {listen} listens beyond this machine: name the host names its users open it by "
                         "with --allow-host NAME (repeatable), e.g. --allow-host qkviz.lab.example.org")


def guard(server: flask.Flask, hosts: frozenset[str], callbacks: Callable[[], dict]) -> None:
    """Refuse requests for other hosts (403), bodies over :data:`MAX_REQUEST_BYTES` (413) and callback requests
    that do not match ``callbacks()`` (the app's callback map, 400); a server error is a 500 with an id (see the
    module)."""
    server.config["MAX_CONTENT_LENGTH"] = MAX_REQUEST_BYTES

    @server.before_request
    def check_request():
        if host_name(flask.request.host) not in hosts:
            return (f"qkviz does not answer for the host {flask.request.host!r}; open it at one of "
                    f"{', '.join(sorted(hosts))}, or start 'qkviz serve' with --allow-host NAME\n", 403, TEXT)
        if flask.request.method == "POST" and flask.request.path.endswith(CALLBACK_PATH):
            problem = callback_request_problem(flask.request.get_json(silent=True), callbacks())
            if problem is not None:
                logger.info("refused a callback request: %s", problem)
                return (f"qkviz could not take this request ({problem}); reload the page\n", 400, TEXT)
        return None

    @server.errorhandler(Exception)
    def report_server_error(error):
        """A bug of ours: 500, one line with an id; the traceback goes to the log under the same id."""
        if isinstance(error, HTTPException):
            return error
        error_id = secrets.token_hex(4)
        logger.error("server error %s while answering %s %s", error_id, flask.request.method, flask.request.path,
                     exc_info=error)
        return (f"qkviz server error, id {error_id}; the server's log has the details under that id\n", 500, TEXT)


def callback_request_problem(body, callback_map: dict) -> str | None:
    """What makes ``body`` (a parsed callback request) not one of the app's callbacks, or None when it is one:
    its ``output`` names a callback, and its outputs, inputs and states are the callback's, in number and (for
    plain ids) id and property. The values themselves are the callbacks' to validate."""
    if not isinstance(body, dict):
        return "the body is not a JSON object"
    spec = callback_map.get(body.get("output")) if isinstance(body.get("output"), str) else None
    if spec is None or "callback" not in spec:
        return "its output is none of the app's callbacks"
    outputs = body.get("outputs")
    outputs = outputs if isinstance(outputs, list) else [outputs]
    if not all(isinstance(output, (dict, list)) for output in outputs):
        return "its outputs are not the callback's"
    for part, items in (("inputs", body.get("inputs")), ("state", body.get("state", []))):
        expected = spec["inputs" if part == "inputs" else "state"]
        if not isinstance(items, list) or len(items) != len(expected):
            return f"its {part} are not the callback's"
        if not all(matches(item, wanted) for item, wanted in zip(items, expected)):
            return f"its {part} are not the callback's"
    changed = body.get("changedPropIds", [])
    if not isinstance(changed, list) or not all(isinstance(prop, str) for prop in changed):
        return "its changedPropIds are not a list of names"
    return None


def matches(item, wanted: dict) -> bool:
    """A received input or state against the callback's: the same id and property for a plain id; a dict or a
    list of dicts (each with an id and property) for a pattern-matching one."""
    if isinstance(wanted["id"], str):
        return (isinstance(item, dict) and item.get("id") == wanted["id"]
                and item.get("property") == wanted["property"])
    items = item if isinstance(item, list) else [item]
    return all(isinstance(one, dict) and isinstance(one.get("id"), dict) and isinstance(one.get("property"), str)
               for one in items)
