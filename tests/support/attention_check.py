"""A run's attention against the model's own: it lives in ``bench/support/attention_check.py`` (the exactness bench
uses it too); the tests import it from here."""

from bench.support.attention_check import max_attention_error, model_attentions  # noqa: F401  (re-exported)
