"""The model a user names, before anything loads: a bundled name in any case, a near miss of one refused, and a hub
that cannot be reached found out at once.

``--model MiniLM`` is the bundled ``minilm`` (the run records the lower-case name); ``--model minlm`` is refused
in one line that asks "did you mean 'minilm'?", where huggingface_hub would otherwise try it as a hub id. A local
directory keeps its name whatever it is called. A hub id is tried on the hub; when the hub cannot be reached, one
quick connection check (:func:`check_hub_reachable`) switches huggingface_hub to offline for this process, so the
load fails at once with its one-line error instead of retrying for half a minute.
"""

from __future__ import annotations

import difflib
import logging
import os
import socket
from collections.abc import Collection
from pathlib import Path
from urllib.parse import urlsplit

from qkviz.core.errors import QkvizError

logger = logging.getLogger(__name__)

#: seconds the connection check waits for the hub
HUB_CHECK_SECONDS = 3.0
#: how close a name must be to a bundled one to be taken for a misspelling of it (difflib's ratio)
NEAR_MISS = 0.8
#: with any of these set the hub is reached through a proxy, which a direct connection check cannot judge
PROXY_VARIABLES = ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "https_proxy", "http_proxy", "all_proxy")

_hub_checked = False


def model_name(spec: str, bundled: Collection[str]) -> str:
    """The name to load and record for ``spec``: a bundled name (of ``bundled``, lower case) in any case becomes
    that name; an existing local path, or any other name, is kept as given; a name near a bundled one
    that is not a local path (``minlm``) is a one-line :class:`QkvizError` that suggests it."""
    if spec in bundled or Path(spec).expanduser().exists():
        return spec
    lowered = spec.lower()
    if lowered in bundled:
        return lowered
    near = difflib.get_close_matches(lowered, list(bundled), n=1, cutoff=NEAR_MISS) if "/" not in spec else []
    if near:
        raise QkvizError(f"model {spec!r} is not a bundled model: did you mean {near[0]!r}? (bundled: "
                         f"{', '.join(bundled)}; a local model directory or a hub id is taken as given)")
    return spec


def check_hub_reachable() -> None:
    """Once per process, before a hub id is loaded: open a connection to the hub's host (huggingface_hub's
    endpoint, ``HF_ENDPOINT``), waiting at most :data:`HUB_CHECK_SECONDS`; where it fails, switch
    huggingface_hub (and transformers, which asks it) to offline for the rest of this process. Skipped where
    offline mode is already on or a proxy is set."""
    global _hub_checked
    from huggingface_hub import constants

    if _hub_checked or constants.HF_HUB_OFFLINE or any(os.environ.get(name) for name in PROXY_VARIABLES):
        return
    _hub_checked = True
    endpoint = urlsplit(constants.ENDPOINT)
    host = endpoint.hostname or ""
    port = endpoint.port or (443 if endpoint.scheme == "https" else 80)
    try:
        socket.create_connection((host, port), timeout=HUB_CHECK_SECONDS).close()
    except OSError as error:
        logger.debug("the Hugging Face hub (%s) cannot be reached (%s): loading from the local cache only",
                     constants.ENDPOINT, error)
        go_offline()


def go_offline() -> None:
    """Put huggingface_hub in offline mode for the rest of this process: every request fails at once (a cached
    model still loads). Its ``HF_HUB_OFFLINE`` is read from the environment only when it is imported, and asked
    for (``constants.is_offline_mode``, which transformers calls) at every request: both are set."""
    from huggingface_hub import constants

    os.environ["HF_HUB_OFFLINE"] = "1"
    constants.HF_HUB_OFFLINE = True
