"""The harness every bench measures with, and the one writer of result files.

* :class:`Recorder` writes ``bench/results/<name>.json`` in the schema of :mod:`bench.schema`: the date, the machine
  (its CPU count and model, Python, the system), the load average before, every ``every`` seconds during and after the
  run, the commit with its dirty state (tracked changes and untracked files, counted), the arguments, then the
  figures. It is the only code that writes a result file.
* :func:`repeat` times a call ``repeats`` times (wall time) and gives min / median / max and the values;
  :func:`alternate` times two or more ways of doing the same work in rounds whose order turns, so that neither
  always runs first (on a warm cache, or under another process's load).
* :func:`run_measured` runs a child process to its end: its wall seconds and its own peak memory. That peak is the
  high-water mark of the child's own memory (``VmHWM`` in ``/proc/PID/status``), read every 20 ms while it runs.
  Neither ``RUSAGE_CHILDREN`` (the largest of every child waited for so far) nor the child's own ``ru_maxrss`` from
  ``os.wait4`` will do: Linux starts an exec'd child's ``ru_maxrss`` at what its forked copy of the parent held, so a
  10 MB command started by a 1.4 GB test worker reports 1.4 GB.
* :func:`smoke_arguments` gives every bench its ``--smoke`` mode: tiny inputs, the result in a temporary file.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from bench.schema import SCHEMA_VERSION

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
#: where a smoke run writes its result when its command line does not say (the smoke test sets it)
SMOKE_OUT = "QKVIZ_BENCH_SMOKE_OUT"


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


def commit() -> dict | str:
    """The checkout's commit and how the files measured differ from it: tracked files changed, untracked files (a
    new module a bench imports is as much a change as an edited one), or ``"unknown"`` outside a git checkout."""
    def git(*arguments: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", "-C", str(REPO), *arguments], capture_output=True, text=True)
    head = git("rev-parse", "--short", "HEAD")
    if head.returncode != 0:
        return "unknown"
    status = git("status", "--porcelain", "--untracked-files=all").stdout.splitlines()
    untracked = sum(line.startswith("??") for line in status)
    changed = len(status) - untracked
    return {"sha": head.stdout.strip(), "dirty": bool(status), "changed": changed, "untracked": untracked}


def plain(value):
    """An argument as JSON holds it: numbers, booleans and None as they are, lists item by item, the rest as text."""
    if isinstance(value, (int, float, bool, type(None))):
        return value
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    return str(value)


def bench_name() -> str:
    """The running bench as ``python -m`` names it (``bench.app``), or its script's stem under ``bench.``."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is not None and spec.name.startswith("bench."):
        return spec.name
    return f"bench.{Path(sys.argv[0]).stem}"


class Recorder:
    """Collects one bench's figures; :meth:`write` writes them with the header of :mod:`bench.schema` (the load average
    sampled from the Recorder's creation to the write)."""

    def __init__(self, name: str, arguments: dict, out: Path | None = None, every: float = 15.0, smoke: bool = False):
        smoke = smoke or bool(arguments.get("smoke"))
        self.out = Path(out) if out else RESULTS / f"{name}.json"
        if smoke and self.out.resolve().is_relative_to(RESULTS.resolve()):
            raise SystemExit(f"a smoke run writes no result into {RESULTS.relative_to(REPO)}: give --out elsewhere")
        self.header = {"schema": SCHEMA_VERSION, "bench": bench_name(),
                       "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                       "machine": machine(), "commit": commit(),
                       "arguments": {key: plain(value) for key, value in arguments.items()}, "smoke": smoke}
        self.before = [round(value, 2) for value in os.getloadavg()]
        self.during: list[float] = []
        self.stopped = threading.Event()
        threading.Thread(target=self.sample_load, args=(every,), daemon=True).start()

    def sample_load(self, every: float) -> None:
        while not self.stopped.wait(every):
            self.during.append(round(os.getloadavg()[0], 2))

    def write(self, **figures) -> Path:
        """Write the result file (figures as JSON holds them; anything else as text) and return its path. A long
        bench may write after each part: each write holds the load sampled so far."""
        load = {"before": self.before, "during": list(self.during), "after": [round(v, 2) for v in os.getloadavg()]}
        result = {**self.header, "load": load, "figures": json.loads(json.dumps(figures, default=str))}
        self.out.parent.mkdir(parents=True, exist_ok=True)
        partial = self.out.with_name(f".{self.out.name}.partial")
        partial.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        partial.replace(self.out)     # a reader never sees half a file
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


