"""bench/harness.py and bench/schema.py: a child's peak memory is its own (a later, smaller child does not report an
earlier, larger one's peak, as RUSAGE_CHILDREN would); every result file, written by the one Recorder, carries the
schema's header (date, machine, load before / during / after, commit with untracked files, arguments), and every file
in bench/results follows the schema."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from bench import harness
from bench import schema
from support import REPO


#: hold N MB for a moment (the peak is sampled every 20 ms, as a bench's commands run for seconds)
ALLOCATE = ("import sys, time; block = bytearray(int(sys.argv[1]) * 2**20); block[::4096] = b'x' * len(block[::4096]); "
            "time.sleep(0.3)")


def test_each_child_reports_its_own_peak():
    large = harness.run_measured([sys.executable, "-c", ALLOCATE, "300"])
    small = harness.run_measured([sys.executable, "-c", ALLOCATE, "10"])
    assert large["returncode"] == small["returncode"] == 0
    assert large["peak_mb"] > 300
    assert small["peak_mb"] < 150, small       # RUSAGE_CHILDREN would still say 300 MB or more here


def test_a_child_of_a_large_parent_reports_its_own_peak():
    """Linux starts an exec'd child's ru_maxrss at what its forked copy of the parent held: a small command run by a
    large process (a test worker, a bench holding a model) must still report its own peak."""
    ballast = bytearray(600 * 2**20)
    ballast[::4096] = b"x" * len(ballast[::4096])
    small = harness.run_measured([sys.executable, "-c", ALLOCATE, "10"])
    assert small["peak_mb"] < 150, small
    del ballast


def test_a_failed_child_gives_its_exit_status():
    assert harness.run_measured([sys.executable, "-c", "raise SystemExit(3)"])["returncode"] == 3


def test_a_result_names_its_date_machine_load_and_arguments(tmp_path):
    out = harness.Recorder("example", {"tokens": 5, "path": tmp_path}, tmp_path / "example.json", every=0.05)
    time.sleep(0.2)
    result = json.loads(out.write(x=1).read_text())
    assert schema.problems(result) == []
    assert result["schema"] == schema.SCHEMA_VERSION and result["machine"]["cpus"] >= 1 and result["machine"]["cpu"]
    assert len(result["load"]["before"]) == len(result["load"]["after"]) == 3 and result["load"]["during"]
    assert result["arguments"] == {"tokens": 5, "path": str(tmp_path)} and result["figures"] == {"x": 1}
    assert result["date"] and result["smoke"] is False and not list(tmp_path.glob(".*partial"))


def test_the_commit_stamp_counts_untracked_files(tmp_path, monkeypatch):
    def git(*arguments):
        subprocess.run(["git", "-C", str(tmp_path), *arguments], check=True, capture_output=True)
    git("init", "-q")
    (tmp_path / "a.txt").write_text("a")
    git("add", "a.txt")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "a")
    monkeypatch.setattr(harness, "REPO", tmp_path)
    assert harness.commit() | {"sha": None} == {"sha": None, "dirty": False, "changed": 0, "untracked": 0}
    (tmp_path / "new.py").write_text("")          # a new module a bench would import: the checkout is not the commit
    assert harness.commit() | {"sha": None} == {"sha": None, "dirty": True, "changed": 0, "untracked": 1}


def test_a_smoke_run_never_writes_into_the_results(tmp_path):
    with pytest.raises(SystemExit, match="a smoke run writes no result"):
        harness.Recorder("example", {"smoke": True}, harness.RESULTS / "example.json")
    out = harness.Recorder("example", {"smoke": True}, tmp_path / "example.json").write(x=1)
    assert json.loads(out.read_text())["smoke"] is True


def test_every_result_file_follows_the_schema():
    paths = sorted((REPO / "bench" / "results").glob("*.json"))
    assert len(paths) >= 30 and schema.check(paths) == []


@pytest.mark.parametrize("change, problem", [
    (lambda r: r.pop("commit"), "no 'commit'"),
    (lambda r: r.update(schema=0), "schema 0"),
    (lambda r: r.update(tokens=5), "unexpected top-level 'tokens'"),
    (lambda r: r["load"].update(before="high"), "load's 'before'"),
    (lambda r: r.update(commit={"sha": "abc", "dirty": "yes", "changed": 0, "untracked": 0}), "commit's 'dirty'"),
    (lambda r: r["figures"].update(date="x"), "figure 'date' has a header field's name")])
def test_the_validator_names_what_is_wrong(tmp_path, change, problem):
    result = json.loads(harness.Recorder("example", {}, tmp_path / "e.json").write(x=1).read_text())
    change(result)
    assert any(problem in found for found in schema.problems(result)), schema.problems(result)


def test_the_validator_command_exits_1_on_a_bad_file(tmp_path):
    (tmp_path / "bad.json").write_text('{"bench": "bench.x"}')
    done = subprocess.run([sys.executable, "-m", "bench.schema", str(tmp_path / "bad.json")], cwd=REPO,
                          capture_output=True, text=True)
    assert done.returncode == 1 and "no 'schema'" in done.stderr


def test_alternate_turns_the_order_each_round():
    calls = []
    timed = harness.alternate({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, rounds=3)
    assert calls == ["a", "b", "b", "a", "a", "b"] and timed["orders"] == [["a", "b"], ["b", "a"], ["a", "b"]]
    assert timed["a"]["runs"] == timed["b"]["runs"] == 3


def test_repeat_gives_min_median_max_of_wall_time():
    timed = harness.repeat(lambda: time.sleep(0.01), repeats=3)
    assert timed["runs"] == 3 and 0.009 <= timed["min"] <= timed["median"] <= timed["max"]


def test_summary_is_min_median_max():
    assert harness.summary([3.0, 1.0, 2.0, 10.0]) | {"values": None} == {
        "min": 1.0, "median": 2.5, "max": 10.0, "runs": 4, "values": None}
