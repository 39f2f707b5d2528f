"""Issue 40: what a new user stumbles on in the first hour, each now a clear line (or no stumble at all): a script
without a ``__main__`` guard given ``jobs=2``, ``methods="tsne"``, ``--overwrite`` in Python, a ``qkviz/`` folder
beside a script, and a misspelled model or an unreachable hub."""

import os
import shutil
import socket
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import qkviz
from qkviz.core.errors import QkvizError
from qkviz.extraction import BUNDLED_MODELS, load_model
from qkviz.extraction.models.model_names import PROXY_VARIABLES, model_name
from qkviz.store.files import CACHE_DIRECTORY
from support.cli import QUIET_TRANSFORMERS, one_line_error, run_main

GUARD = "put the script's qkviz calls under 'if __name__ == \"__main__\":', or use jobs=1"
#: two heads' quick t-SNE layouts in two worker processes
PROJECT = ('summary = qkviz.project({run!r}, methods=["tsne"], dims=[2], layers=[0], heads=[0, 1], jobs=2, '
           'progress=False, params={{"tsne": {{"n_iter": 10, "early_exaggeration_iter": 10}}}})\n'
           'print("projected", summary.computed, len(summary.failed))\n')


@pytest.fixture(scope="module")
def own_run(tiny_run, tmp_path_factory):
    """A copy of the tiny Llama run that this module's projections may write into."""
    directory = tmp_path_factory.mktemp("first-hour") / "run"
    shutil.copytree(tiny_run("llama").path, directory)
    return qkviz.open_run(directory)


def _script(directory: Path, text: str) -> subprocess.CompletedProcess:
    script = directory / "script.py"
    script.write_text(text, encoding="utf-8")
    return subprocess.run([sys.executable, str(script)], cwd=directory, capture_output=True, text=True, timeout=300)


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="jobs=2 needs two CPUs")
def test_a_script_without_a_main_guard_is_refused_before_any_worker_starts(own_run, tmp_path):
    unguarded = _script(tmp_path, "import qkviz\n" + PROJECT.format(run=str(own_run.path)))
    assert unguarded.returncode != 0 and "projected" not in unguarded.stdout
    last = unguarded.stderr.strip().splitlines()[-1]
    assert last.startswith("qkviz.core.errors.QkvizError: ") and GUARD in last, unguarded.stderr
    assert "out of memory" not in unguarded.stderr and "fewer --jobs" not in unguarded.stderr
    assert not list((own_run.path / CACHE_DIRECTORY).glob("*.npy"))        # no worker made anything

    body = "".join(f"    {line}\n" for line in PROJECT.format(run=str(own_run.path)).splitlines())
    guarded = _script(tmp_path, f"import qkviz\n\nif __name__ == \"__main__\":\n{body}")
    assert guarded.returncode == 0, guarded.stderr
    assert guarded.stdout.split() == ["projected", "2", "0"]


def test_methods_and_dims_take_one_name_or_one_number(own_run):
    summary = qkviz.project(own_run, methods="pca", dims=2, layers=[1], heads=[3], progress=False)
    assert (summary.computed, summary.cached) == (1, 0)
    assert qkviz.project(own_run, methods=" pca, ", dims=[2], layers=[1], heads=[3], progress=False).cached == 1
    with pytest.raises(QkvizError, match="unknown projection method 'tnse'"):     # the name, not its first letter
        qkviz.project(own_run, methods="pca,tnse", progress=False)
    for methods in (3, ["pca", 3], {"pca"}, "", []):
        with pytest.raises(QkvizError, match="methods must be a list of method names"):
            qkviz.project(own_run, methods=methods, progress=False)
    for dims in ("2", 2.0, [2, "3"], True):
        with pytest.raises(QkvizError, match="dims must be 2, 3 or a list of them"):
            qkviz.project(own_run, methods="pca", dims=dims, progress=False)