def load_span(load: dict, more: tuple | list = ()) -> dict | None:
    """The lowest and highest 1-minute load average of a result header's ``load`` (before, during, after) and of
    ``more`` (further 1-minute averages a bench recorded itself); None where none was recorded."""
    found = [values[0] for values in (load.get("before"), load.get("after")) if isinstance(values, list) and values]
    found += [value for value in load.get("during") or [] if isinstance(value, (int, float))]
    found += list(more)
    return {"min": min(found), "max": max(found)} if found else None


def kept_runs(path: Path, run_summary: Callable[[dict], dict]) -> list[dict]:
    """Every run the result file at ``path`` holds, oldest first: the ones it kept (``figures["earlier_runs"]``) and
    its own, as ``run_summary`` sums one up; none where there is no file. A bench that keeps every run puts this
    list in its new result's ``earlier_runs``."""
    if not path.exists():
        return []
    result = json.loads(path.read_text(encoding="utf-8"))
    return [*result["figures"].get("earlier_runs", []), run_summary(result)]


def summary(values: list[float], digits: int = 3) -> dict:
    """min / median / max of ``values`` and the values themselves (as measured, in order)."""
    ordered = sorted(values)
    middle = len(ordered) // 2
    median = ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
    return {"min": round(ordered[0], digits), "median": round(median, digits), "max": round(ordered[-1], digits),
            "runs": len(values), "values": [round(value, digits) for value in values]}


def repeat(work: Callable[[], object], repeats: int, digits: int = 3) -> dict:
    """The wall seconds of ``repeats`` calls of ``work``, as :func:`summary` gives them."""
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        work()
        seconds.append(time.perf_counter() - started)
    return summary(seconds, digits)


def alternate(ways: dict[str, Callable[[], object]], rounds: int, digits: int = 3) -> dict:
    """Each of ``ways`` timed once a round for ``rounds`` rounds, the order turning by one each round (a, b; b, a; ...),
    so that none always meets a cold cache or a warm one: each way's :func:`summary` and every round's order."""
    names = list(ways)
    seconds: dict[str, list[float]] = {name: [] for name in names}
    orders = []
    for round_ in range(rounds):
        order = names[round_ % len(names):] + names[:round_ % len(names)]
        orders.append(order)
        for name in order:
            started = time.perf_counter()
            ways[name]()
            seconds[name].append(time.perf_counter() - started)
    return {"orders": orders, **{name: summary(values, digits) for name, values in seconds.items()}}


def smoke_arguments(parser: argparse.ArgumentParser, argv: list[str] | None = None, out: str = "out",
                    **tiny) -> argparse.Namespace:
    """Parse a bench's arguments with ``--smoke`` added: in a smoke run each argument named in ``tiny`` takes its tiny
    value, and the result goes to the ``out`` argument or, when it is not given, to ``$QKVIZ_BENCH_SMOKE_OUT`` or a
    temporary file."""
    parser.add_argument("--smoke", action="store_true",
                        help="the same code on a tiny input, the result in a temporary file (CI's check that it runs)")
    args = parser.parse_args(argv)
    if args.smoke:
        for name, value in tiny.items():
            setattr(args, name, value)
        if getattr(args, out, None) is None:
            where = os.environ.get(SMOKE_OUT)
            setattr(args, out, Path(where) if where else Path(tempfile.mkdtemp(prefix="qkviz-smoke-")) / "result.json")
    return args
