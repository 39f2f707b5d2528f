"""The README's and the docs' measured figures are those of bench/results/*.json (scripts/readme_figures.py), each
names its result file, and the README holds no measured figure outside the generated blocks."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("readme_figures", REPO / "scripts" / "readme_figures.py")
readme_figures = importlib.util.module_from_spec(spec)
spec.loader.exec_module(readme_figures)

#: a measured quantity: a number with a unit of time, memory or ratio, or a score such as 0.312
MEASURED = re.compile(r"\b\d[\d,.]*\s?(?:ms|s|min|h|GB|MB|kB|KB|×)(?![\w-])|\b0\.\d{2,}\b")
#: per page, the figures that are not measurements (a goal, a limit, a setting, arithmetic from the run format):
#: each phrase is removed before the page is searched for measured figures
NOT_MEASURED: dict[str, tuple[str, ...]] = {
    "README.md": ("2 MB a request",),
    "docs/app.md": ("320–8,192 × 240–8,192 px", "SmolLM2's 30 × 9", "6 × 12, 12 × 12, 30 × 9 and 32 × 32 heads",
                    "at 1400 × 900", "badge `r -0.84`", "640 × 640 pixels", "a 32 × 32 model's", "a 24 × 24 grid",
                    "up to 2 MB"),
    "docs/atlas.md": ("32 × 32-head model", "37 GB of attention", "1.5 GB of attention", "2 × pairs"),
    "docs/benchmarks.md": ("64 MB chunks", "every 0.1 s", "at most 2 GB",
                           "32 layers × 40 query and key heads × 8 × 4 bytes = 40 KB a token: 0.33 GB",
                           "the bench's is 1400 × 1000"),   # the last: the app bench's browser window
    "docs/cli.md": ("a line of 1 MB is read", "8 × 8 pixels", "connect timeout 10 s", "within 1.5 GB",
                    "a 32 × 32-head model"),
    "docs/dask.md": ("within 10 s", "90 s by default"),
    "docs/deploy.md": ("over 2 MB",),
    "docs/images.md": ("2 layers × 4 heads, 224 × 224 pixels", "2 × 2 grid", "8 × 8 pixels"),
    "docs/methods.md": ("trustworthiness ≥ 0.90 asked for", "recall ≥ 0.30 and ≥ 3× t-SNE, trustworthiness ≥ 0.90",
                        "at 5× the mean", "32 × 32-head", "≤ 30 min", "≥ 0.9× a full fit",
                        "−0.938 for BERT and −0.792"),
    "docs/models.md": ("a 2 × 2 grid", "32 × 32 pixels"),
    "docs/run-format.md": ("64 MB chunks",),
    "docs/scale.md": ("Goal: 4 GB",),
    "docs/search.md": ("reaches 0.95",),  # the recall@10 an inverted file is tuned to at build time
}


def copy_checkout(tmp_path: Path) -> Path:
    for page in readme_figures.PAGES:
        (tmp_path / page).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / page, tmp_path / page)
    shutil.copytree(REPO / "bench" / "results", tmp_path / "bench" / "results")
    return tmp_path


def test_the_pages_are_those_of_the_results():
    assert readme_figures.main(["--check"]) == 0, "run: python scripts/readme_figures.py"


def test_a_changed_result_is_caught_then_written(tmp_path):
    root = copy_checkout(tmp_path)
    path = root / "bench" / "results" / "matrix_grid.json"
    result = json.loads(path.read_text())
    result["load_to_drawn"]["cold"]["median_ms"] = 9876
    path.write_text(json.dumps(result))
    assert readme_figures.main(["--check", "--root", str(root)]) == 1
    assert readme_figures.main(["--root", str(root)]) == 0
    assert " / 9.9 / " in (root / "README.md").read_text()
    assert readme_figures.main(["--check", "--root", str(root)]) == 0


def test_every_block_names_its_bench_result():
    blocks = [(page, match) for page in readme_figures.PAGES
              for match in readme_figures.BLOCK.finditer((REPO / page).read_text(encoding="utf-8"))]
    assert {match["name"] for _, match in blocks} == set(readme_figures.FIGURES)
    for page, match in blocks:
        named = re.findall(r"bench/results/(\w+)\.json", match["body"])
        assert named and all((REPO / "bench" / "results" / f"{name}.json").exists() for name in named), (page, match["name"])


@pytest.mark.parametrize("page", readme_figures.PAGES)
def test_no_page_has_a_measured_figure_outside_its_blocks(page):
    text = readme_figures.BLOCK.sub("", (REPO / page).read_text(encoding="utf-8"))
    for phrase in NOT_MEASURED.get(page, ()):
        assert phrase in text, f"{page}: {phrase!r} is no longer on the page: take it out of NOT_MEASURED"
        text = text.replace(phrase, "")
    found = [line.strip() for line in text.splitlines() if MEASURED.search(line)]
    assert found == [], f"{page}: measured figures outside a generated block: {found[:5]} ({len(found)} lines)"


def test_the_readme_fits_its_first_page():
    assert (REPO / "README.md").stat().st_size < 8000       # the first page; detail goes to docs/


def test_an_unknown_block_is_refused(tmp_path):
    root = copy_checkout(tmp_path)
    readme = root / "README.md"
    readme.write_text(readme.read_text() + "<!-- figures:no-such -->\n<!-- /figures -->\n")
    with pytest.raises(SystemExit, match="unknown figure block 'no-such'"):
        readme_figures.main(["--check", "--root", str(root)])


def test_the_exactness_table_is_the_benchs_rows(tmp_path):
    root = copy_checkout(tmp_path)
    path = root / "bench" / "results" / "exactness.json"
    result = json.loads(path.read_text())
    next(row for row in result["rows"] if row["model"] == "llama")["float16"] = 1.234e-3
    path.write_text(json.dumps(result))
    assert readme_figures.main(["--root", str(root)]) == 0
    row = next(line for line in (root / "docs" / "models.md").read_text().splitlines() if "tiny GPT-2 / Llama" in line)
    assert "/ 1.2e-03 /" in row and "(llama) in float16" in (root / "docs" / "models.md").read_text()


def test_a_method_the_chosen_heads_file_lacks_is_said_not_measured(tmp_path):
    root = copy_checkout(tmp_path)
    path = root / "bench" / "results" / "faithful_chosen_smollm2.json"
    result = json.loads(path.read_text())
    result["rows"] = [row for row in result["rows"] if row["method"] != "tsne"]
    path.write_text(json.dumps(result))
    assert readme_figures.main(["--root", str(root)]) == 0
    text = (root / "docs" / "methods.md").read_text()
    absent = re.search(r"Not measured in these files: (.*?)\. ", text)[1]
    assert "SmolLM2 t-SNE" not in text and re.search(r"SmolLM2: [^;]*(?<!AttentionViz )t-SNE", absent)
