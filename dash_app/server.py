"""``qkviz serve``: open the runs, make what the first picture needs, build the app, serve it from waitress
(debug off, localhost by default, under a path prefix behind a proxy), and make the default layouts in the
background meanwhile.

A run without layouts is served at once: its PCA layouts (a few seconds for every head) are made before
the server starts -- never inside a request -- and the missing layouts of ``background`` (the faithful
``qkviz.projection.BACKGROUND_METHOD`` by default) are made by a :class:`qkviz.projection.LayoutWorker` while the app runs; the
app shows each head's PCA layout until its own lands, and the progress per head. ``--read-only`` (a shared
host) makes nothing and writes nothing: the runs are served as they are.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from pathlib import Path

from dash_app.app import build_app, open_runs
from dash_app.explain_worker import ModelLimits
from dash_app.guard import allowed_hosts, check_listen
from dash_app.data.run_data import RunData
from dash_app.wsgi_server import production_server
from dash_app.wsgi_server import root_path as normalised_root_path
from qkviz import QkvizError, project
from qkviz.projection import LayoutWorker
from qkviz.projection import BACKGROUND_METHOD, FIRST_METHOD, method_names

logger = logging.getLogger(__name__)



#: how long a stopped server waits for its warm-up to end before exiting
WARM_JOIN_S = 30.0


def warm(data: RunData) -> None:
    """Read the default projection's 2D layouts of every head, so the first matrix view is quick (a large run's
    matrix image is drawn when the app is built: :func:`dash_app.views.matrix.view.first_drawing`)."""
    try:
        data.all_layouts(data.default_method())
    except Exception:  # noqa: BLE001 -- warming is an optimisation; the request that needs it reports the error
        logger.exception("could not read the layouts of %s ahead of time", data.name)


def make_pca(data: RunData, progress: bool = True) -> None:
    """Every head's PCA layout in 2D and 3D where missing (seconds), before the app serves the run."""
    summary = project(data.run, methods=[FIRST_METHOD], dims=[2, 3], progress=progress)
    if summary.computed:
        logger.info("%s: made %d PCA layouts for the first picture", data.name, summary.computed)


def attach_workers(runs: list[RunData], method: str, jobs: int = 1) -> list[LayoutWorker]:
    """A :class:`LayoutWorker` for each run missing some of ``method``'s 2D layouts, attached as ``data.worker``
    (before the app is built, so that it polls their progress); not started."""
    workers = []
    for data in runs:
        worker = LayoutWorker(data.run, method, 2, jobs)
        if worker.progress().total:
            data.worker = worker
            workers.append(worker)
    return workers


def start_in_turn(workers: list[LayoutWorker]) -> threading.Thread:
    """Run the workers one after another (each with its own pool of processes) in a daemon thread."""

    def run_in_turn():
        for worker in workers:
            worker.run_all()

    thread = threading.Thread(target=run_in_turn, name="background-layouts", daemon=True)
    thread.start()
    return thread


def check_port(host: str, port: int) -> None:
    """A port another program holds is a one-line QkvizError now, not Flask's exit after the work."""
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)     # as the server's own socket
            probe.bind((host, port))
    except OSError as error:
        raise QkvizError(f"cannot listen on {host}:{port} ({error.strerror}): choose another --port, or stop the "
                         "program that holds it") from None


def quiet_banners() -> None:
    """One start-up line, ours: Dash's "Dash is running on ..." (logged, and printed when it has no handler) is
    silenced."""
    logging.getLogger("dash.dash").setLevel(logging.WARNING)


def read_only_runs(runs: list[RunData]) -> None:
    """Mark the runs read-only (the app writes none of their files: no matrix thumbnails on disk); a run with no
    2D layout to show is refused, since nothing may be made for it."""
    for data in runs:
        if not any(count for (_, dim), count in data.available().items() if dim == 2):
            raise QkvizError(f"{data.run.path} has no 2D layouts to serve read-only: make them first with "
                             f"'qkviz project --run {data.run.path}', or serve it without --read-only")
        data.read_only = True


