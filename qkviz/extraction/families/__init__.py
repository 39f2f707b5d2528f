"""Every model family qkviz knows, one declaration per model type: its status (exact, or refused and why), its
attribution status, the adapter it needs where its structure cannot tell, how its queries and keys are captured
where it does not call transformers' attention interface, and whether a checkpoint of it is read through its vision
tower (:class:`FamilyDeclaration`). A model type is named once, in its declaration, in one module per kind of
family: :mod:`~qkviz.extraction.families.encoders`, :mod:`~qkviz.extraction.families.decoders`,
:mod:`~qkviz.extraction.families.rotary_decoders`, :mod:`~qkviz.extraction.families.vision`. Adding a family
touches one of them. The families table (``qkviz models``, docs/families.md), the refusals, the declared adapters
and the capture tables keyed by attention class are read from the declarations
(:mod:`~qkviz.extraction.families.catalogue`).

The bottom of :mod:`qkviz.extraction`: the adapters and the capture read it, it reads neither. Plain Python:
importing it does not import torch.
"""

from qkviz.extraction.families.adapter import (BLOCK_SPARSE, EmbeddingPaths, FamilyAdapter, ModelShape,
                                               full_attention_span, span_name)
from qkviz.extraction.families.catalogue import (ATTRIBUTION_REFUSED, DECLARATIONS, DECLARED_ADAPTERS, MODEL_FAMILIES,
                                                 TOWER_MODEL_TYPES, attribution_status, counts, declaration,
                                                 declared_captures, families_markdown, refusal_reason)
from qkviz.extraction.families.declaration import (EXACT, REFUSED, AlibiInMask, FamilyDeclaration, MethodCapture,
                                                   OwnCodeCapture, ProjectionCapture)

__all__ = ["ATTRIBUTION_REFUSED", "BLOCK_SPARSE", "DECLARATIONS", "DECLARED_ADAPTERS", "EXACT", "MODEL_FAMILIES",
           "REFUSED", "TOWER_MODEL_TYPES", "AlibiInMask", "EmbeddingPaths", "FamilyAdapter", "FamilyDeclaration",
           "MethodCapture", "ModelShape", "OwnCodeCapture", "ProjectionCapture", "attribution_status", "counts",
           "declaration", "declared_captures", "families_markdown", "full_attention_span", "refusal_reason",
           "span_name"]
