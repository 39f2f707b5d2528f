"""The forward loops that stream a run to the store, text and images, chunk by chunk, with what else a run keeps
beside queries and keys: each head's |W_O^h v_j|, its update to the hidden state, and the model's own logit parts."""

from qkviz.extraction.streaming.chunk_capture import CHUNK_BYTES, attention_layers, bytes_per_token
from qkviz.extraction.streaming.output_norms import head_factors, head_output_norms
from qkviz.extraction.streaming.text_capture import chunk_sentences, pad_token_id, padded_batch

__all__ = ["CHUNK_BYTES", "attention_layers", "bytes_per_token", "chunk_sentences", "head_factors",
           "head_output_norms", "pad_token_id", "padded_batch"]
