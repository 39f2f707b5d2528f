"""What ``bash scripts/demo.sh`` leaves on the console (issue 40): set-up's pip output in runs/setup.log, the
extraction's progress bar, then the app's address as the last line while the server and the steps beside it write
to runs/MODEL.log (one layout progress on screen: the app's), and "all done" naming the address at the end; a
failing step or set-up says so in one line with its log's last lines and exits non-zero. The demo runs for real
on a tiny random model directory (QKVIZ_SETUP=skip, QKVIZ_DEMO_EXIT=1); ``scripts/quietly.sh`` on its own."""

from __future__ import annotations

import os
import re
import shutil
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from support import REPO

pytestmark = pytest.mark.e2e

DEMO = REPO / "scripts" / "demo.sh"
QUIETLY = REPO / "scripts" / "quietly.sh"
#: a tqdm bar ("projecting:  62%|######  | 5/8 [...]") and the layout stage's progress and time estimates
BAR = re.compile(r"\d+%\|")
LAYOUT_STAGE = re.compile(r"projecting|at this pace|will take about|about \S+( \S+)? left|heads done in|layouts made for|"
                          r"head statistics|correlating|indexing")
PIP = re.compile(r"\bpip\b|Requirement already satisfied|Collecting |Successfully installed", re.IGNORECASE)


def free_port() -> int:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        return holder.getsockname()[1]


