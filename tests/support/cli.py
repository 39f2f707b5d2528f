"""The command line in tests: ``qkviz.cli.main`` in this process (fast: no interpreter start, no
re-import of torch), or ``qkviz`` in a real process for the few end-to-end tests.

Both give a :class:`subprocess.CompletedProcess` with the exit status and what went to stdout and
stderr. In this process, ``main``'s own ``logging.basicConfig`` sets up its console log (pytest's
log handlers are set aside for the call), so stderr holds the same log lines, progress bars and
error line as a real process would print.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


#: what ``qkviz.cli`` sets (if unset) before transformers is imported, read by transformers only at import
QUIET_TRANSFORMERS = {"TRANSFORMERS_VERBOSITY": "error", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
_set_here: list[str] = []


def quiet_transformers() -> None:
    """Set :data:`QUIET_TRANSFORMERS` in this (test) process before anything imports transformers, as the
    CLI would: ``run_main`` then prints what a real process prints. Real processes started by
    :func:`run_process` do not inherit them, so the CLI's own setting is what they prove."""
    for name, value in QUIET_TRANSFORMERS.items():
        if name not in os.environ:
            os.environ[name] = value
            _set_here.append(name)


def run_main(*args: str) -> subprocess.CompletedProcess:
    """``qkviz ARGS`` through ``qkviz.cli.main`` in this process; argparse's usage errors (SystemExit) give
    their exit status like a real process."""
    from qkviz.cli import main

    stdout, stderr = io.StringIO(), io.StringIO()
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    root.handlers = []  # logging.basicConfig only acts on a root logger without handlers
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            try:
                returncode = main([str(arg) for arg in args])
            except SystemExit as exit:
                returncode = exit.code if isinstance(exit.code, int) else (0 if exit.code is None else 1)
    finally:
        for handler in root.handlers:
            handler.close()
        root.handlers = saved_handlers
        root.setLevel(saved_level)
    return subprocess.CompletedProcess(["qkviz", *args], returncode, stdout.getvalue(), stderr.getvalue())


def console_script() -> Path:
    """The installed ``qkviz`` console script beside this Python (``pip install -e .`` puts it there)."""
    found = shutil.which("qkviz", path=str(Path(sys.executable).parent))
    if found is None:
        pytest.fail(f"no 'qkviz' console script in {Path(sys.executable).parent}: install the package "
                    "(bash scripts/setup.sh does)")
    return Path(found)


def run_process(*args: str, entry_point: bool = False, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -m qkviz ARGS`` (or the installed ``qkviz`` script when ``entry_point``) in a new process."""
    command = [str(console_script())] if entry_point else [sys.executable, "-m", "qkviz"]
    env = {name: value for name, value in os.environ.items() if name not in _set_here}
    return subprocess.run([*command, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          env=dict(env, HF_HUB_OFFLINE="1"))


def one_line_error(result, *fragments: str) -> str:
    """The single error line of a refused command (exit 2), checked to contain ``fragments``."""
    assert result.returncode == 2, (result.returncode, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]
