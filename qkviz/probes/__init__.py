"""Everything that runs a run's model again, loaded on demand (:mod:`.model_on_demand`, which :mod:`qkviz.explain`'s
attribution shares) and kept under a memory budget (:mod:`.model_cache`): the built-in probes of every head
(induction, duplicate-token and previous-token heads on repeated random tokens; what every head writes there, copying
and suppression through the unembedding, :mod:`.writing_probe`), whether a head matters (the next-token loss, or an
encoder's last hidden state, with its output removed), each induction and previous-token label checked by ablation,
and the head atlas with its probes (:func:`compute_stats`, ``qkviz stats``).

Importing this package does not import torch: the names that run the model import it when called.
"""

from qkviz.core.lazy_names import lazy_names
from qkviz.probes.ablation import ABLATION_COLUMNS, ablate, ablation_summary, most_affected
from qkviz.probes.head_probes import PROBE_COLUMNS, ProbeSettings, probe_heads
from qkviz.probes.model_cache import (model_loading, model_memory_budget, model_memory_state, parse_memory,
                                     set_default_model_memory, set_model_memory)
from qkviz.probes.model_on_demand import run_language_model, run_model, sequence_ids, served_model_memory
from qkviz.probes.probed_atlas import compute_stats

__all__ = ["ABLATION_COLUMNS", "ABLATION_MODES", "PROBE_COLUMNS", "PROBES", "Ablation", "CopyingSettings",
           "ProbeSettings", "RepeatedTokens", "ablate", "ablation_losses", "ablation_summary", "compute_stats",
           "copying_probe", "model_loading", "model_memory_budget", "model_memory_state", "most_affected",
           "parse_memory", "probe_heads", "probe_scores", "run_language_model", "run_model", "sequence_ids",
           "served_model_memory", "set_default_model_memory", "set_model_memory"]

__getattr__ = lazy_names(__name__, {"ablation_losses": "head_ablation", "Ablation": "head_ablation",
                                    "ABLATION_MODES": "head_ablation", "PROBES": "repeat_probe",
                                    "RepeatedTokens": "repeat_probe", "probe_scores": "repeat_probe",
                                    "copying_probe": "writing_probe", "CopyingSettings": "writing_probe"})
