"""``qkviz serve``: open the runs, build the app, serve it (debug off, localhost by default)."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from dash_app.app import build_app, open_runs
from dash_app.run_data import RunData

logger = logging.getLogger(__name__)


def warm(data: RunData) -> None:
    """Read the default projection's 2D layouts of every head, so the first matrix view is quick."""
    try:
        data.all_layouts(data.default_method())
    except Exception:  # noqa: BLE001 -- warming is an optimisation; the request that needs it reports the error
        logger.exception("could not read the layouts of %s ahead of time", data.name)


def serve(run_paths: list[Path], host: str = "127.0.0.1", port: int = 8050) -> None:
    """Serve the app until interrupted. Runs are opened first: a bad one raises QkvizError."""
    runs = open_runs(run_paths)
    app = build_app(runs)
    threading.Thread(target=warm, args=(runs[0],), daemon=True).start()
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    logger.info("serving %s at http://%s:%d/ (Ctrl-C stops)", ", ".join(data.name for data in runs), host, port)
    app.run(host=host, port=port, debug=False)
