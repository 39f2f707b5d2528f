"""The app served and opened in a real browser, for the benches and the tests: ``qkviz serve`` on a free port, and
Debian's headless Chromium (``/usr/bin/chromium``, or ``QKVIZ_CHROMIUM``) driven by Playwright's Python package.
Playwright's own browser download is never used; a missing Chromium is an error (never a skip)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


class BrowserError(RuntimeError):
    """The server or the browser could not be started."""


CHROMIUM = Path(os.environ.get("QKVIZ_CHROMIUM", "/usr/bin/chromium"))
#: without the background-networking flags Chromium stalls on a closed network
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_server(run_paths: list[Path], timeout: float = 60.0, attempts: int = 3,
                 background: str = "none") -> tuple[subprocess.Popen, str]:
    """``qkviz serve`` on a free port, once it answers; returns the process and the app's URL. ``background``:
    serve's ``--background`` (default none: the runs are shared by other tests, which would see layouts made in
    the background appear in them).

    The port is free when chosen, but another process (a second xdist worker, say) may take it before the
    server binds it; a server that exits at once is then started again on another port."""
    for attempt in range(attempts):
        port = free_port()
        command = [sys.executable, "-m", "qkviz", "serve", "--port", str(port), "--background", background]
        for path in run_paths:
            command += ["--run", str(path)]
        server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  env=dict(os.environ, HF_HUB_OFFLINE="1"))
        url = f"http://127.0.0.1:{port}/"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if server.poll() is not None:
                output = server.stdout.read()
                if "address already in use" in output.lower() and attempt + 1 < attempts:
                    break
                raise BrowserError(f"qkviz serve exited with {server.returncode}: {output}")
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status == 200:
                        return server, url
            except OSError:
                time.sleep(0.2)
        else:
            stop_server(server)
            raise BrowserError(f"qkviz serve did not answer at {url} within {timeout} s")
    raise BrowserError(f"qkviz serve found no free port in {attempts} attempts")


def stop_server(server: subprocess.Popen) -> str:
    """Stop the server; returns what it printed."""
    server.terminate()
    try:
        output, _ = server.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        server.kill()
        output, _ = server.communicate()
    return output or ""


def launch_chromium(playwright):
    """Headless Debian Chromium through Playwright (an error, never a skip, when it is not installed)."""
    if not CHROMIUM.exists():
        raise BrowserError(f"{CHROMIUM} is missing: install it with 'apt-get install -y chromium chromium-driver' "
                    "(bash scripts/test.sh does, through scripts/debian_packages.sh)")
    return playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