def _model_budget(runs: list[RunData], model_memory: int | None) -> None:
    """The loaded models' budget: ``model_memory`` (--model-memory), else the environment's, else twice the largest
    of the served runs' models; logged."""
    from qkviz.probes import model_memory_budget, served_model_memory, set_default_model_memory, set_model_memory

    set_model_memory(model_memory)
    if model_memory is None:
        set_default_model_memory(served_model_memory([data.run for data in runs]))
    budget = model_memory_budget()
    logger.info("loaded models are kept within %s (--model-memory; least recently used dropped first)",
                f"{budget / (1 << 20):,.0f} MB" if budget is not None else "twice the largest model loaded")


def serve(run_paths: list[Path], host: str = "127.0.0.1", port: int = 8050, background: str | None = BACKGROUND_METHOD,
          jobs: int = 1, allow_hosts: tuple[str, ...] = (), root_path: str = "/", read_only: bool = False,
          model: bool = True, max_explain_tokens: int | None = None, model_memory: int | None = None) -> None:
    """Serve the app from waitress (a production WSGI server) until interrupted. Runs are opened first: a bad
    one raises QkvizError.

    ``background`` names the method whose missing 2D layouts are made while the app runs (None: none
    are), in ``jobs`` worker processes. The server answers only for the loopback names, ``host`` and
    ``allow_hosts`` (see :func:`dash_app.guard.allowed_hosts`); a ``host`` beyond this machine needs
    ``allow_hosts``. ``root_path``: the path prefix the browser sees the app at behind a proxy (see
    :mod:`dash_app.wsgi_server`). ``read_only``: write nothing into the runs (no PCA made before serving, no
    background layouts, no thumbnails on disk), for a shared host. ``model``: False turns the model-running panels
    off (the why panel with what a head writes, the ablate action: refused in one line); ``max_explain_tokens``: the
    longest sequence a request may make the server run the model over (None: any); ``model_memory``: the bytes the
    loaded models may hold, least recently used dropped first (None: ``QKVIZ_MODEL_MEMORY``, else twice the largest
    of the runs' models, :func:`qkviz.probes.served_model_memory`)."""
    if background is not None and background not in method_names():
        raise QkvizError(f"unknown background method {background!r}; choose from {', '.join(method_names())} or none")
    if max_explain_tokens is not None and max_explain_tokens < 1:
        raise QkvizError(f"--max-explain-tokens must be at least 1, got {max_explain_tokens}")
    if not 1 <= jobs <= (os.cpu_count() or 1):
        raise QkvizError(f"--jobs must be between 1 and this machine's {os.cpu_count()} CPUs, got {jobs}")
    check_listen(host, tuple(allow_hosts))
    prefix = normalised_root_path(root_path)
    check_port(host, port)
    runs = open_runs(run_paths, read_only=read_only)
    if read_only:
        read_only_runs(runs)
        workers = []
    else:
        for data in runs:
            make_pca(data)
        workers = attach_workers(runs, background, jobs) if background is not None else []
    limits = ModelLimits(model, max_explain_tokens)
    if model:
        _model_budget(runs, model_memory)
    app = build_app(runs, allowed_hosts(host, tuple(allow_hosts)), prefix, limits)
    server = production_server(app.server, host, port)
    start_in_turn(workers)
    warming = threading.Thread(target=warm, args=(runs[0],), name="warm-layouts", daemon=True)
    warming.start()
    quiet_banners()
    shown = f"[{host}]" if ":" in host else host
    logger.info("serving %s at http://%s:%d%s (waitress%s; Ctrl-C stops)", ", ".join(data.name for data in runs),
                shown, port, prefix, ", read-only" if read_only else "")
    if not model:
        logger.info("the why panel and the ablate action are off (--no-model): no model is loaded")
    elif max_explain_tokens is not None:
        logger.info("the model runs over sequences of at most %d tokens (--max-explain-tokens)", max_explain_tokens)
    server.run()           # until Ctrl-C, which waitress takes and closes the server on
    # a native library torn down under a thread still inside it aborts the interpreter's exit: let warming end
    warming.join(timeout=WARM_JOIN_S)
