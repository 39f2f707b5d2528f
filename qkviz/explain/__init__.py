"""Why a query meets its keys, and what a head writes: exact splits of a head's attention logits and of its direct
effect on the model's logits by the parts of the residual stream.

The parts are what wrote the stream entering the head's layer -- token and position embeddings, each earlier head,
each earlier MLP, the biases -- each carried through every norm with its divisor fixed at its real value
(:mod:`qkviz.extraction.residual`). :func:`explain_pair` splits one logit (by query part x key part, by one
side, or by dimension / rotary band); :func:`head_circuit` finds, over a sample of the run, which parts drive a
head's attention to its partners (:mod:`.head_circuit`), and :func:`compute_circuits` keeps every head's circuit
with the run. :func:`direct_effects` splits what the whole model writes at a token, a target token's logit, by the
same parts of the final residual stream; :func:`head_output` splits one head's share of it by the tokens it read
and by the parts that wrote its values (:func:`head_outputs`: at many tokens, one pass per sequence), and
:func:`head_writes` lists the tokens a head promotes and suppresses.
The model is the run's own, loaded on demand once per process by :mod:`qkviz.probes`, which also reruns it for the
probes and ablation. A sequence explained is traced once and kept for its further pairs (:mod:`.traced_streams`:
:func:`set_trace_memory`, :func:`trace_memory_state`, :func:`clear_traces`).
"""

from qkviz.explain.direct_effects import DIRECT_EFFECT_COLUMNS, direct_effects
from qkviz.explain.head_writes import HEAD_OUTPUT_BY, head_output, head_outputs, head_write_splits, head_writes
from qkviz.explain.head_circuit import (CHUNK_TOKENS, HeadCircuit, explain_selection, head_circuit, head_circuits, part_kind,
                                        sample_sequences)
from qkviz.explain.pair_logit import explain_pair, explain_pair_splits
from qkviz.explain.stored_circuits import compute_circuits, composition_edges, load_circuits
from qkviz.explain.traced_streams import clear_traces, set_trace_memory, trace_memory_state

__all__ = ["CHUNK_TOKENS", "DIRECT_EFFECT_COLUMNS", "HEAD_OUTPUT_BY", "HeadCircuit", "clear_traces", "compute_circuits",
           "composition_edges", "direct_effects", "explain_pair", "explain_pair_splits", "explain_selection",
           "head_circuit", "head_circuits", "head_output", "head_outputs", "head_write_splits", "head_writes", "load_circuits", "part_kind",
           "sample_sequences", "set_trace_memory", "trace_memory_state"]
