"""Issue 16, files: nothing the user keeps is deleted (``--overwrite``), and nothing half-made, damaged or
wrong is read or stored (checksums, corpus rows, tokenizers, ``--max-length``). A test per finding."""

import json
import shutil
from pathlib import Path

import pytest
from support.cli import one_line_error, run_main

import qkviz


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


# -- silent wrong results -----------------------------------------------------------------------------
@pytest.mark.parametrize("row, shown", [('{"text": null}', "missing"), ('{"text": 3.5}', "float '3.5'"),
                                        ('{"text": ["a", "b"]}', "list"), ('{"id": 4}', "missing")])
def test_jsonl_rows_whose_text_is_missing_null_a_number_or_a_list_are_refused_naming_the_row(tmp_path, row, shown):
    from qkviz.core.errors import QkvizError
    from qkviz.extraction.inputs.corpus import load_corpus

    path = tmp_path / "corpus.jsonl"
    path.write_text('{"text": "A fine sentence."}\n' + row + '\n{"text": "Another one."}\n')
    with pytest.raises(QkvizError, match=f"line 2: 'text' is {shown}"):
        load_corpus(path)


def test_parquet_rows_whose_text_is_not_text_are_refused_naming_the_row(tmp_path):
    import pandas as pd

    from qkviz.core.errors import QkvizError
    from qkviz.extraction.inputs.corpus import load_corpus

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
    limit = qkviz.open_run(copy).n_tokens - 1                               # approximate indexes are stored
    assert run_main("-q", "index", "--run", copy, "--exact-limit", str(limit)).returncode == 0
    run = qkviz.open_run(copy)
    expected = PartnerIndexes(run).partners(0, 1, 3, 5)
    assert expected.info.kind == "ivf"
    index_file = copy / "indexes" / "keys-l0-h0.ivf.npz"
    size = index_file.stat().st_size
    corrupt_in_place(index_file, offset=-(size // 2))
    assert index_file.stat().st_size == size
    found = PartnerIndexes(qkviz.open_run(copy)).partners(0, 1, 3, 5)   # exact on the run's arrays instead
    assert found.info.exact and np.isfinite(found.logits).all()
    assert (found.logits >= expected.logits - 1e-6).all()                # each at least the approximate one's
    assert "11/12 approximate partner indexes" in describe(copy)         # the damaged one is not counted


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


# -- runs without checksums (issue 30, point 3) -----------------------------------------------
def strip_checksums(run_path, names=None) -> dict:
    """Remove the manifest's sha256 of ``names`` (default: all of them, as a run made before checksums has it);
    returns the checksums removed."""
    manifest_path = run_path / "manifest.json"
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    removed = {name: manifest["sha256"].pop(name) for name in (names or list(manifest["sha256"]))}
    if names is None:
        del manifest["sha256"]
    manifest_path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return removed


def test_a_run_without_checksums_gets_them_on_first_open_and_damage_is_then_caught(tiny_run, tmp_path, caplog):
    from qkviz.core.errors import IncompleteRunError

    copy = shutil.copytree(tiny_run("llama").path, tmp_path / "run")
    expected = strip_checksums(copy)
    assert len(expected) >= 7
    with caplog.at_level("WARNING", logger="qkviz.store.run"):
        run = qkviz.open_run(copy)
    assert "manifest has no checksum of any of its files" in caplog.text and "recording the sha256" in caplog.text
    on_disk = json.loads((copy / "manifest.json").read_text(encoding="utf-8"))
    assert on_disk["sha256"] == run.manifest["sha256"] == expected and on_disk["files"] == run.manifest["files"]
    assert not list(copy.glob(".*.tmp"))                       # written through a temporary file, renamed
    caplog.clear()
    with caplog.at_level("WARNING", logger="qkviz.store.run"):
        qkviz.open_run(copy).tokens                            # recorded once: no warning again
    assert caplog.text == ""

    corrupt_in_place(copy / "keys.npy")
    with pytest.raises(IncompleteRunError, match="keys.npy does not match its checksum"):
        qkviz.open_run(copy).keys(0, 0)

    one = shutil.copytree(tiny_run("llama").path, tmp_path / "one")
    assert strip_checksums(one, ["tokens.parquet"]) == {"tokens.parquet": expected["tokens.parquet"]}
    caplog.clear()
    with caplog.at_level("WARNING", logger="qkviz.store.run"):
        assert qkviz.open_run(one).manifest["sha256"] == expected   # the missing one recorded, the others kept
    assert "no checksum of tokens.parquet (" in caplog.text


def test_a_run_without_checksums_opened_read_only_is_refused_in_one_line(tiny_run, tmp_path):
    from qkviz.core.errors import IncompleteRunError

    copy = shutil.copytree(tiny_run("llama").path, tmp_path / "run")
    strip_checksums(copy)
    before = (copy / "manifest.json").read_bytes()
    with pytest.raises(IncompleteRunError) as refused:
        qkviz.open_run(copy, read_only=True)
    message = str(refused.value)
    assert "\n" not in message and "has no checksum of" in message and "opened read-only" in message
    assert f"'qkviz status --run {copy}' records them" in message
    assert (copy / "manifest.json").read_bytes() == before and sorted(p.name for p in copy.iterdir()) == sorted(
        p.name for p in tiny_run("llama").path.iterdir())        # nothing written, not even a lock


def test_a_run_in_a_directory_it_cannot_write_is_refused_or_read_in_one_line(tiny_run):
    """As a user who cannot write the run's directory (a shared, read-only copy): a run without checksums is
    refused with what to do; one with them opens, and run.projection of a layout not cached names its command."""
    import os
    import subprocess
    import sys
    import tempfile

    shared = Path(tempfile.mkdtemp(prefix="qkviz-shared-"))
    try:
        shared.chmod(0o755)
        plain, old = (shutil.copytree(tiny_run("llama").path, shared / name, ignore=shutil.ignore_patterns("projections"))
                      for name in ("plain", "old"))
        strip_checksums(old)
        for run_path in (plain, old):
            run_path.chmod(0o555)
        code = ("import sys, qkviz\ntry:\n    qkviz.open_run(sys.argv[1]).projection(0, 1, progress=False)\n"
                "except qkviz.QkvizError as error:\n    sys.exit(f'refused: {error}')\n")
        as_user = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"] if os.geteuid() == 0 else []
        env = dict(os.environ, HOME=str(shared), NUMBA_CACHE_DIR=str(shared / "numba"), PYTHONDONTWRITEBYTECODE="1")
        results = {run_path.name: subprocess.run([*as_user, sys.executable, "-c", code, str(run_path)],
                                                 capture_output=True, text=True, timeout=300, env=env, cwd=shared)
                   for run_path in (plain, old)}
        if "No module named" in results["plain"].stderr:
            pytest.skip(f"the unprivileged user cannot import this checkout: {results['plain'].stderr[-200:]}")
        for name, fragments in (("old", ("has no checksum of", "cannot be recorded there", "qkviz status --run")),
                                ("plain", ("cannot cache a layout in", "make it where the run can be written",
                                           f"'qkviz project --run {plain} --method attn-tsne --dim 2 --layers 0 "
                                           "--heads 1'"))):
            lines = results[name].stderr.strip().splitlines()
            assert results[name].returncode == 1 and len(lines) == 1 and lines[0].startswith("refused: "), results[name]
            assert all(fragment in lines[0] for fragment in fragments), lines[0]
        assert "sha256" not in json.loads((old / "manifest.json").read_text())
    finally:
        for directory in shared.rglob("*"):
            if directory.is_dir():
                directory.chmod(0o755)
        shutil.rmtree(shared, ignore_errors=True)
