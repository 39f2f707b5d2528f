"""Why a query meets its keys: the exact split of a head's attention logits by the parts of the residual stream.

The parts are what wrote the stream entering the head's layer -- token and position embeddings, each earlier head,
each earlier MLP, the biases -- each carried through every norm with its divisor fixed at its real value
(:mod:`qkviz.extraction.residual_parts`). :func:`explain_pair` splits one logit (by query part x key part, by one
side, or by dimension / rotary band); :func:`head_circuit` finds, over a sample of the run, which parts drive a
head's attention to its partners (:mod:`.head_circuit`); the model is the run's own, loaded on demand once per process
(:mod:`.model_on_demand`). The same model runs the head atlas's built-in probe (:func:`probe_heads`: induction and
duplicate-token heads on repeated random tokens), which :func:`compute_stats` adds to the corpus's atlas.
:func:`ablate` says whether a head matters: the next-token loss (an encoder: the last hidden state) with the head's
output removed, per token of the run (:mod:`.ablation`).
"""

from qkviz.explain.ablation import ABLATION_COLUMNS, ablate, ablation_summary, most_affected
from qkviz.explain.head_circuit import (CHUNK_TOKENS, HeadCircuit, explain_selection, head_circuit, head_circuits, part_kind,
                                        sample_sequences)
from qkviz.explain.head_probes import PROBE_COLUMNS, ProbeSettings, probe_heads
from qkviz.explain.model_on_demand import run_language_model, run_model
from qkviz.explain.pair_logit import explain_pair, explain_pair_splits
from qkviz.explain.probed_atlas import compute_stats
from qkviz.explain.stored_circuits import compute_circuits, composition_edges, load_circuits

__all__ = ["ABLATION_COLUMNS", "CHUNK_TOKENS", "PROBE_COLUMNS", "HeadCircuit", "ProbeSettings", "ablate",
           "ablation_summary", "compute_circuits", "compute_stats", "composition_edges", "explain_pair",
           "explain_pair_splits", "explain_selection", "head_circuit", "head_circuits", "load_circuits",
           "most_affected", "part_kind", "probe_heads", "run_language_model", "run_model", "sample_sequences"]
