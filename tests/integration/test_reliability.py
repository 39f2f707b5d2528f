"""Issue 16's findings, one test each, named after the finding: nothing the user keeps is deleted, nothing
half-made is read, bad input is one line (exit 2), and the server accepts only what it should."""

import json
import shutil

import pytest
from support.cli import run_main

import qkviz


def one_line_error(result, *fragments: str) -> str:
    """The single error line of a refused command (exit 2), checked to contain ``fragments``."""
    assert result.returncode == 2, (result.returncode, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


# -- data loss ---------------------------------------------------------------------------------
def test_extract_overwrite_refuses_a_directory_whose_manifest_is_not_a_runs(tiny_model, tiny_corpus, tmp_path):
    out = tmp_path / "project"
    out.mkdir()
    (out / "manifest.json").write_text(json.dumps({"name": "my web extension", "version": 3}))
    (out / "notes.txt").write_text("mine")
    result = run_main("extract", "--model", tiny_model("llama"), "--corpus", tiny_corpus, "--out", out,
                      "--max-sentences", "3", "--overwrite")
    one_line_error(result, "not a qkviz run's", "nothing was replaced")
    assert sorted(path.name for path in out.iterdir()) == ["manifest.json", "notes.txt"]


def test_extract_overwrite_replaces_only_the_files_of_the_run(tiny_model, tiny_corpus, tiny_run, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(tiny_run("llama").path, out)
    (out / "notes.txt").write_text("mine")
    (out / "figures").mkdir()
    (out / "figures" / "plot.png").write_bytes(b"png")
    (out / "projections").mkdir(exist_ok=True)
    (out / "projections" / "stale.npy").write_bytes(b"x")
    result = run_main("-q", "extract", "--model", tiny_model("llama"), "--corpus", tiny_corpus, "--out", out,
                      "--max-sentences", "3", "--overwrite")                # other settings: the run is replaced
    assert result.returncode == 0, result.stderr
    assert (out / "notes.txt").read_text() == "mine" and (out / "figures" / "plot.png").read_bytes() == b"png"
    assert not (out / "projections").exists()                   # the old run's results went with it
    assert qkviz.open_run(out).n_sentences == 3


def test_report_overwrite_never_deletes_a_run_inside_the_report_directory(tiny_run, tmp_path):
    run = tiny_run("llama")
    out = tmp_path / "report"
    assert run_main("-q", "report", "--run", run.path, "--out", out).returncode == 0
    inside = out / "runs" / "mine"
    shutil.copytree(run.path, inside)
    result = run_main("-q", "report", "--run", run.path, "--out", out, "--overwrite")
    one_line_error(result, "holds more than a qkviz report", "runs")
    assert qkviz.open_run(inside).n_tokens == run.n_tokens
    shutil.rmtree(out / "runs")
    assert run_main("-q", "report", "--run", run.path, "--out", out, "--overwrite").returncode == 0   # a report alone


@pytest.mark.parametrize("content", ['{"schema_version": 1}', "not json", '{"fingerprint": "", "schema_version": 1}'])
def test_a_damaged_or_foreign_marker_is_never_taken_for_a_run(tiny_model, tiny_corpus, tmp_path, content):
    out = tmp_path / "run"
    out.mkdir()
    (out / "progress.json").write_text(content)
    (out / "queries.npy.partial").write_bytes(b"someone else's")
    result = run_main("extract", "--model", tiny_model("llama"), "--corpus", tiny_corpus, "--out", out,
                      "--max-sentences", "3", "--overwrite")
    one_line_error(result, "not a qkviz run's")
    assert (out / "queries.npy.partial").read_bytes() == b"someone else's"


# -- the server ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def local_server(app_run):
    """The app over the tiny run, served in this process on a free loopback port: ``(port, app)``."""
    import threading

    from werkzeug.serving import make_server

    from dash_app.app import create_app

    server = make_server("127.0.0.1", 0, create_app([app_run.path]).server, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_port
    server.shutdown()


def request(port: int, method: str = "GET", path: str = "/", host: str | None = None, body: bytes | None = None):
    import http.client

    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Host": host or f"127.0.0.1:{port}", "Content-Type": "application/json"}
    try:
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, response.read()
    except (BrokenPipeError, ConnectionResetError):      # the server may close before reading a refused body
        return None, b""
    finally:
        connection.close()


def test_the_app_answers_only_its_own_host_names_against_dns_rebinding(local_server):
    assert request(local_server)[0] == 200
    assert request(local_server, host=f"localhost:{local_server}")[0] == 200
    assert request(local_server, host=f"[::1]:{local_server}")[0] == 200
    for forged in ("attacker.example", f"attacker.example:{local_server}", "127.0.0.1.attacker.example", "[::2]"):
        status, body = request(local_server, host=forged)
        assert status == 403 and b"--allow-host" in body, (forged, status, body)


def test_a_request_body_over_a_few_mb_is_refused_with_413(local_server):
    status, _ = request(local_server, "POST", "/_dash-update-component", body=b"x" * (5 * 1024 * 1024))
    assert status in (413, None), status            # refused before it is read (None: closed while sending)
    status, _ = request(local_server, "POST", "/_dash-update-component", body=b"{" + b" " * (3 * 1024 * 1024) + b"}")
    assert status in (413, None), status


def test_allowed_hosts_follow_the_listen_address():
    from dash_app.guard import allowed_hosts, host_name

    assert allowed_hosts() == {"127.0.0.1", "localhost", "::1"}
    assert "qkviz.lab" in allowed_hosts("qkviz.lab") and "proxy.example" in allowed_hosts(extra=("Proxy.Example",))
    assert host_name("[::1]:8050") == "::1" and host_name("LOCALHOST:80") == "localhost"


@pytest.mark.parametrize("body", [b"{}", b"[]", b"null", b'{"output": 5}', b'{"output": "nothing.children", "inputs": 3}',
                                  b"not json", b'{"output": "view-state.data", "inputs": [{"id": []}], "changedPropIds": 7}'])
def test_a_garbled_callback_request_is_a_400_not_a_500_with_a_stack_trace(local_server, body):
    status, text = request(local_server, "POST", "/_dash-update-component", body=body)
    assert 400 <= status < 500 and b"Traceback" not in text, (status, text)


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


# -- silent wrong results -----------------------------------------------------------------------------
@pytest.mark.parametrize("row, shown", [('{"text": null}', "missing"), ('{"text": 3.5}', "float '3.5'"),
                                        ('{"text": ["a", "b"]}', "list"), ('{"id": 4}', "missing")])
def test_jsonl_rows_whose_text_is_missing_null_a_number_or_a_list_are_refused_naming_the_row(tmp_path, row, shown):
    from qkviz.core.errors import QkvizError
    from qkviz.extraction.corpus import load_corpus

    path = tmp_path / "corpus.jsonl"
    path.write_text('{"text": "A fine sentence."}\n' + row + '\n{"text": "Another one."}\n')
    with pytest.raises(QkvizError, match=f"line 2: 'text' is {shown}"):
        load_corpus(path)


def test_parquet_rows_whose_text_is_not_text_are_refused_naming_the_row(tmp_path):
    import pandas as pd

    from qkviz.core.errors import QkvizError
    from qkviz.extraction.corpus import load_corpus

    path = tmp_path / "corpus.parquet"
    pd.DataFrame({"text": ["A fine sentence.", None, "Another one."]}).to_parquet(path)
    with pytest.raises(QkvizError, match="row 2: 'text' is missing, not text"):
        load_corpus(path)


def test_a_corpus_that_is_a_device_is_refused_not_read_until_memory_runs_out(tiny_model, tmp_path):
    result = run_main("extract", "--model", tiny_model("llama"), "--corpus", "/dev/zero", "--out", tmp_path / "run")
    one_line_error(result, "/dev/zero is not a regular file")


def test_a_model_directory_without_a_tokenizer_is_refused(tiny_model, tiny_corpus, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(tiny_model("bert"), model)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        (model / name).unlink(missing_ok=True)
    result = run_main("extract", "--model", model, "--corpus", tiny_corpus, "--out", tmp_path / "run")
    one_line_error(result, "has no tokenizer", "save_pretrained")


@pytest.mark.parametrize("family, special", [("bert", 2), ("llama", 1)])
def test_max_length_that_leaves_no_room_for_text_is_refused_and_others_are_honoured(tiny_model, tiny_corpus, tmp_path,
                                                                                   family, special):
    result = run_main("extract", "--model", tiny_model(family), "--corpus", tiny_corpus, "--out", tmp_path / "run",
                      "--max-length", str(special))
    one_line_error(result, f"--max-length {special} leaves no room for text", f"at least {special + 1}")
    run = qkviz.extract(str(tiny_model(family)), tiny_corpus, tmp_path / "short", max_sentences=6, max_length=special + 1)
    lengths = run.sentences.n_tokens if "n_tokens" in run.sentences else run.tokens.groupby("sentence").size()
    assert int(lengths.max()) == special + 1


def corrupt_in_place(path, offset: int = -64) -> None:
    """Overwrite bytes of a file without changing its size (what a bad disk or a stray write leaves)."""
    with open(path, "r+b") as handle:
        handle.seek(offset, 2)
        handle.write(b"\x7f\xff" * 8)


def test_a_run_array_corrupted_in_place_is_one_line_not_read(tiny_run, tmp_path):
    from qkviz.core.errors import IncompleteRunError

    copy = tmp_path / "run"
    shutil.copytree(tiny_run("llama").path, copy)
    corrupt_in_place(copy / "keys.npy")
    run = qkviz.open_run(copy)                       # the sizes still match: opening is cheap and succeeds
    with pytest.raises(IncompleteRunError, match="keys.npy does not match its checksum"):
        run.keys(0, 0)
    one_line_error(run_main("project", "--run", copy, "--method", "pca"), "keys.npy does not match its checksum",
                   "extract the run again")


def test_a_search_index_corrupted_in_place_is_not_trusted(tiny_run, tmp_path):
    import numpy as np

    from qkviz.search import PartnerIndexes

    copy = tmp_path / "run"
    shutil.copytree(tiny_run("llama").path, copy)
    assert run_main("-q", "index", "--run", copy).returncode == 0
    run = qkviz.open_run(copy)
    expected = PartnerIndexes(run).partners(0, 1, 3, 5)
    index_file = copy / "indexes" / "keys-l0-h0.faiss"
    size = index_file.stat().st_size
    corrupt_in_place(index_file, offset=-(size // 2))
    assert index_file.stat().st_size == size
    found = PartnerIndexes(qkviz.open_run(copy)).partners(0, 1, 3, 5)   # exact, rebuilt in memory: the same answer
    assert np.isfinite(found.logits).all() and np.array_equal(found.points, expected.points)
    assert "11/12 partner indexes" in describe(copy)                       # the damaged one is not counted


def describe(path) -> str:
    from qkviz.report.run_status import describe_run

    return "\n".join(describe_run(qkviz.open_run(path)))


def test_a_stored_result_changed_since_it_was_made_is_not_read(tiny_run, tmp_path, caplog):
    from qkviz.analysis import load_atlas

    copy = tmp_path / "run"
    shutil.copytree(tiny_run("llama").path, copy)
    assert run_main("-q", "stats", "--run", copy).returncode == 0
    assert load_atlas(qkviz.open_run(copy)) is not None
    corrupt_in_place(copy / "stats" / "relative_position.npy")
    assert load_atlas(qkviz.open_run(copy)) is None
    assert "relative_position.npy does not match its checksum" in caplog.text and "qkviz stats" in caplog.text


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


def test_a_port_in_use_is_one_line(app_run):
    import socket

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        one_line_error(run_main("serve", "--run", app_run.path, "--port", str(port)), f"127.0.0.1:{port}",
                       "choose another --port")


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
