"""bench/results_file.py: a child's peak memory is its own (a later, smaller child does not report an earlier, larger
one's peak, as RUSAGE_CHILDREN would), and every result file carries its date, machine, load and arguments."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("results_file", REPO / "bench" / "results_file.py")
results_file = importlib.util.module_from_spec(spec)
spec.loader.exec_module(results_file)

#: hold N MB for a moment (the peak is sampled every 20 ms, as a bench's commands run for seconds)
ALLOCATE = ("import sys, time; block = bytearray(int(sys.argv[1]) * 2**20); block[::4096] = b'x' * len(block[::4096]); "
            "time.sleep(0.3)")


def test_each_child_reports_its_own_peak():
    large = results_file.run_measured([sys.executable, "-c", ALLOCATE, "300"])
    small = results_file.run_measured([sys.executable, "-c", ALLOCATE, "10"])
    assert large["returncode"] == small["returncode"] == 0
    assert large["peak_mb"] > 300
    assert small["peak_mb"] < 150, small       # RUSAGE_CHILDREN would still say 300 MB or more here


def test_a_child_of_a_large_parent_reports_its_own_peak():
    """Linux starts an exec'd child's ru_maxrss at what its forked copy of the parent held: a small command run by a
    large process (a test worker, a bench holding a model) must still report its own peak."""
    ballast = bytearray(600 * 2**20)
    ballast[::4096] = b"x" * len(ballast[::4096])
    small = results_file.run_measured([sys.executable, "-c", ALLOCATE, "10"])
    assert small["peak_mb"] < 150, small
    del ballast


def test_a_failed_child_gives_its_exit_status():
    assert results_file.run_measured([sys.executable, "-c", "raise SystemExit(3)"])["returncode"] == 3


def test_a_result_names_its_date_machine_load_and_arguments(tmp_path):
    out = results_file.Recorder("example", {"tokens": 5, "path": tmp_path}, tmp_path / "example.json").write(x=1)
    result = json.loads(out.read_text())
    assert result["machine"]["cpus"] >= 1 and result["machine"]["cpu"]
    assert len(result["load_average_before"]) == len(result["load_average_after"]) == 3
    assert result["arguments"] == {"tokens": 5, "path": str(tmp_path)} and result["x"] == 1 and result["date"]


def test_summary_is_min_median_max():
    assert results_file.summary([3.0, 1.0, 2.0, 10.0]) | {"values": None} == {
        "min": 1.0, "median": 2.5, "max": 10.0, "runs": 4, "values": None}
