"""scripts/debian_packages.sh, the one place that runs apt-get: it installs only what is missing, and nothing when
all is there. A stand-in apt-get on PATH records what it was asked; the real one is never run."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from support import REPO

SCRIPT = REPO / "scripts" / "debian_packages.sh"


def run_script(tmp_path: Path, *args: str, chromium: str, npm: bool = True) -> tuple[subprocess.CompletedProcess, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    log = tmp_path / "apt.log"
    (bin_dir / "apt-get").write_text(f'#!/bin/sh\necho "$*" >> {log}\n')
    (bin_dir / "sudo").write_text('#!/bin/sh\nexec "$@"\n')
    for tool in (bin_dir / "apt-get", bin_dir / "sudo"):
        tool.chmod(0o755)
    for needed in ("bash", "id", "env"):        # a PATH of the stand-ins and these only: npm is there or not
        (bin_dir / needed).unlink(missing_ok=True)
        (bin_dir / needed).symlink_to(shutil.which(needed))
    if npm:
        (bin_dir / "npm").unlink(missing_ok=True)
        (bin_dir / "npm").symlink_to(shutil.which("true"))
    env = {"PATH": str(bin_dir), "PYTHON": sys.executable, "QKVIZ_CHROMIUM": chromium}
    # from the checkout, as scripts/test.sh runs it: its .venv exists (the tests run in it), so venv is not asked for
    done = subprocess.run([str(bin_dir / "bash"), str(SCRIPT), *args], env=env, capture_output=True, text=True,
                          cwd=SCRIPT.parents[1])
    return done, log.read_text() if log.exists() else ""


def test_nothing_is_installed_when_all_is_there(tmp_path):
    done, apt = run_script(tmp_path, "--browser", chromium=sys.executable)
    assert done.returncode == 0, done.stderr
    assert apt == ""


def test_a_missing_chromium_and_npm_are_installed(tmp_path):
    done, apt = run_script(tmp_path, "--browser", chromium=str(tmp_path / "no-chromium"), npm=False)
    assert done.returncode == 0, done.stderr
    assert apt.splitlines() == ["update -q", "install -y -q npm chromium chromium-driver"]


def test_chromium_only_with_browser(tmp_path):
    done, apt = run_script(tmp_path, chromium=str(tmp_path / "no-chromium"))
    assert done.returncode == 0, done.stderr
    assert apt == ""


def test_a_wrong_argument_is_one_line(tmp_path):
    done, apt = run_script(tmp_path, "--browsr", chromium=sys.executable)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and apt == ""


def test_the_test_command_calls_it_before_the_set_up():
    test_sh = (SCRIPT.parent / "test.sh").read_text().splitlines()
    assert test_sh.index("bash scripts/debian_packages.sh --browser") < test_sh.index("bash scripts/setup.sh")
    assert "apt-get install" not in (SCRIPT.parents[1] / ".ci" / "run").read_text()
