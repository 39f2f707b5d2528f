"""Issue 16, files: nothing the user keeps is deleted (``--overwrite``), and nothing half-made, damaged or
wrong is read or stored (checksums, corpus rows, tokenizers, ``--max-length``). A test per finding."""

import json
import shutil

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
