"""A small Transformer encoder–decoder whose positional scheme and cross-attention heads are
constructor flags (issue 28: location attention inside a Transformer).

* :mod:`~attnlab.models.transformer.model`: :class:`TransformerSeq2Seq`, the encoder–decoder, with
  the architecture, the options and their reasons in its module docstring;
* :mod:`~attnlab.models.transformer.layers`: its self- and cross-attention, feed-forward and
  encoder / decoder layers, and the stop's own heads;
* :mod:`~attnlab.models.transformer.options`: the values of its options and the checks of their
  combinations, shared with the experiments' configs.
"""

from attnlab.models.transformer.layers import COUNTING_BIAS, CrossAttention, SelfAttention
from attnlab.models.transformer.model import TransformerSeq2Seq
from attnlab.models.transformer.options import (
    DECODER_RECURRENCES,
    DOT,
    NORMS,
    STOP_FLOOR,
    added_source_positions,
    check_attender_keys,
    check_counting_heads,
    check_cross_attention_options,
    check_decoder_offset,
    check_peer_words,
    check_recurrence_layer,
    check_semantic_output,
    check_universal,
    cross_attention_heads,
    longest_relative_distances,
    relative_clips,
)

__all__ = [
    "COUNTING_BIAS",
    "DECODER_RECURRENCES",
    "DOT",
    "NORMS",
    "STOP_FLOOR",
    "CrossAttention",
    "SelfAttention",
    "TransformerSeq2Seq",
    "added_source_positions",
    "check_attender_keys",
    "check_counting_heads",
    "check_cross_attention_options",
    "check_decoder_offset",
    "check_peer_words",
    "check_recurrence_layer",
    "check_semantic_output",
    "check_universal",
    "cross_attention_heads",
    "longest_relative_distances",
    "relative_clips",
]
