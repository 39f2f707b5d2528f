import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO / "data" / "sentences.txt"


@pytest.fixture(scope="session")
def corpus_sentences() -> list[str]:
    return CORPUS.read_text(encoding="utf-8").splitlines()


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory, corpus_sentences):
    """``tiny_model(family)`` -> directory of a tiny random model of that family (built once)."""
    from tiny_models import build_tiny_model

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
    from browser import make_app_run

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
                                      max_sentences=max_sentences, **options)
        return made[key]

    return get
