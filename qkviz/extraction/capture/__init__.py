"""Queries and keys caught as they enter the attention dot product: at the attention interface, where a family's
own code computes attention, with ALiBi slopes and BigBird's block-sparse spans, in one forward pass as qkviz runs
the model (whole sequences, no cache)."""

from qkviz.extraction.capture.forward_pass import forward
from qkviz.extraction.capture.recorder import AttentionRecorder, LayerAttentionSettings, LayerCalls, capturing

__all__ = ["AttentionRecorder", "LayerAttentionSettings", "LayerCalls", "capturing", "forward"]
