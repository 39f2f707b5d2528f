"""Issue 16, the command line and its resources: every option checked where it is parsed (one line, exit 2),
OS errors and damaged weights one line, workers that end with their parent, ``--jobs`` capped. A test per finding."""

import shutil

import pytest
from support.cli import one_line_error, run_main

import qkviz


# -- resources ------------------------------------------------------------------------------------
def children_of(pid: int) -> set[int]:
    from pathlib import Path

    found = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found |= {int(child) for child in (task / "children").read_text().split()}
        except OSError:
            continue
    return found


def alive(pid: int) -> bool:
    from pathlib import Path

    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][0] not in "ZX"
    except OSError:
        return False


@pytest.mark.parametrize("signal_name", ["SIGKILL", "SIGTERM"])
def test_killing_project_jobs_2_ends_its_workers_within_seconds(tiny_run, tmp_path, signal_name):
    import os
    import signal
    import subprocess
    import sys
    import time

    run_path = tmp_path / "run"
    shutil.copytree(tiny_run("llama").path, run_path)
    parent = subprocess.Popen([sys.executable, "-m", "qkviz", "-q", "project", "--run", str(run_path), "--method",
                               "tsne,umap", "--jobs", "2"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while len(workers := children_of(parent.pid)) < 2 and time.monotonic() < deadline and parent.poll() is None:
        time.sleep(0.1)
    assert len(workers) >= 2, "the pool did not start"
    os.kill(parent.pid, getattr(signal, signal_name))
    parent.wait(timeout=30)
    deadline = time.monotonic() + 10
    while any(alive(worker) for worker in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [worker for worker in workers if alive(worker)]
    for worker in left:
        os.kill(worker, signal.SIGKILL)
    assert not left, f"workers {left} outlived their parent by 10 s"


@pytest.mark.parametrize("jobs", ["0", "100000"])
def test_jobs_is_capped_at_the_cpus(tiny_run, jobs):
    one_line_error(run_main("project", "--run", tiny_run("llama").path, "--jobs", jobs), "argument --jobs", "out of range")
    from qkviz.core.errors import QkvizError

    with pytest.raises(QkvizError, match="jobs must be between 1 and"):
        qkviz.project(tiny_run("llama"), methods=["pca"], jobs=int(jobs), progress=False)


# -- one line, exit 2 ----------------------------------------------------------------------------------
@pytest.mark.parametrize("argv, fragment", [
    (["extract", "--model", "minilm", "--out", "x", "--device", "nonsense"], "argument --device: 'nonsense' is not a device"),
    (["extract", "--model", "minilm", "--out", "x", "--seed", "-1"], "argument --seed: -1 is out of range"),
    (["extract", "--model", "minilm", "--out", "x", "--max-tokens", "0"], "argument --max-tokens: 0 is out of range"),
    (["extract", "--model", "minilm", "--out", "x", "--batch-size", "ten"], "'ten' is not a whole number"),
    (["serve", "--run", "x", "--port", "99999"], "argument --port: 99999 is out of range"),
    (["serve", "--run", "x", "--jobs", "100000"], "argument --jobs: 100000 is out of range"),
    (["serve", "--run", "x", "--background", "nonsense"], "unknown background method 'nonsense'"),
])
def test_bad_option_values_are_one_line_where_they_are_parsed(argv, fragment):
    one_line_error(run_main(*argv), fragment)



@pytest.mark.parametrize("code, fragment", [("EACCES", "use a directory you may write to"),
                                            ("EROFS", "copy a read-only run elsewhere"),
                                            ("ENOSPC", "the disk is full")])
def test_a_read_only_run_or_a_full_disk_is_one_line_saying_what_to_do(tiny_run, tmp_path, monkeypatch, code, fragment):
    """The file system refusing every write (as root, a read-only directory cannot be made, so the refusal
    is the operating system's error raised where qkviz writes)."""
    import errno
    import os

    from qkviz.store import files

    def refuse(path, *args, **kwargs):
        raise OSError(getattr(errno, code), os.strerror(getattr(errno, code)), str(path))

    copy = tmp_path / "run"
    shutil.copytree(tiny_run("llama").path, copy)
    monkeypatch.setattr(files, "save_npy_atomic", refuse)
    monkeypatch.setattr(files, "write_json_atomic", refuse)
    one_line_error(run_main("-q", "project", "--run", copy, "--method", "pca"), fragment, str(copy))


def test_an_existing_file_as_out_is_one_line(tiny_model, tiny_corpus, tiny_run, tmp_path):
    afile = tmp_path / "a-file"
    afile.write_text("mine")
    one_line_error(run_main("-q", "report", "--run", tiny_run("llama").path, "--out", afile), "is not a directory")
    one_line_error(run_main("-q", "extract", "--model", tiny_model("llama"), "--corpus", tiny_corpus, "--out", afile),
                   "is a file, not a directory")
    assert afile.read_text() == "mine"


PROJECT_OPTIONS = [("--n-iter", "-1"), ("--n-iter", "0"), ("--n-epochs", "0"), ("--perplexity", "0"),
                   ("--perplexity", "nan"), ("--perplexity", "inf"), ("--n-neighbors", "0"), ("--n-neighbors", "1"),
                   ("--min-dist", "nan"), ("--min-dist", "-0.5"), ("--alpha", "-1"), ("--alpha", "inf"),
                   ("--temperature", "0"), ("--key-cap", "0.5"), ("--k", "0"), ("--seed", "-1"), ("--jobs", "0")]


@pytest.mark.parametrize("option, value", PROJECT_OPTIONS)
def test_project_option_values_out_of_range_are_one_line_and_cache_nothing(tiny_run, option, value):
    from qkviz.store.files import CACHE_DIRECTORY

    run = tiny_run("llama")
    before = sorted((run.path / CACHE_DIRECTORY).glob("*")) if (run.path / CACHE_DIRECTORY).exists() else []
    one_line_error(run_main("project", "--run", run.path, "--method", "tsne,umap,attn-tsne", option, value),
                   f"argument {option}")
    after = sorted((run.path / CACHE_DIRECTORY).glob("*")) if (run.path / CACHE_DIRECTORY).exists() else []
    assert after == before


@pytest.mark.parametrize("method, params, fragment", [
    ("tsne", {"n_iter": -1}, "n_iter must be a whole number >= 1"), ("umap", {"n_epochs": 0}, "n_epochs"),
    ("tsne", {"perplexity": float("nan")}, "perplexity must be a finite number above 0"),
    ("umap", {"n_neighbors": 1.5}, "n_neighbors must be a whole number"), ("umap", {"min_dist": float("inf")}, "min_dist")])
def test_the_python_api_refuses_the_same_values(tiny_run, method, params, fragment):
    from qkviz.core.errors import QkvizError

    with pytest.raises(QkvizError, match=fragment):
        qkviz.project(tiny_run("llama"), methods=[method], dims=[2], params={method: params}, progress=False)


def test_hypothesis_every_integer_option_accepts_its_range_and_refuses_the_rest():
    import argparse

    from hypothesis import given, strategies as st

    from qkviz.cli_options import integer, real

    @given(st.integers(-10**6, 10**6), st.integers(-100, 100), st.integers(0, 200))
    def check_integer(value, low, width):
        parse = integer(low, low + width)
        if low <= value <= low + width:
            assert parse(str(value)) == value
        else:
            with pytest.raises(argparse.ArgumentTypeError):
                parse(str(value))

    @given(st.floats(allow_nan=True, allow_infinity=True), st.booleans())
    def check_real(value, low_open):
        parse = real(0.0, 10.0, low_open=low_open)
        inside = value == value and abs(value) != float("inf") and (0 < value if low_open else 0 <= value) and value <= 10
        if inside:
            assert parse(repr(value)) == value
        else:
            with pytest.raises(argparse.ArgumentTypeError):
                parse(repr(value))

    check_integer()
    check_real()


class _Payload:
    """A pickle that runs code when loaded (what a hostile 'pytorch_model.bin' carries)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.mark.parametrize("damage", ["truncated", "hostile pickle"])
def test_truncated_or_hostile_weights_are_one_line_and_never_run_code(tiny_model, tiny_corpus, tmp_path, damage):
    import torch

    model = tmp_path / "model"
    shutil.copytree(tiny_model("bert"), model)
    marker = tmp_path / "code-ran"
    weights = model / "model.safetensors"
    if damage == "truncated":
        with open(weights, "r+b") as handle:
            handle.truncate(weights.stat().st_size // 2)
    else:
        weights.unlink()
        torch.save({"embeddings.word_embeddings.weight": _Payload(marker)}, model / "pytorch_model.bin")
    result = run_main("extract", "--model", model, "--corpus", tiny_corpus, "--out", tmp_path / "run")
    one_line_error(result, "cannot be read", "save them again")
    assert not marker.exists()
