"""Every statistic of the head atlas, declared once: its column name, what a person reads for it (an image run's
wording where it differs), which runs have it and whether it is a share (:class:`AtlasStatistic`, in
:data:`ATLAS_STATISTICS`); the columns named by a pattern (``pos_<tag>``, ``relation_<relation>_<side>``,
``corpus_<label>``, ``share_<term>``, ``embed_share_<term>``) are :class:`StatisticFamily` declarations.

The column lists of the modules that compute them are read from here, in this order (which is the atlas table's):
:data:`qkviz.analysis.statistics.head_stats.STATISTICS` (every run) and ``IMAGE_STATISTICS``,
:data:`qkviz.analysis.statistics.value_shares.VALUE_STATISTICS` (runs with output norms), the named ones of
:data:`qkviz.analysis.statistics.syntax.SYNTAX_STATISTICS` (``--syntax``) and
:data:`qkviz.analysis.atlas.UPDATE_STATISTICS` (runs extracted with ``--head-update``). The app reads each column's
name, whether it is a share and :data:`PANEL` (its side panel's statistics, in order); the report its grid of
statistics. A new statistic is its computation, where its siblings are computed, and one line here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

#: which runs have a statistic
EVERY_RUN = "every run"
IMAGE_RUNS = "image runs"
OUTPUT_NORMS = "runs with output norms"
SYNTAX_RUNS = "with --syntax"
HEAD_UPDATES = "runs extracted with --head-update"
TEXT_RUNS = "text runs"


@dataclass(frozen=True)
class AtlasStatistic:
    """One column of the atlas table."""

    name: str
    description: str            # what a person reads (the app's panel, sort and colour menus)
    runs: str = EVERY_RUN
    image_description: str = ""  # an image run's wording, where it differs
    share: bool = False         # a share of queries or of attention (shown as a percentage)

    def __post_init__(self):
        if not self.description or self.runs not in (EVERY_RUN, IMAGE_RUNS, OUTPUT_NORMS, SYNTAX_RUNS, HEAD_UPDATES,
                                                     TEXT_RUNS):
            raise ValueError(f"atlas statistic {self.name!r} needs a description and one of the runs kinds")


@dataclass(frozen=True)
class StatisticFamily:
    """Columns named ``<prefix><rest>``; their counts (``*_queries``) and offsets (``*_offset``) are never shares."""

    prefix: str
    describe: Callable[[str], str]   # the column's rest -> what a person reads
    runs: str
    share: bool = False


#: what a relation column's suffix holds (``relation_det_dependent_baseline``: syntax.py's best fixed-offset baseline)
_RELATION_SUFFIXES = {"_queries": "queries", "_chance": "chance", "_baseline_offset": "best fixed offset",
                      "_baseline": "best fixed-offset baseline"}


def _relation(rest: str) -> str:
    suffix = next((suffix for suffix in _RELATION_SUFFIXES if rest.endswith(suffix)), "")
    relation, side = rest.removesuffix(suffix).rsplit("_", 1)
    described = (f"strongest key: its head word ({relation} → head)" if side == "dependent"
                 else f"strongest key: its {relation} dependent (head → {relation})")
    return f"{described}, {_RELATION_SUFFIXES[suffix]}" if suffix else described


ATLAS_STATISTICS = (
    AtlasStatistic("mean_distance", "mean distance", image_description="mean patch distance"),
    AtlasStatistic("mean_distance_no_first", "mean distance, first token left out",
                   image_description="mean patch distance, special tokens left out"),
    AtlasStatistic("entropy", "entropy (nats)"),
    AtlasStatistic("entropy_normalised", "normalised entropy"),
    AtlasStatistic("variability", "variability"),
    AtlasStatistic("argmax_self", "strongest key: itself", share=True),
    AtlasStatistic("argmax_first", "strongest key: first token", image_description="strongest key: first token (CLS)",
                   share=True),
    AtlasStatistic("argmax_previous", "strongest key: previous token",
                   image_description="strongest key: patch to the left", share=True),
    AtlasStatistic("argmax_next", "strongest key: next token", image_description="strongest key: patch to the right",
                   share=True),
    AtlasStatistic("argmax_delimiter", "strongest key: delimiter", image_description="strongest key: other special token",
                   share=True),
    AtlasStatistic("argmax_offset", "strongest key: fixed offset", share=True),
    AtlasStatistic("offset", "most frequent fixed offset"),
    AtlasStatistic("concentration", "concentration (top-1 - top-2)"),
    AtlasStatistic("first_token_attention", "attention to the first token", share=True),
    AtlasStatistic("special_attention", "attention to special tokens", share=True),
    AtlasStatistic("argmax_neighbour", "strongest key: an adjacent patch", IMAGE_RUNS, share=True),
    AtlasStatistic("argmax_same_row", "strongest key: same row, 2+ patches away", IMAGE_RUNS, share=True),
    AtlasStatistic("argmax_same_col", "strongest key: same column, 2+ patches away", IMAGE_RUNS, share=True),
    AtlasStatistic("first_token_value_share", "value-weighted share of the first token (α·‖W_O v‖)", OUTPUT_NORMS,
                   share=True),
    AtlasStatistic("special_value_share", "value-weighted share of special tokens (α·‖W_O v‖)", OUTPUT_NORMS,
                   share=True),
    AtlasStatistic("first_token_transmits", "first token: moved / attended (transmits)", OUTPUT_NORMS),
    AtlasStatistic("special_transmits", "special tokens: moved / attended (transmits)", OUTPUT_NORMS),
    AtlasStatistic("dependency_alignment", "dependency alignment", SYNTAX_RUNS, share=True),
    AtlasStatistic("dependency_alignment_no_first", "dependency alignment, first token left out", SYNTAX_RUNS,
                   share=True),
    AtlasStatistic("update_ratio_median", "head update: median norm ratio", HEAD_UPDATES),
    AtlasStatistic("update_cosine_mean", "head update: mean cosine", HEAD_UPDATES),
)
STATISTIC_FAMILIES = (
    StatisticFamily("share_", lambda rest: f"logit share: {rest}", EVERY_RUN, share=True),
    StatisticFamily("pos_", lambda rest: f"attention to {rest} (part of speech)", SYNTAX_RUNS, share=True),
    StatisticFamily("relation_", _relation, SYNTAX_RUNS, share=True),
    StatisticFamily("corpus_", lambda rest: f"corpus repeats: {rest.replace('_', '-')} attention", TEXT_RUNS,
                    share=True),
    StatisticFamily("embed_share_", lambda rest: f"embed share {rest.replace('_', ' ')}", EVERY_RUN),
)
#: the app's side panel lists these, in this order (``share_*`` logit terms go after ``special_attention``)
PANEL = ("mean_distance", "mean_distance_no_first", "entropy_normalised", "variability", "argmax_self", "argmax_first",
         "argmax_previous", "argmax_next", "argmax_neighbour", "argmax_same_row", "argmax_same_col",
         "argmax_delimiter", "argmax_offset", "concentration",
         "first_token_attention", "special_attention", "first_token_value_share", "first_token_transmits",
         "special_value_share", "special_transmits", "update_ratio_median", "update_cosine_mean",
         "dependency_alignment")
#: a statistic by its name
ATLAS_STATISTIC = {statistic.name: statistic for statistic in ATLAS_STATISTICS}
if len(ATLAS_STATISTIC) != len(ATLAS_STATISTICS) or not set(PANEL) <= set(ATLAS_STATISTIC):
    raise ValueError("atlas statistics are declared once each, and the panel lists declared ones only")


def statistic_names(runs: str) -> tuple[str, ...]:
    """The named statistics ``runs`` have (one of the runs kinds above), in the atlas table's order."""
    return tuple(statistic.name for statistic in ATLAS_STATISTICS if statistic.runs == runs)


def _family(column: str) -> StatisticFamily | None:
    return next((family for family in STATISTIC_FAMILIES if column.startswith(family.prefix)), None)


def describe_statistic(column: str, image: bool = False) -> str:
    """What a person reads for a column (``"logit share: key_prior"`` for ``share_key_prior``; ``image``: an image
    run's wording)."""
    statistic = ATLAS_STATISTIC.get(column)
    if statistic is not None:
        return (image and statistic.image_description) or statistic.description
    family = _family(column)
    if family is not None:
        return family.describe(column[len(family.prefix):])
    return column.replace("_", " ")


def is_share(column: str) -> bool:
    """Columns holding a share of queries or of attention (shown as percentages)."""
    statistic = ATLAS_STATISTIC.get(column)
    if statistic is not None:
        return statistic.share
    family = _family(column)
    return family is not None and family.share and not column.endswith(("_queries", "_offset"))
