import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from support import CORPUS, REPO  # noqa: F401  (REPO and CORPUS stay importable from here)


@pytest.fixture(scope="session")
def corpus_sentences() -> list[str]:
    return CORPUS.read_text(encoding="utf-8").splitlines()


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory, corpus_sentences):
    """``tiny_model(family)`` -> directory of a tiny random model of that family (built once)."""
    from support.tiny_models import build_tiny_model

    built: dict[str, Path] = {}

    def get(family: str) -> Path:
        if family not in built:
            directory = tmp_path_factory.mktemp(f"tiny-{family}")
            built[family] = build_tiny_model(family, directory, corpus_sentences)
        return built[family]

    return get


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory, corpus_sentences) -> Path:
    """A 40-sentence corpus of varied lengths (the first lines of the project corpus)."""
    path = tmp_path_factory.mktemp("corpus") / "tiny.txt"
    path.write_text("\n".join(corpus_sentences[:40]) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def app_run(tiny_model, tiny_corpus, tmp_path_factory):
    """A tiny Llama run (2 layers x 4 heads, 2 key-value heads) with PCA 2D / 3D layouts, for the app's tests."""
    from support.browser import make_app_run

    return make_app_run(tiny_model("llama"), tiny_corpus, tmp_path_factory.mktemp("app") / "tiny-llama")


@pytest.fixture(scope="session")
def tiny_run(tiny_model, tiny_corpus, tmp_path_factory):
    """``tiny_run(family, max_sentences=12, **extract_options)``: a float32 run of the tiny model,
    extracted once per arguments and shared; a test that writes into a run copies it first."""
    import qkviz

    made = {}

    def get(family: str, max_sentences: int = 12, **options):
        key = (family, max_sentences, tuple(sorted(options.items())))
        if key not in made:
            made[key] = qkviz.extract(str(tiny_model(family)), tiny_corpus, tmp_path_factory.mktemp(family) / "run",
                                      max_sentences=max_sentences, **options).run
        return made[key]

    return get


@pytest.fixture(scope="session")
def related_data(app_run, tmp_path_factory):
    """The tiny Llama run (2 layers x 4 heads) copied, with its head atlas and its head similarity
    (shared, read-only, by the app's related-head tests with and without a browser)."""
    from dash_app.run_data import RunData
    from qkviz.cli import main
    from support.browser import copy_run

    run = copy_run(app_run, tmp_path_factory.mktemp("related") / "tiny-related")
    assert main(["-q", "related", "--run", str(run.path)]) == 0
    return RunData(run, "tiny-related")


@pytest.fixture(scope="session")
def minilm_run(tmp_path_factory):
    """The bundled MiniLM over the first 1,500 tokens of the project corpus, extracted once and shared
    (read-only) by the tests on a real model's head layouts and correlation report."""
    import qkviz

    return qkviz.extract("minilm", CORPUS, tmp_path_factory.mktemp("minilm") / "minilm", max_tokens=1500).run
