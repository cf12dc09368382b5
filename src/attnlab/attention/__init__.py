"""Reusable attention mechanisms. Every attender shares the interface of :mod:`attnlab.attention.base`."""

from attnlab.attention.base import Attender, AttentionOutput, AttentionState, masked_softmax
from attnlab.attention.pooling import FeedForwardAttentionPooling, MeanPooling, PoolingOutput
from attnlab.attention.registry import ATTENDERS, build_attender

__all__ = [
    "ATTENDERS",
    "AttentionOutput",
    "AttentionState",
    "Attender",
    "FeedForwardAttentionPooling",
    "MeanPooling",
    "PoolingOutput",
    "build_attender",
    "masked_softmax",
]
