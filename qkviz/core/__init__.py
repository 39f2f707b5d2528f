"""The maths every layer shares, in numpy only: attention recomputed from queries and keys, the
alignment of keys with queries, attention partners and how well a layout keeps them (partner
recall), and the one exception type for mistakes a user can fix.

Imports nothing of qkviz and no third-party package but numpy.
"""

from qkviz.core.alignment import AlignedHead, Alignment, align_head, norm_scale
from qkviz.core.attention import (allowed_keys, allowed_pairs, attention_logits, attention_probs, dot_logits,
                                  masked_softmax)
from qkviz.core.errors import IncompleteRunError, QkvizError
from qkviz.core.partners import PartnerSample, layout_recall, nearest_of, partner_recall, partner_sample, top_partners

__all__ = ["AlignedHead", "Alignment", "PartnerSample", "IncompleteRunError", "QkvizError", "align_head", "allowed_keys",
           "allowed_pairs", "attention_logits", "attention_probs", "dot_logits", "layout_recall", "masked_softmax",
           "nearest_of", "norm_scale", "partner_recall", "partner_sample", "top_partners"]
