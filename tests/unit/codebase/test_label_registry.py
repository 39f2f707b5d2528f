"""Head labels and atlas statistics are declared once (qkviz.analysis.labels.registry,
qkviz.analysis.statistics.registry): no other file of qkviz/ or dash_app/ spells a label's name, a label cannot lack
its colour, and what reads the registries (the app's legend, the probes, the CLI, docs/atlas.md) follows it."""

from __future__ import annotations

import ast
import dataclasses
from collections import defaultdict

import numpy as np
import pytest

from qkviz.analysis.labels import (COPYING_LABELS, HEAD_LABEL, HEAD_LABELS, LABEL_COLOURS, LABELS, HeadLabel,
                                   LabelThresholds, labels_markdown)
from qkviz.analysis.statistics import ATLAS_STATISTIC, PANEL, REPEAT_STATISTICS, describe_statistic, is_share
from support import REPO

#: files of qkviz/ and dash_app/ a label's name may be a string literal in: the registry, and one other (a word such as
#: "self" or "local" also names other things: a dictionary key, a logit term, a Hugging Face attention type)
MOST_FILES = 2


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def label_literals() -> dict[str, set[str]]:
    """Per label name, the files of qkviz/ and dash_app/ where it is a string constant (docstrings left out)."""
    found = defaultdict(set)
    for root in ("qkviz", "dash_app"):
        for path in sorted((REPO / root).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            docstrings = _docstrings(tree)
            for node in ast.walk(tree):
                if (isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in HEAD_LABEL
                        and id(node) not in docstrings):
                    found[node.value].add(str(path.relative_to(REPO)))
    return found


def test_a_label_name_is_spelled_in_at_most_two_files():
    found = label_literals()
    assert "qkviz/analysis/labels/registry.py" in found["induction"], "the scan finds the registry's own spelling"
    spread = {label: sorted(files) for label, files in found.items() if len(files) > MOST_FILES}
    assert spread == {}, ("a head label's name is spelled in more files than the registry and one other; read it from "
                          f"qkviz.analysis.labels.registry instead: {spread}")


def test_the_scan_sees_a_literal_and_not_a_docstring():
    tree = ast.parse('"""induction heads."""\nLABEL = "induction"\n')
    docstrings = _docstrings(tree)
    spelled = [node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and id(node) not in docstrings]
    assert spelled == ["induction"]


def test_a_label_cannot_be_declared_without_its_colour_tag_or_threshold():
    declared = dataclasses.asdict(HEAD_LABEL["induction"])
    with pytest.raises(TypeError):
        HeadLabel(name="copying-back", tag="back", description="copies", threshold="copying")   # no colour
    with pytest.raises(ValueError, match="colour"):
        HeadLabel(**{**declared, "name": "copying-back", "colour": ""})
    with pytest.raises(ValueError, match="LabelThresholds"):
        HeadLabel(**{**declared, "name": "copying-back", "threshold": "copy_mass"})
    assert all(label.colour for label in HEAD_LABELS) and len(set(LABEL_COLOURS.values())) == len(LABELS)
    assert len({label.tag for label in HEAD_LABELS}) == len(LABELS)


def test_the_app_legend_and_colour_scale_cover_every_label():
    from dash_app.data.atlas_columns import label_codes, label_tag
    from dash_app.views.matrix.cells import label_colourscale, label_legend

    legend = label_legend(np.arange(len(LABELS), dtype=float))
    assert [entry.name for entry in legend] == list(LABELS)
    assert [entry.marker.color for entry in legend] == [LABEL_COLOURS[label] for label in LABELS]
    scale = label_colourscale()
    assert [colour for _, colour in scale[::2]] == [LABEL_COLOURS[label] for label in LABELS]
    assert label_codes(np.array(LABELS)).tolist() == list(range(len(LABELS)))
    assert [label_tag(label) for label in LABELS] == [HEAD_LABEL[label].tag for label in LABELS]


def test_labels_name_declared_thresholds_statistics_and_columns():
    thresholds = {field.name for field in dataclasses.fields(LabelThresholds)}
    for label in HEAD_LABELS:
        assert label.threshold is None or label.threshold in thresholds, label.name
        assert label.argmax is None or label.argmax in ATLAS_STATISTIC, label.name
    assert {label.column for label in COPYING_LABELS} == {name for name in REPEAT_STATISTICS
                                                           if not name.endswith(("_chance", "_queries"))}


def test_the_probes_and_ablation_read_the_registry():
    from qkviz.probes.label_ablation import CHECKED_LABELS
    from qkviz.probes.repeat_probe import PROBES

    assert set(PROBES) >= {label.name for label in COPYING_LABELS}
    assert set(CHECKED_LABELS) == {label.name for label in HEAD_LABELS if label.ablated}


def test_the_stats_command_takes_every_threshold_option_at_its_default():
    from qkviz.cli_parser import build_parser

    args = build_parser().parse_args(["stats", "--run", "r"])
    defaults = LabelThresholds()
    for name in ("argmax_share", "broad_entropy", "position_mass", "first_token", "copying", "over_chance"):
        assert getattr(args, name) == getattr(defaults, name), name


def test_docs_atlas_holds_the_registry_label_table():
    assert labels_markdown() in (REPO / "docs" / "atlas.md").read_text(encoding="utf-8")


def test_statistics_are_named_and_read_from_their_declaration():
    assert set(PANEL) <= set(ATLAS_STATISTIC)
    assert describe_statistic("argmax_previous") == "strongest key: previous token"
    assert describe_statistic("argmax_previous", image=True) == "strongest key: patch to the left"
    assert describe_statistic("relation_det_dependent") == "strongest key: its head word (det → head)"
    assert describe_statistic("corpus_duplicate_token") == "corpus repeats: duplicate-token attention"
    assert describe_statistic("share_key_prior") == "logit share: key_prior"
    assert describe_statistic("n_mystery") == "n mystery"
    assert is_share("argmax_self") and is_share("pos_NOUN") and is_share("corpus_induction_chance")
    assert not is_share("corpus_induction_queries") and not is_share("first_token_transmits")