def test_the_overwrite_refusals_name_the_python_argument(tiny_model, tiny_corpus, tmp_path):
    model, out = str(tiny_model("bert")), tmp_path / "run"
    qkviz.extract(model, tiny_corpus, out, max_sentences=3, progress=False)
    with pytest.raises(QkvizError, match=r"pass overwrite=True to replace it") as refusal:
        qkviz.extract(model, tiny_corpus, out, max_sentences=4, progress=False)
    assert "--overwrite" not in str(refusal.value)          # the Python caller's words, not the flag
    run = qkviz.extract(model, tiny_corpus, out, max_sentences=4, overwrite=True, progress=False)
    assert run.n_sentences == 4

    report = qkviz.correlation_report(run)
    qkviz.write_report(report, tmp_path / "report")
    with pytest.raises(QkvizError, match=r"already exists; pass overwrite=True") as refusal:
        qkviz.write_report(report, tmp_path / "report")
    assert "--overwrite" not in str(refusal.value)
    qkviz.write_report(report, tmp_path / "report", overwrite=True)


def test_a_qkviz_folder_beside_a_script_does_not_hide_the_package(tmp_path):
    # scripts/setup.sh puts the checkout on the path (qkviz-checkout.pth), ahead of setuptools' editable finder,
    # which Python asks only after its own path search has taken an empty qkviz/ for a namespace package. A user's
    # own qkviz.py, or a qkviz/ with an __init__.py, still comes first: Python takes it for a real package.
    checkout = Path(sysconfig.get_paths()["purelib"]) / "qkviz-checkout.pth"
    assert checkout.is_file(), f"{checkout} is missing: make the environment with scripts/setup.sh"
    assert (Path(checkout.read_text(encoding="utf-8").strip()) / "qkviz" / "__init__.py").is_file()
    (tmp_path / "qkviz").mkdir()                                     # say, a folder of outputs
    env = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
    result = subprocess.run([sys.executable, "-c", "import qkviz; qkviz.extract; print(qkviz.__file__)"], cwd=tmp_path,
                            env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert Path(result.stdout.strip()).name == "__init__.py"


def test_bundled_names_in_any_case_and_near_misses(tiny_model, tmp_path, monkeypatch):
    assert [model_name(name, BUNDLED_MODELS) for name in ("MiniLM", "MINILM", "minilm", "SmolLM2")] == [
        "minilm", "minilm", "minilm", "smollm2"]
    assert load_model("MiniLM").model_id == "minilm"                # what the run records
    for typo, meant in (("minlm", "minilm"), ("smolm2", "smollm2"), ("Gemma", "gemma3")):
        with pytest.raises(QkvizError, match=f"did you mean '{meant}'"):
            model_name(typo, BUNDLED_MODELS)
    for hub_id in ("gpt2", "bert-base-uncased", "someone/minlm"):   # hub ids are tried on the hub
        assert model_name(hub_id, BUNDLED_MODELS) == hub_id
    monkeypatch.chdir(tmp_path)
    for local in ("minlm", "MiniLM"):                                # a local directory keeps its name
        shutil.copytree(tiny_model("bert"), tmp_path / local)
        assert model_name(local, BUNDLED_MODELS) == local
        assert load_model(local).model_id == local


def test_a_misspelled_model_is_one_line_at_the_command_line(tmp_path):
    one_line_error(run_main("extract", "--model", "minlm", "--out", tmp_path / "r"), "did you mean 'minilm'?",
                   "minilm, smollm2, gemma3")
    assert not (tmp_path / "r").exists()


def test_an_unreachable_hub_fails_at_once_without_retries(tmp_path):
    with socket.socket() as free:           # a port nothing listens on: the connection is refused at once
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    env = {name: value for name, value in os.environ.items() if name not in ("HF_HUB_OFFLINE", *PROXY_VARIABLES)}
    env.update(QUIET_TRANSFORMERS, HF_ENDPOINT=f"http://127.0.0.1:{port}")
    # torch is imported before the clock starts: what is timed is the CLI's, the model's load among it
    timed = ("import sys, time, torch\nfrom qkviz.cli import main\nstart = time.monotonic()\ncode = main(sys.argv[1:])\n"
             "print(f'{time.monotonic() - start:.1f}')\nsys.exit(code)\n")
    result = subprocess.run([sys.executable, "-c", timed, "extract", "--model", "nobody/no-such-model", "--out",
                             str(tmp_path / "r")], env=env, capture_output=True, text=True, timeout=300)
    one_line_error(result, "'nobody/no-such-model'", "could not be loaded from the Hugging Face hub")
    assert "retry" not in result.stderr.lower() and "retrying" not in result.stdout.lower()
    seconds = float(result.stdout.split()[-1])
    assert seconds < 15, f"{seconds} s: huggingface_hub's retries wait 23 s"
