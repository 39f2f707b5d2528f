import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    # Under pytest-xdist the workers share the cores: each worker's thread pools (torch's OpenMP, BLAS, numba)
    # get its share, set before anything imports them. Oversubscribed OpenMP threads spin and make a model's
    # forward pass several times slower on a busy 2-core machine.
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    share = str(max(1, cores // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))
    for variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ.setdefault(variable, share)

from support import CORPUS, REPO  # noqa: F401  (REPO and CORPUS stay importable from here)
from support.cli import quiet_transformers

# Before any test imports transformers: the CLI's quiet settings, so that qkviz.cli.main run in this
# process prints what a real process prints (tests/support/cli.py).
quiet_transformers()


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
def tiny_vision(tmp_path_factory):
    """``tiny_vision(family)`` -> directory of a tiny random image model with its image processor (built once;
    families in ``support.tiny_vision.VISION_FAMILIES``)."""
    from support.tiny_vision import build_tiny_vision_model

    built: dict[str, Path] = {}

    def get(family: str) -> Path:
        if family not in built:
            built[family] = build_tiny_vision_model(family, tmp_path_factory.mktemp(f"tiny-{family}"))
        return built[family]

    return get


@pytest.fixture(scope="session")
def image_run(tiny_vision, tmp_path_factory):
    """A tiny ViT run (2 layers x 4 heads, CLS + 4 x 4 patches) over scikit-image's sample images and a 2 x 2
    grid of crops of each (40 images, 680 tokens), with PCA 2D / 3D layouts: the image views' tests."""
    import qkviz
    from qkviz.cli import main

    run = qkviz.extract(str(tiny_vision("vit")), qkviz.sample_images(crops=2), tmp_path_factory.mktemp("image") / "vit",
                        progress=False)
    assert main(["-q", "project", "--run", str(run.path), "--method", "pca", "--dim", "2,3"]) == 0
    return run


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


@pytest.fixture(scope="session")
def reseeded_run(tmp_path_factory, tiny_model, tiny_corpus):
    """``reseeded_run(family, seed=1, max_sentences=12)``: a run over the same sentences as ``tiny_run(family,
    max_sentences)`` of the tiny ``family`` model with seeded noise added to its weights (its tokenizer and
    config as they are: a stand-in for another checkpoint or a fine-tune); extracted once per arguments."""
    import qkviz
    from support.tiny_models import perturbed_model

    made = {}

    def get(family: str, seed: int = 1, max_sentences: int = 12):
        key = (family, seed, max_sentences)
        if key not in made:
            model = perturbed_model(tiny_model(family), tmp_path_factory.mktemp(f"tiny-{family}-seed{seed}"), seed)
            made[key] = qkviz.extract(str(model), tiny_corpus, tmp_path_factory.mktemp(f"{family}-seed{seed}") / "run",
                                      max_sentences=max_sentences)
        return made[key]

    return get


@pytest.fixture(scope="session")
def related_data(app_run, tmp_path_factory):
    """The tiny Llama run (2 layers x 4 heads) copied, with its head atlas and its head similarity
    (shared, read-only, by the app's related-head tests with and without a browser)."""
    from dash_app.data.run_data import RunData
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

    return qkviz.extract("minilm", CORPUS, tmp_path_factory.mktemp("minilm") / "minilm", max_tokens=1500)


@pytest.fixture(scope="session")
def smollm2_directory() -> Path:
    """The bundled SmolLM2 converted (once, then cached under ``$QKVIZ_CACHE_DIR``) to a Hugging Face directory;
    qkviz converts under a file lock, so a second xdist worker waits and reuses the first one's conversion."""
    from qkviz.extraction.models.loading import model_directory

    return model_directory("smollm2")[0]


#: Tests that share one pytest-xdist worker, by node id prefix: the group's tests run one after another on
#: one worker; every other test goes to whichever worker is free.
XDIST_GROUPS = (
    # The bundled SmolLM2: converted once, and the model's own attention computed once for both dtypes.
    ("tests/integration/models/test_bundled_models.py::test_smollm2_on_the_default_corpus", "smollm2"),
    ("tests/integration/explain/test_induction_circuit.py::", "smollm2"),
    ("tests/integration/atlas/test_trained_head_labels.py::", "smollm2"),
    # UMAP compiles its numba code in every process that first runs it (about 10 s): all UMAP tests in one
    # worker, with the two tests on the shared MiniLM run (minilm_run, extracted once), one of which runs UMAP.
    ("tests/unit/projection/test_projectors.py::test_2d_layouts_are_trustworthy_on_structured_data[umap]", "umap"),
    ("tests/unit/projection/test_projectors.py::test_3d_layouts_and_seeds[umap]", "umap"),
    ("tests/unit/projection/test_projectors.py::test_parameters_too_large_for_the_points_are_reduced_and_recorded", "umap"),
    ("tests/integration/models/test_bundled_models.py::test_real_minilm_head_layouts_are_trustworthy", "umap"),
    ("tests/integration/cli/test_report.py::test_minilm_mean_correlation_after_translation", "umap"),
    # Modules with module-scoped fixtures (a server and a browser, runs, app data): built once, not once per
    # worker, nor again each time a worker came back to the module.
    *((f"tests/{module}::", f"tests/{module}") for module in (
        "browser/test_app_browser.py", "browser/test_image_browser.py", "browser/test_scale_browser.py",
        "browser/test_selection_compare_browser.py",
        "browser/test_views_browser.py",
        "integration/app/test_app_atlas.py", "integration/app/test_app_partners.py",
        "integration/app/test_app_selection_compare.py", "integration/app/test_app_views.py",
        "integration/images/test_app_images.py", "integration/cli/test_api.py", "integration/cli/test_report.py",
        "integration/cluster/test_dask_projection.py", "integration/cluster/test_dask_stats_index.py",
        "integration/projection/test_project_cli.py", "integration/extraction/test_store.py")),
)


def xdist_group(nodeid: str) -> str | None:
    return next((group for prefix, group in XDIST_GROUPS if nodeid.startswith(prefix)), None)


def pytest_xdist_make_scheduler(config, log):
    """``--dist loadgroup`` (pyproject.toml) with the groups of :data:`XDIST_GROUPS`.

    pytest-xdist 3.8's own loadgroup groups nothing under pytest 9.2: it marks a test's group by renaming its
    node id, which pytest no longer reads (pytest-dev/pytest-xdist#1386). This scheduler is xdist's
    loadscope with the groups as its scopes and every other test a scope of its own, as loadgroup would be."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_group(nodeid) or nodeid

    return GroupScheduling(config, log)
