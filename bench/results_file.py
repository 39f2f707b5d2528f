"""What every bench writes beside its figures, and where: ``bench/results/<name>.json`` with the date, the
machine (its CPU count and model, Python, the system), the load average before and after, the commit and the
arguments. ``scripts/readme_figures.py`` reads these files into the README and docs.

A child process's own peak memory is :func:`run_measured`'s: the high-water mark of the child's own memory
(``VmHWM`` in ``/proc/PID/status``), read every 20 ms while it runs. Neither ``RUSAGE_CHILDREN`` (the largest
of every child waited for so far) nor the child's own ``ru_maxrss`` from ``os.wait4`` will do: Linux starts an
exec'd child's ``ru_maxrss`` at what its forked copy of the parent held, so a 10 MB command started by a
1.4 GB test worker reports 1.4 GB.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (``platform.processor()`` elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> dict:
    return {"node": platform.node(), "cpus": os.cpu_count(), "cpu": cpu_model(), "python": platform.python_version(),
            "system": platform.platform()}


def commit() -> str | None:
    """The checkout's commit, with ``+changes`` when its tracked files differ from it."""
    done = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    changed = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                             capture_output=True, text=True).stdout.strip()
    return (done.stdout.strip() + ("+changes" if changed else "")) or None


def plain(value):
    """An argument as JSON holds it: numbers, booleans and None as they are, lists item by item, the rest as text."""
    if isinstance(value, (int, float, bool, type(None))):
        return value
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    return str(value)


class Recorder:
    """Collects one bench's figures; :meth:`write` adds the date, machine, load averages (before, every
    ``every`` seconds during, after), commit and arguments."""

    def __init__(self, name: str, arguments: dict, out: Path | None = None, every: float = 15.0):
        self.out = out or RESULTS / f"{name}.json"
        self.result = {"bench": f"bench/{Path(sys.argv[0]).name}", "date": datetime.datetime.now(datetime.timezone.utc)
                       .isoformat(timespec="seconds"), "machine": machine(), "commit": commit(),
                       "arguments": {key: plain(value) for key, value in arguments.items()},
                       "load_average_before": list(os.getloadavg())}
        self.during: list[float] = []
        self.stopped = threading.Event()
        threading.Thread(target=self.sample_load, args=(every,), daemon=True).start()

    def sample_load(self, every: float) -> None:
        while not self.stopped.wait(every):
            self.during.append(round(os.getloadavg()[0], 2))

    def write(self, **figures) -> Path:
        self.stopped.set()
        self.result.update(figures)
        self.result["load_during"] = list(self.during)
        self.result["load_average_after"] = list(os.getloadavg())
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.out.write_text(json.dumps(self.result, indent=1, default=str) + "\n", encoding="utf-8")
        return self.out


def high_water_mb(pid: int) -> float | None:
    """The peak resident memory (MB) of process ``pid``'s own memory so far, or None once it has exited."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def run_measured(command: list[str], every: float = 0.02, **popen) -> dict:
    """Run ``command`` to its end: its wall seconds, its own peak resident memory (MB; see the module) and its
    exit status."""
    started = time.perf_counter()
    process = subprocess.Popen(command, **popen)
    peak = 0.0
    while process.poll() is None:
        peak = max(peak, high_water_mb(process.pid) or 0.0)
        time.sleep(every)
    return {"seconds": time.perf_counter() - started, "peak_mb": peak, "returncode": process.returncode}


def summary(values: list[float], digits: int = 3) -> dict:
    """min / median / max of ``values`` and the values themselves (as measured, in order)."""
    ordered = sorted(values)
    middle = len(ordered) // 2
    median = ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
    return {"min": round(ordered[0], digits), "median": round(median, digits), "max": round(ordered[-1], digits),
            "runs": len(values), "values": [round(value, digits) for value in values]}