def demo_env(out: Path, port: int, python: str | Path = sys.executable, tokens: int = 300, **extra: str) -> dict:
    env = {name: value for name, value in os.environ.items() if not name.startswith("QKVIZ_DEMO")}
    env.update(QKVIZ_SETUP="skip", QKVIZ_DEMO_TOKENS=str(tokens), QKVIZ_PORT=str(port), QKVIZ_DEMO_OUT=str(out),
               QKVIZ_PYTHON=str(python), QKVIZ_DEMO_EXIT="1", HF_HUB_OFFLINE="1",
               PYTHONPATH=os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH")))))
    env.update(extra)
    return env


def run_demo(script: Path, model: str, cwd: Path, env: dict, timeout: float = 240) -> subprocess.CompletedProcess:
    """The demo with its console (stdout and stderr, in the order written) captured."""
    return subprocess.run(["bash", str(script), model], cwd=cwd, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=timeout)


def console_lines(console: str) -> list[str]:
    return [line for line in console.splitlines() if line.strip()]


def executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def port_is_free(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) != 0


@pytest.fixture(scope="module")
def model_dir(tiny_model, tmp_path_factory) -> Path:
    """A tiny random BERT saved to a directory named like a model (the run and its log are named after it)."""
    directory = tmp_path_factory.mktemp("models") / "tiny-bert"
    shutil.copytree(tiny_model("bert"), directory)
    return directory


def test_the_console_ends_with_the_apps_address(model_dir, tmp_path):
    port = free_port()
    out = tmp_path / "out"
    # the model given as a path relative to where the demo is started (a path with a slash)
    result = run_demo(DEMO, "./tiny-bert", model_dir.parent, demo_env(out, port))
    console = result.stdout
    assert result.returncode == 0, console
    lines = console_lines(console)
    url = f"http://127.0.0.1:{port}/"
    extracted = next(i for i, line in enumerate(lines) if re.search(r"extracted \d+ sentences", line))
    up = next(i for i, line in enumerate(lines) if "the app is up at " + url in line)
    assert extracted < up, console
    assert "extracting" in console                           # the extraction's progress bar stays on the console
    assert "all done" in lines[-1] and url in lines[-1], console
    assert lines[-1].startswith("qkviz: all done"), console
    # between the address and "all done": only the run's status (no progress, no estimates, no other output)
    assert all(re.match(r"[a-z]+ {2,}\S", line) for line in lines[up + 1:-1]), console
    for segment in re.split(r"[\r\n]", console):
        if BAR.search(segment):                              # the only bar on the console: the extraction's
            assert segment.startswith("extracting:"), segment
        assert not LAYOUT_STAGE.search(segment), segment
        assert not PIP.search(segment), segment
    log = (out / "runs" / "tiny-bert.log").read_text()
    assert str(out / "runs" / "tiny-bert.log") in console   # the console says where the rest went
    for step in ("qkviz project", "qkviz stats", "qkviz related", "qkviz index", "qkviz report"):
        assert f"--- {step}: " in log, log
    assert "projecting" in log and "serving tiny-bert at " + url in log, log
    assert "report written" in log, log
    assert (out / "reports" / "tiny-bert" / "index.html").is_file()
    assert port_is_free(port)                                # QKVIZ_DEMO_EXIT=1 stopped the app


def test_a_failing_step_names_itself_and_its_log(model_dir, tmp_path):
    """``qkviz project`` fails (a stand-in Python that refuses it): one line names the step, its exit status and
    the log, the log's last lines follow, the demo exits with the step's status and the app is stopped."""
    python = executable(tmp_path / "python", "#!/bin/sh\n"
                        'case " $* " in *" project "*) echo "boom: no layouts today" >&2; exit 3 ;; esac\n'
                        f'exec "{sys.executable}" "$@"\n')
    port = free_port()
    out = tmp_path / "out"
    result = run_demo(DEMO, str(model_dir), tmp_path, demo_env(out, port, python=python, tokens=100))
    assert result.returncode == 3, result.stdout
    lines = console_lines(result.stdout)
    log = out / "runs" / "tiny-bert.log"
    failed = next(i for i, line in enumerate(lines) if "failed" in line)
    assert lines[failed] == f"qkviz: qkviz project failed (exit status 3); the last 30 lines of its log, {log}:"
    assert "boom: no layouts today" in [line.strip() for line in lines[failed + 1:]]   # the log's tail
    assert not any("all done" in line for line in lines)
    assert port_is_free(port)


@pytest.fixture
def checkout(tmp_path) -> Path:
    """A copy of the demo's scripts in a checkout whose set-up only prints 200 lines of pip-like warnings (or
    fails, when FAIL_SETUP is set) and whose Python only says it ran (exit 7)."""
    scripts = tmp_path / "checkout" / "scripts"
    scripts.mkdir(parents=True)
    shutil.copy(DEMO, scripts / "demo.sh")
    shutil.copy(QUIETLY, scripts / "quietly.sh")
    (scripts / "setup.sh").write_text(
        'echo "qkviz set-up: [1/2] installing (0 s)"\n'
        'for i in $(seq 200); do echo "WARNING: pip is warning you, line $i" >&2; done\n'
        '[ -z "${FAIL_SETUP:-}" ] || { echo "ERROR: no matching distribution" >&2; exit 5; }\n'
        'echo "qkviz set-up: [2/2] done (1 s)"\n')
    executable(tmp_path / "python", '#!/bin/sh\necho "python ran: $*"\nexit 7\n')
    return tmp_path


def setup_env(checkout: Path, **extra: str) -> dict:
    env = demo_env(checkout / "out", free_port(), python=checkout / "python", **extra)
    del env["QKVIZ_SETUP"]
    return env


def test_setup_output_goes_to_its_log(checkout):
    result = run_demo(checkout / "checkout" / "scripts" / "demo.sh", "minilm", checkout, setup_env(checkout))
    lines = console_lines(result.stdout)
    setup_log = checkout / "out" / "runs" / "setup.log"
    assert lines[0] == f"qkviz: setting up .venv (scripts/setup.sh) (its output: {setup_log})"
    # the set-up's progress, its step lines, on the console as they come; pip's lines only in the log
    assert lines[1:3] == ["qkviz set-up: [1/2] installing (0 s)", "qkviz set-up: [2/2] done (1 s)"]
    assert not PIP.search(result.stdout), result.stdout
    assert setup_log.read_text().count("WARNING: pip is warning you") == 200
    # then the extraction, with the Python given
    assert lines[3].startswith("python ran: -m qkviz extract --model minilm --out ") and "--max-tokens 300" in lines[3]
    assert result.returncode == 7 and len(lines) == 4, result.stdout


def test_the_real_setup_says_each_of_its_steps():
    """scripts/setup.sh prints a numbered "qkviz set-up:" line for each of its steps, 1 to STEPS, in order, and a
    heartbeat during the long install (what the demo shows while it sets up)."""
    text = (REPO / "scripts" / "setup.sh").read_text()
    steps = int(re.search(r"^STEPS=(\d+)$", text, re.M).group(1))
    said = [int(number) for number in re.findall(r"^\s*say (\d+) ", text, re.M)]
    assert said == list(range(1, steps + 1)), said
    assert re.search(r"^with_heartbeat 2 .*\\\n\s*\.venv/bin/python -m pip install", text, re.M)


def test_a_failing_setup_shows_its_last_lines(checkout):
    result = run_demo(checkout / "checkout" / "scripts" / "demo.sh", "minilm", checkout, setup_env(checkout, FAIL_SETUP="1"))
    assert result.returncode == 5, result.stdout
    lines = console_lines(result.stdout)
    assert lines[1] == "qkviz set-up: [1/2] installing (0 s)"
    assert lines[2].startswith("qkviz: setting up .venv (scripts/setup.sh) failed (exit status 5)")
    assert [line.strip() for line in lines[3:]] == [*(f"WARNING: pip is warning you, line {i}" for i in range(172, 201)),
                                                   "ERROR: no matching distribution"]
    assert not any("python ran" in line for line in lines)


def quietly(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(QUIETLY), *args], cwd=tmp_path, capture_output=True, text=True, timeout=30,
                          env=dict(os.environ, **env))


