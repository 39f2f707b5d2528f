"""The declared range is the tested range: every family of qkviz's table, the failure boundary and the random
batch of model types, run again with the newest transformers release ``pyproject.toml`` allows (installed beside
the pinned one by ``scripts/newest_transformers.py``, which ``scripts/setup.sh`` runs), in a child pytest.

A new release is a finding, not a broken suite: each family is judged on it by the gate's own comparison (exact, or
refused in one line), and where one is not, the failure names the release, the family and its one line."""

import os
import subprocess
import sys
import xml.etree.ElementTree as ElementTree

import pytest
import transformers
from support import REPO

from scripts.newest_transformers import NEWEST_DIRECTORY, NOT_INSTALLED, declared_range, installed_version

FILES = ["tests/integration/models/test_model_families.py", "tests/integration/models/test_model_boundary.py",
         "tests/integration/models/test_family_sweep.py"]


def newest_or_why() -> str:
    """The release installed beside the pinned one; the test fails with the set-up's one line where it is not."""
    if NOT_INSTALLED.exists():
        pytest.fail(f"the newest transformers allowed is not installed: {NOT_INSTALLED.read_text(encoding='utf-8')}")
    newest = installed_version()
    assert newest is not None, f"{NEWEST_DIRECTORY} holds no transformers: run scripts/setup.sh"
    return newest


def test_the_newest_release_allowed_is_installed_and_in_the_range():
    from packaging.requirements import Requirement

    newest = newest_or_why()
    assert newest in Requirement(declared_range()).specifier
    assert Requirement(declared_range()).specifier.contains(transformers.__version__)


def failures_named(report: str, release: str) -> list[str]:
    """One line per failed or erroring test of a junit ``report``: the release, the test (its family in brackets)
    and the first line of its message."""
    lines = []
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        for outcome in ("failure", "error"):
            found = case.find(outcome)
            if found is not None:
                message = (found.get("message") or found.text or "").strip().splitlines() or ["no message"]
                lines.append(f"transformers {release}: {case.get('name')} {outcome}: {message[0][:300]}")
    return lines


def test_failures_are_named_by_release_and_family(tmp_path):
    """The child run's report reads as one line per failing family (this test fails if the parsing finds none)."""
    report = tmp_path / "report.xml"
    report.write_text('<testsuites><testsuite><testcase name="test_x[falcon]"><failure message="AssertionError: '
                      'falcon: max abs error 3.1e-01&#10;assert 0.31 &lt;= 1e-05">trace</failure></testcase>'
                      '<testcase name="test_x[llama]"/></testsuite></testsuites>', encoding="utf-8")
    assert failures_named(str(report), "9.9.0") == [
        "transformers 9.9.0: test_x[falcon] failure: AssertionError: falcon: max abs error 3.1e-01"]


@pytest.mark.slow
def test_every_family_is_exact_or_refused_in_one_line_with_the_newest_release_allowed(tmp_path):
    newest = newest_or_why()
    if newest == transformers.__version__:
        pytest.skip(f"the pinned transformers {newest} is the newest allowed: the rest of the suite runs on it")
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(NEWEST_DIRECTORY), str(REPO), str(REPO / "tests")])}
    check = subprocess.run([sys.executable, "-c", "import transformers; print(transformers.__version__)"],
                           capture_output=True, text=True, env=environment, cwd=REPO)
    assert check.stdout.strip() == newest, check.stderr
    report = tmp_path / "newest.xml"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider",
                           f"--junitxml={report}", *FILES], capture_output=True, text=True, env=environment, cwd=REPO)
    if done.returncode != 0:
        named = failures_named(str(report), newest) if report.exists() else []
        pytest.fail("\n".join(named) if named else f"with transformers {newest}:\n{done.stdout[-6000:]}")
