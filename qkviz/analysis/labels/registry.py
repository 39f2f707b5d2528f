"""Every head label, declared once: its name, the rule that earns it, its threshold, its chance level, its colour,
its tag and its description (:class:`HeadLabel`, in :data:`HEAD_LABELS`), and the thresholds with their meanings
(:class:`LabelThresholds`).

Everything else reads this table and spells no label's name: the rules of :mod:`qkviz.analysis.labels.label_table`
(an offset label's offset, a copying label's target, each label's threshold by name) and the single label of an
image head (:func:`qkviz.analysis.labels.head_labels.head_label`, by each label's ``argmax`` share); the corpus
statistics named after a label (``corpus_<label>``, :mod:`qkviz.analysis.statistics.induction_scores`); the
repeated-token probe and ``--ablate`` (:mod:`qkviz.probes`); the report's and the app's colours, tags and legends;
``qkviz stats``'s threshold options; and the label table of docs/atlas.md (:func:`labels_markdown`, checked by a
test). A new label of a kind already here (an offset, a copying target) is one :class:`HeadLabel` below; a label
with a new rule is that and its rule in ``label_table.py``.

A label's place in :data:`HEAD_LABELS` is its code (the matrix and the report colour a head by it) and the order
legends list labels in.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, fields

#: which runs a label is earned on: text runs (the label table), image runs (the single label of an image head), both
TEXT, IMAGE, BOTH = "text", "image", "text and image"


def _threshold(default: float, meaning: str, option: bool = False):
    """A field of :class:`LabelThresholds`: its default, what it measures (the CLI's help) and whether ``qkviz stats``
    sets it by an option of its name, a number in ``(0, 1]`` (``--over-chance`` is an option of its own)."""
    return field(default=default, metadata={"meaning": meaning, "option": option})


@dataclass(frozen=True)
class LabelThresholds:
    """What earns each label (its :attr:`HeadLabel.threshold` names one of these)."""

    argmax_share: float = _threshold(0.5, "share of queries with the same kind of strongest key", option=True)
    broad_entropy: float = _threshold(0.8, "normalised entropy of a broad head", option=True)
    position_mass: float = _threshold(0.4, "mean attention at one relative offset (previous-token, self, next-token, "
                                           "fixed-offset)", option=True)
    local_mass: float = _threshold(0.5, "mean attention within the local window (LOCAL_WINDOW offsets either side)")
    first_token: float = _threshold(0.3, "mean attention to the first token (Gu et al. 2025's epsilon)", option=True)
    copying: float = _threshold(0.3, "mean attention to the induction / duplicate-token target", option=True)
    relation: float = _threshold(0.5, "share of a relation's words whose strongest key is the related word")
    min_queries: int = _threshold(20, "queries a corpus-measured copying or relation score needs")
    over_chance: float = _threshold(2.0, "a label measured on the corpus also needs this many times a uniform head's "
                                         "score")
    copy_share: float = _threshold(0.3, "mean share of a query's attention going to tokens whose write from there ranks "
                                        "that same token among the head's top (bottom, suppression) 5 of the candidates",
                                   option=True)
    offset_support: float = _threshold(0.1, "share of the head's queries a positional label's offset needs: queries "
                                            "whose key there is not the first token")

    def as_dict(self) -> dict:
        return asdict(self)


#: the thresholds ``qkviz stats`` sets by an option of their name (``position_mass``: ``--position-mass``)
THRESHOLD_OPTIONS = tuple(found.name for found in fields(LabelThresholds) if found.metadata["option"])
#: the offsets (either side) of the ``local`` label
LOCAL_WINDOW = 3


def threshold_meaning(name: str) -> str:
    """What threshold ``name`` of :class:`LabelThresholds` measures."""
    return next(found.metadata["meaning"] for found in fields(LabelThresholds) if found.name == name)



@dataclass(frozen=True)
class HeadLabel:
    """One head label. ``threshold`` names the field of :class:`LabelThresholds` its score must reach (``None``:
    earned by no rule, a head's label where it earns none); ``score``, ``chance`` and ``measured_on`` say what is
    measured, what a head attending uniformly would score there and on what, as docs/atlas.md's table writes them."""

    name: str
    colour: str                 # "#rrggbb": the matrix, the report and the app's legends
    tag: str                    # the matrix's short badge
    description: str            # what such a head does, in a few words
    threshold: str | None
    score: str = ""
    chance: str = ""
    measured_on: str = "corpus"
    runs: str = TEXT
    over_chance: bool = True    # measured on the corpus, it also needs over_chance times its chance
    resting: bool = False       # says where attention rests: a head's strongest label only without another
    offset: int | None = None   # an offset label: mean attention at this relative position (encoders only past 0)
    copy_step: int | None = None    # a copying label: attention to the earlier occurrence of the query's token + this
    copy_target: str = ""       # a copying label's target, in words
    argmax: str | None = None   # the share of queries deciding an image head's single label (a statistic's name)
    named_detail: bool = False  # its detail names a variant (an offset, a relation): the report lists it by the head
    ablated: bool = False       # ``--ablate`` checks it causally (qkviz.probes.label_ablation)
    writes: int = 0             # a label of what the head writes: +1 raises the attended tokens' logits, -1 lowers them

    def __post_init__(self):
        if not re.fullmatch(r"[a-z]+(-[a-z]+)*", self.name):
            raise ValueError(f"a head label's name is lower-case words joined by '-', got {self.name!r}")
        if not re.fullmatch(r"#[0-9a-f]{6}", self.colour):
            raise ValueError(f"head label {self.name!r} needs a colour '#rrggbb', got {self.colour!r}")
        if not self.tag or not self.description:
            raise ValueError(f"head label {self.name!r} needs a tag and a description")
        if self.threshold is not None and self.threshold not in {found.name for found in fields(LabelThresholds)}:
            raise ValueError(f"head label {self.name!r}: {self.threshold!r} is not a field of LabelThresholds")
        if (self.copy_step is None) != (not self.copy_target):
            raise ValueError(f"head label {self.name!r}: a copying label has both a copy_step and a copy_target")

    @property
    def column(self) -> str:
        """The atlas column of its score over the corpus's own repeats (copying labels): ``corpus_duplicate_token``."""
        return "corpus_" + self.name.replace("-", "_")


_AT_OFFSET = "a uniform head's mean attention at that offset, first token left out (the corpus's lengths, the layer's mask)"
_COPYING_CHANCE = "a uniform head's attention to the same targets (on the probe: its sequences)"
_COPYING_ON = "repeated random tokens; the corpus's own repeats"

PREVIOUS_TOKEN = HeadLabel(
    "previous-token", "#1f77b4", "prev", "attends to the token before", "position_mass",
    "mean attention at offset −1, first token left out", _AT_OFFSET, offset=-1, argmax="argmax_previous", ablated=True)
NEXT_TOKEN = HeadLabel(
    "next-token", "#17becf", "next", "attends to the token after (encoders)", "position_mass",
    "mean attention at offset +1, encoders only", _AT_OFFSET, offset=1, argmax="argmax_next")
SELF = HeadLabel(
    "self", "#9467bd", "self", "attends to its own token", "position_mass", "mean attention at offset 0, first token left out",
    _AT_OFFSET, runs=BOTH, offset=0, argmax="argmax_self")
FIXED_OFFSET = HeadLabel(
    "fixed-offset", "#8c564b", "offset", "attends a fixed distance back (or ahead, in encoders)", "position_mass",
    "mean attention at the strongest offset `|o| ≥ 2` with support, named in `detail`, first token left out",
    _AT_OFFSET, argmax="argmax_offset",
    named_detail=True)
FIRST_TOKEN = HeadLabel(
    "first-token", "#d62728", "first", "rests on the first token (a sink)", "first_token",
    "Gu et al. 2025's first-token importance: mean attention to the first token, above their ε",
    "a uniform head's mean attention to the first token (not required: Gu et al.'s rule as it is)", runs=BOTH,
    over_chance=False, resting=True, argmax="argmax_first")
DELIMITER = HeadLabel(
    "delimiter", "#ff7f0e", "delim", "rests on special or punctuation tokens", "argmax_share",
    "share of queries whose strongest key is a special or punctuation token other than the first",
    "the share of such keys", runs=BOTH, resting=True, argmax="argmax_delimiter")
BROAD = HeadLabel(
    "broad", "#bcbd22", "broad", "spreads its attention evenly", "broad_entropy", "normalised entropy",
    "1, a uniform head's (its ceiling: not required)", runs=BOTH, over_chance=False, resting=True)
CONTENT = HeadLabel(
    "content", "#2ca02c", "content", "follows what the tokens are, not where: no rule's threshold reached", None,
    runs=BOTH)
LEFT_PATCH = HeadLabel(
    "left-patch", "#aec7e8", "left", "attends to the patch on its left", "argmax_share", runs=IMAGE,
    argmax="argmax_previous")
RIGHT_PATCH = HeadLabel(
    "right-patch", "#9edae5", "right", "attends to the patch on its right", "argmax_share", runs=IMAGE,
    argmax="argmax_next")
NEIGHBOUR_PATCH = HeadLabel(
    "neighbour-patch", "#e377c2", "adjacent", "attends to one of the 4 adjacent patches", "argmax_share", runs=IMAGE,
    argmax="argmax_neighbour")
SAME_ROW = HeadLabel(
    "same-row", "#ffbb78", "row", "attends along its row, 2 or more patches away", "argmax_share", runs=IMAGE,
    argmax="argmax_same_row")
SAME_COLUMN = HeadLabel(
    "same-column", "#98df8a", "column", "attends along its column, 2 or more patches away", "argmax_share",
    runs=IMAGE, argmax="argmax_same_col")
INDUCTION = HeadLabel(
    "induction", "#e41a1c", "induct", "copies what followed the query's token last time (Olsson et al. 2022)",
    "copying", "mean attention from a repeated token to the token after its earlier occurrence", _COPYING_CHANCE,
    _COPYING_ON, copy_step=1, copy_target="token after the earlier occurrence", ablated=True)
DUPLICATE_TOKEN = HeadLabel(
    "duplicate-token", "#f781bf", "dup", "attends to the earlier occurrence of its own token", "copying",
    "mean attention to the earlier occurrence of the query's token", _COPYING_CHANCE, _COPYING_ON, copy_step=0,
    copy_target="earlier occurrence of its token")
LOCAL = HeadLabel(
    "local", "#a6d854", "local", "spreads its attention over the nearby tokens", "local_mass",
    f"mean attention within offsets −{LOCAL_WINDOW}..{LOCAL_WINDOW} with support, first token left out, while no single "
    "offset reaches `position_mass`",
    "the same sum for a uniform head")
DEPENDENCY = HeadLabel(
    "dependency", "#4b0082", "dep", "attends from a word to the word it is related to (Clark et al. 2019)", "relation",
    "share of the words in one relation whose strongest key (first, special and own-word tokens left out) is the "
    "related word, both directions: `det → head`, `head → dobj`", "a uniform head's share on the same words; it must "
    "also beat the relation's best fixed-offset baseline",
    "corpus, spaCy parse (`--syntax`)", named_detail=True)

_WRITES_CHANCE = "5 / the candidates: a write that ranks the candidates at random, whatever the head attends"
_WRITES_ON = "repeated random tokens; the corpus's own repeats; the model's unembedding"
COPYING = HeadLabel(
    "copying", "#e6ab02", "copy", "raises the logits of the tokens it attends to: it writes them (Olsson et al. 2022)",
    "copy_share", "mean share of a query's attention on tokens whose write from there ranks that token among the "
    "head's top 5 of 2,000 candidate tokens (second copy of the probe, or the corpus's repeats); the weights-only OV "
    "score of TransformerLens in `detail`", _WRITES_CHANCE, _WRITES_ON, over_chance=True, writes=1)
SUPPRESSION = HeadLabel(
    "suppression", "#7f7f7f", "supp", "lowers the logits of the tokens it attends to (copy suppression, McDougall et "
    "al. 2023)", "copy_share", "the same with the head's bottom 5 of the candidates", _WRITES_CHANCE, _WRITES_ON,
    over_chance=True, writes=-1)

#: every label, in code order (the matrix's and the report's colour codes, the legends' order)
HEAD_LABELS = (PREVIOUS_TOKEN, NEXT_TOKEN, SELF, FIXED_OFFSET, FIRST_TOKEN, DELIMITER, BROAD, CONTENT, LEFT_PATCH,
               RIGHT_PATCH, NEIGHBOUR_PATCH, SAME_ROW, SAME_COLUMN, INDUCTION, DUPLICATE_TOKEN, LOCAL, DEPENDENCY,
               COPYING, SUPPRESSION)
#: every label's name, in code order
LABELS = tuple(label.name for label in HEAD_LABELS)
#: a label by its name
HEAD_LABEL = {label.name: label for label in HEAD_LABELS}
#: one colour per label, so that a label looks the same in the report and the app
LABEL_COLOURS = {label.name: label.colour for label in HEAD_LABELS}
#: the labels of an offset (previous-token, self, next-token), earned on the corpus
OFFSET_LABELS = tuple(label for label in HEAD_LABELS if label.offset is not None)
#: the copying labels (induction, duplicate-token), earned on the repeated-token probe and the corpus's repeats
COPYING_LABELS = tuple(label for label in HEAD_LABELS if label.copy_step is not None)
#: the labels of what a head writes (copying, suppression), earned on the repeated-token probe through the
#: unembedding (qkviz.probes.writing_probe)
WRITING_LABELS = tuple(label for label in HEAD_LABELS if label.writes)
#: the labels that say where attention rests rather than what it does
RESTING_LABELS = tuple(label.name for label in HEAD_LABELS if label.resting)
#: the labels ``--ablate`` checks causally
ABLATED_LABELS = tuple(label.name for label in HEAD_LABELS if label.ablated)


def _check_unique() -> None:
    for what in ("name", "colour", "tag"):
        values = [getattr(label, what) for label in HEAD_LABELS]
        if len(set(values)) != len(values):
            raise ValueError(f"two head labels share a {what}: {sorted(v for v in values if values.count(v) > 1)}")


_check_unique()


def threshold_option(name: str) -> str:
    """The ``qkviz stats`` option of threshold ``name`` (``--position-mass``), or ``""`` without one."""
    return f"--{name.replace('_', '-')}" if name in THRESHOLD_OPTIONS else ""


def labels_markdown() -> str:
    """docs/atlas.md's table of the labels a text run's heads earn (a test checks the page holds it)."""
    defaults = LabelThresholds()
    lines = ["| label | what the head does | score (threshold; option) | chance | measured on |",
             "|---|---|---|---|---|"]
    for label in HEAD_LABELS:
        if label.runs == IMAGE or label.threshold is None:
            continue
        option = threshold_option(label.threshold)
        threshold = f"{getattr(defaults, label.threshold):g}" + (f"; `{option}`" if option else "")
        lines.append(f"| `{label.name}` | {label.description} | {label.score} ({threshold}) | {label.chance} | "
                     f"{label.measured_on} |")
    return "\n".join(lines) + "\n"