def test_quietly_keeps_the_output_in_the_log(tmp_path):
    log = tmp_path / "logs" / "step.log"
    result = quietly(tmp_path, str(log), "--", "sh", "-c", "echo to stdout; echo to stderr >&2")
    assert result.returncode == 0
    assert result.stdout == f"qkviz: sh -c echo to stdout; echo to stderr >&2 (its output: {log})\n"
    assert result.stderr == ""
    assert log.read_text().splitlines()[1:] == ["to stdout", "to stderr"]
    # again, appended and silent, under a name: nothing on the console, both runs in the log
    result = quietly(tmp_path, "--append", "--silent", "--name", "echoing", str(log), "--", "echo", "again")
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    text = log.read_text()
    assert "to stdout" in text and text.splitlines()[-2].startswith("--- echoing: echo again (")
    assert text.splitlines()[-1] == "again"


def test_quietly_shows_the_tail_of_a_failure_and_keeps_its_status(tmp_path):
    log = tmp_path / "step.log"
    result = quietly(tmp_path, "--name", "counting", str(log), "--", "sh", "-c", "seq 100; exit 42")
    assert result.returncode == 42
    assert result.stdout == f"qkviz: counting (its output: {log})\n"
    lines = result.stderr.splitlines()
    assert lines[0] == f"qkviz: counting failed (exit status 42); the last 30 lines of its log, {log}:"
    assert [line.strip() for line in lines[1:]] == [str(i) for i in range(71, 101)]
    result = quietly(tmp_path, "--silent", str(log), "--", "sh", "-c", "seq 5; exit 1", QUIETLY_TAIL="3")
    assert result.returncode == 1 and result.stdout == ""
    assert [line.strip() for line in result.stderr.splitlines()[1:]] == ["3", "4", "5"]
    assert quietly(tmp_path, str(log), "sh").returncode == 2                 # no '--': its usage


def test_quietly_shows_the_lines_of_its_prefix_and_keeps_its_status(tmp_path):
    log = tmp_path / "setup.log"
    script = 'echo "step: [1/2] a"; echo noise; echo "not step: b" >&2; echo "step: [2/2] c"; exit 4'
    result = quietly(tmp_path, "--silent", "--show", "step:", str(log), "--", "sh", "-c", script)
    assert result.returncode == 4
    assert result.stdout == "step: [1/2] a\nstep: [2/2] c\n"
    assert log.read_text().splitlines()[1:] == ["step: [1/2] a", "noise", "not step: b", "step: [2/2] c"]
