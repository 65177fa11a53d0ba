"""Tokenizer evaluation metrics."""
from .tokenizer_metric import TokenizerMetric

__all__ = ['TokenizerMetric']
