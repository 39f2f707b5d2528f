"""One declaration per model type: everything qkviz knows of a family sits in its declaration
(:mod:`qkviz.extraction.families`), so each model type is named as a string literal in code in one file of qkviz/
only. Docstrings are not code, and comments are not in the syntax tree."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import Counter

from qkviz.extraction.families import DECLARATIONS
from support import REPO


def string_literals(source: str) -> set[str]:
    """Every string constant of ``source``'s code: docstrings (a string that is a statement of its own) aside."""
    tree = ast.parse(source)
    docstrings = {id(node.value) for node in ast.walk(tree)
                  if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}
    return {node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings}


def files_naming(model_types: set[str]) -> dict[str, list[str]]:
    """Model type -> the files of qkviz/ whose code names it as a string literal."""
    named: dict[str, list[str]] = {}
    for path in sorted((REPO / "qkviz").rglob("*.py")):
        for model_type in string_literals(path.read_text(encoding="utf-8")) & model_types:
            named.setdefault(model_type, []).append(str(path.relative_to(REPO)))
    return named


def test_each_model_type_is_declared_once():
    twice = [model_type for model_type, count in Counter(d.model_type for d in DECLARATIONS).items() if count > 1]
    assert twice == []


def test_every_model_type_is_named_in_one_file_of_qkviz():
    model_types = {declared.model_type for declared in DECLARATIONS}
    named = files_naming(model_types)
    assert {model_type: files for model_type, files in named.items() if len(files) > 1} == {}, \
        "a model type is named outside its declaration; read it from qkviz.extraction.families instead"
    assert set(named) == model_types
    assert all(files[0].startswith("qkviz/extraction/families/") for files in named.values())


def test_a_literal_is_found_in_code_and_not_in_a_docstring():
    source = '"""llama, in a docstring."""\n\ndef f():\n    """gpt2 too."""\n    return {"bert": 1}  # falcon\n'
    assert string_literals(source) == {"bert"}


def test_the_declarations_import_without_torch():
    code = "import sys, qkviz.extraction.families; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)
