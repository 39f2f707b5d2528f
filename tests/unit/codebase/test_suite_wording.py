"""What scripts/test.sh says of the suite is true: the only tests that skip for lack of a download are the two
literature-head tests (GPT-2 small's and BERT-base's weights, which PyPI does not carry), and it names them."""

import ast
import re

from support import REPO

#: what a test that needs downloaded weights calls to find them (the Hugging Face cache or a hub download)
DOWNLOAD_CALLS = re.compile(r"try_to_load_from_cache|snapshot_download|hf_hub_download|huggingface-cli download")


def weight_seeking_tests(path) -> list[str]:
    """The test functions of ``path`` that call a helper of the same file that looks for downloaded weights."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    helpers = {name for name, node in functions.items() if DOWNLOAD_CALLS.search(ast.unparse(node))}
    return [name for name, node in functions.items() if name.startswith("test_")
            and any(isinstance(call, ast.Call) and getattr(call.func, "id", None) in helpers for call in ast.walk(node))]


def test_only_the_two_literature_head_tests_skip_for_weights_and_test_sh_says_so():
    files = [path for path in (REPO / "tests").rglob("*.py") if path.name != "test_suite_wording.py"
             and DOWNLOAD_CALLS.search(path.read_text(encoding="utf-8"))]
    assert [path.relative_to(REPO).as_posix() for path in files] == ["tests/integration/atlas/test_literature_heads.py"]
    assert len(weight_seeking_tests(files[0])) == 2
    said = " ".join(line.lstrip("# ") for line in (REPO / "scripts" / "test.sh").read_text().splitlines()
                    if line.startswith("#"))
    assert "the two literature-head tests of tests/integration/atlas/test_literature_heads.py" in said
    assert "no test is skipped for lack of a download" not in said
