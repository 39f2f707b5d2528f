"""The maths every layer shares, in numpy only: attention recomputed from queries and keys (logits with
their scale, soft cap, mask, position bias and sink: one head's
:class:`LogitRule`, probabilities), the alignment of keys with queries, and the one exception
type for mistakes a user can fix, with the way its messages name an option (the command line's flag or the Python
argument: :mod:`qkviz.core.option_names`). Attention partners and partner recall, which search, are
:mod:`qkviz.neighbours`.

Imports nothing of qkviz and no third-party package but numpy.
"""

from qkviz.core.alignment import AlignedHead, Alignment, align_head, norm_scale
from qkviz.core.attention import (allowed_keys, allowed_pairs, attention_logits, attention_probs, dot_logits,
                                  masked_softmax)
from qkviz.core.errors import IncompleteRunError, QkvizError
from qkviz.core.logit_rule import LogitRule
from qkviz.core.option_names import command_line_caller, option

__all__ = ["AlignedHead", "Alignment", "IncompleteRunError", "LogitRule", "QkvizError", "align_head", "allowed_keys", "allowed_pairs",
           "attention_logits", "attention_probs", "command_line_caller", "dot_logits", "masked_softmax", "norm_scale",
           "option"]
