"""Every family declaration in one table, and everything read from it: the families table (``qkviz models``,
docs/families.md), the refusals by model type, the query-key attribution status, the declared adapters, the model
types read through their vision tower, and the capture tables keyed by attention class
(:mod:`qkviz.extraction.capture`). Nothing here names a model type: each is named once, in its declaration."""

from __future__ import annotations

from dataclasses import replace
from typing import TypeVar

from qkviz.extraction.families import decoders, encoders, rotary_decoders, vision
from qkviz.extraction.families.adapter import FamilyAdapter
from qkviz.extraction.families.declaration import EXACT, REFUSED, FamilyDeclaration, relative_positions

#: every declaration, the table's rows in the table's order (encoders, decoders with learned, ALiBi or no positions,
#: rotary decoders), and the image families last
DECLARATIONS: tuple[FamilyDeclaration, ...] = (*encoders.DECLARATIONS, *decoders.DECLARATIONS,
                                               *rotary_decoders.DECLARATIONS, *vision.DECLARATIONS)
_BY_MODEL_TYPE = {declared.model_type: declared for declared in DECLARATIONS}

#: the model types qkviz has been tried on, each exact or refused, and why: the rows of ``qkviz models`` and
#: docs/families.md, each proven by ``tests/integration/models/test_model_families.py`` on a tiny random model of that type
#: (an exact one by recomputing the model's own eager attention from the stored queries and keys, a refused one by
#: the one-line refusal quoted here). A model type not listed is not refused for that: it is found from its
#: structure and passes the exactness gate or is refused by it.
MODEL_FAMILIES: tuple[FamilyDeclaration, ...] = tuple(declared for declared in DECLARATIONS if declared.in_table)


def declaration(model_type: str) -> FamilyDeclaration | None:
    """The declaration of ``model_type``, or None for a type qkviz finds from the model's structure."""
    return _BY_MODEL_TYPE.get(model_type)


def counts() -> dict[str, int]:
    return {status: sum(family.status == status for family in MODEL_FAMILIES) for status in (EXACT, REFUSED)}


#: the exact model types whose logits ``Run.explain`` and ``Run.circuit`` refuse to split by the parts of the residual
#: stream, and why (:mod:`qkviz.extraction.residual.residual_parts`; every other exact type is split exactly). Proven, like the
#: table, by ``tests/integration/explain/test_query_key_attribution.py`` on each type's tiny random model.
ATTRIBUTION_REFUSED: dict[str, str] = {family.model_type: family.attribution_refused for family in MODEL_FAMILIES
                                       if family.attribution_refused is not None}


def attribution_status(model_type: str) -> str:
    """``exact``, or ``refused: why`` for :data:`ATTRIBUTION_REFUSED`; a refused type has nothing to split."""
    family = declaration(model_type)
    if family is not None and family.in_table and family.status == REFUSED:
        return REFUSED
    why = ATTRIBUTION_REFUSED.get(model_type)
    return EXACT if why is None else f"{REFUSED}: {why}"


def families_markdown() -> str:
    """The table of docs/families.md."""
    lines = ["| model type | status | beyond plain q.k (exact) / why (refused) | query-key attribution |",
             "|---|---|---|---|"]
    lines += [f"| `{f.model_type}` | {f.status} | {f.note} | {attribution_status(f.model_type)} |"
              for f in MODEL_FAMILIES]
    return "\n".join(lines)


def refusal_reason(config) -> str | None:
    """Why a model of ``config`` cannot be captured exactly, or None where nothing declared stands in its way: its
    type's refusal, else its type's check of the configuration, else :func:`relative_positions`. Declared so that
    such a model is refused before its weights load, in one line that says why; anything not declared still passes
    the exactness gate (:mod:`qkviz.extraction.gate.exactness_gate`) before a run is written."""
    declared = declaration(str(getattr(config, "model_type", "")))
    if declared is not None and declared.refusal is not None:
        return declared.refusal
    if declared is not None and declared.configuration_refusal is not None:
        return declared.configuration_refusal(config)
    return relative_positions(config)


def _declared_adapters() -> tuple[FamilyAdapter, ...]:
    """Each declared adapter once, in the order of the declarations, with the model types whose declarations name it."""
    named: dict[FamilyAdapter, list[str]] = {}
    for declared in DECLARATIONS:
        if declared.adapter is not None:
            named.setdefault(declared.adapter, []).append(declared.model_type)
    return tuple(replace(adapter, model_types=tuple(model_types)) for adapter, model_types in named.items())


#: the families declared because structure alone cannot tell all qkviz needs of them
DECLARED_ADAPTERS: tuple[FamilyAdapter, ...] = _declared_adapters()
#: model types whose checkpoint holds a vision tower beside a text tower (``model.vision_model``): qkviz reads the tower
TOWER_MODEL_TYPES: tuple[str, ...] = tuple(declared.model_type for declared in DECLARATIONS if declared.vision_tower)

Kind = TypeVar("Kind")


def declared_captures(kind: type[Kind]) -> dict[str, Kind]:
    """Attention class -> capture, for every declared capture of ``kind`` (each kind's doc says how it is keyed)."""
    return {attention: capture for declared in DECLARATIONS for attention, capture in declared.captures.items()
            if isinstance(capture, kind)}
