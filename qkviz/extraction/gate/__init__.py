"""The exactness gate: before a run is written, the model's own attention (a half-precision model lifted to float32
while the gate runs) proves that the queries and keys qkviz caught reproduce it, on an input long enough to reach
as far as the model's attention does."""

from qkviz.extraction.gate.attention_span import compared_rows, long_input_tokens
from qkviz.extraction.gate.exactness_gate import FLOAT32_BOUND, GateInput, measure
from qkviz.extraction.gate.float32_reference import float32_weights

__all__ = ["FLOAT32_BOUND", "GateInput", "compared_rows", "float32_weights", "long_input_tokens", "measure"]
