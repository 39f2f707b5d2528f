"""``qkviz serve`` with any options in a subprocess, plain HTTP requests to it with a chosen ``Host``, what the
operating system says the server listens on, and a directory's files as they are (to show nothing changed)."""

from __future__ import annotations

import contextlib
import http.client
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.browser import free_port, stop_server


def start_serve(run_paths: list[Path], *options: str, ready_path: str = "/", env: dict | None = None,
                timeout: float = 90.0) -> tuple[subprocess.Popen, int]:
    """``qkviz serve --run ... OPTIONS`` on a free port, once ``ready_path`` answers 200 to the loopback host;
    returns the process and its port."""
    port = free_port()
    command = [sys.executable, "-m", "qkviz", "serve", "--port", str(port), *options]
    for path in run_paths:
        command += ["--run", str(path)]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env={**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"qkviz serve exited with {server.returncode}: {server.stdout.read()}")
        with contextlib.suppress(OSError):
            if request(port, path=ready_path)[0] == 200:
                return server, port
        time.sleep(0.2)
    output = stop_server(server)
    pytest.fail(f"qkviz serve did not answer at {ready_path} within {timeout} s: {output}")


@contextlib.contextmanager
def serving(run_paths: list[Path], *options: str, **keywords):
    """:func:`start_serve` for a block: yields ``(process, port)``; on leaving, stops it and fails when it logged
    a traceback. The output is kept in ``process.output``."""
    server, port = start_serve(run_paths, *options, **keywords)
    try:
        yield server, port
    finally:
        server.output = stop_server(server)
    assert "Traceback" not in server.output, server.output


def request(port: int, method: str = "GET", path: str = "/", host: str | None = None, body: bytes | None = None,
            headers: dict | None = None) -> tuple[int | None, bytes, dict]:
    """One request to ``127.0.0.1:port``: ``(status, body, headers)``; status None when the server closed the
    connection while the body was being sent (a refused body)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    sent = {"Host": host or f"127.0.0.1:{port}", "Content-Type": "application/json", **(headers or {})}
    try:
        connection.request(method, path, body=body, headers=sent)
        response = connection.getresponse()
        return response.status, response.read(), dict(response.getheaders())
    except (BrokenPipeError, ConnectionResetError):
        return None, b"", {}
    finally:
        connection.close()


def listening_addresses(port: int) -> set[str]:
    """The addresses a socket of this machine listens on at ``port`` (from ``/proc/net/tcp`` and ``tcp6``):
    ``"127.0.0.1"``, ``"0.0.0.0"``, ``"::"``, ..."""
    import ipaddress

    found = set()
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        with contextlib.suppress(OSError), open(table, encoding="ascii") as lines:
            for line in list(lines)[1:]:
                fields = line.split()
                address, local_port = fields[1].split(":")
                if fields[3] == "0A" and int(local_port, 16) == port:       # 0A: LISTEN
                    raw = bytes.fromhex(address)
                    words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))   # each 32-bit word is little-endian
                    found.add(str(ipaddress.ip_address(words if width == 32 else raw[::-1])))
    return found


def snapshot(directory: Path) -> dict[str, tuple[int, str, int]]:
    """Every file and folder under ``directory`` (itself included): its size, sha256 and modification time."""
    import hashlib

    return {str(path.relative_to(directory)): (path.stat().st_size, hashlib.sha256(path.read_bytes()).hexdigest()
                                               if path.is_file() else "", path.stat().st_mtime_ns)
            for path in [directory, *sorted(directory.rglob("*"))]}
