"""A straightforward eager PyTorch twin of Raffel & Ellis's network (§2.1), for the benchmark.

Written the way one would write it from the paper without thinking about memory: ``nn.Linear``
layers, the states ``h`` materialised as ``[B, T, D]``, a masked softmax, and the context as a
broadcast product summed over time. With the same weights it computes the same function as
``attnlab.models.pooling_network.FeedForwardAttentionNetwork`` (tested in
``tests/benchmarks/test_reference_pooling_network.py``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class ReferencePoolingNetwork(nn.Module):
    def __init__(self, input_dim: int = 2, hidden_dim: int = 100, pooling: str = "attention") -> None:
        super().__init__()
        self.pooling = pooling
        self.input_layer = nn.Linear(input_dim, hidden_dim)
        self.score_layer = nn.Linear(hidden_dim, 1) if pooling == "attention" else None
        self.hidden_layer = nn.Linear(hidden_dim, hidden_dim)
        self.output_layer = nn.Linear(hidden_dim, 1)

    def forward(self, inputs: torch.Tensor, padding_mask: torch.Tensor) -> torch.Tensor:
        states = F.leaky_relu(self.input_layer(inputs), 0.01)
        if self.score_layer is not None:
            scores = torch.tanh(self.score_layer(states)).squeeze(-1)
            weights = torch.softmax(scores.masked_fill(padding_mask, float("-inf")), dim=1)
        else:
            real = (~padding_mask).float()
            weights = real / real.sum(dim=1, keepdim=True)
        context = (weights.unsqueeze(-1) * states).sum(dim=1)
        hidden = F.leaky_relu(self.hidden_layer(context), 0.01)
        return F.leaky_relu(self.output_layer(hidden), 0.01).squeeze(-1)


def load_attnlab_state_dict(reference: ReferencePoolingNetwork, state: dict[str, torch.Tensor]) -> None:
    """Copy a ``FeedForwardAttentionNetwork`` state dict into the reference (renaming the score row)."""
    renamed = {key: value for key, value in state.items() if not key.startswith("pooling.")}
    if reference.score_layer is not None:
        renamed["score_layer.weight"] = state["pooling.weight"].unsqueeze(0)
        renamed["score_layer.bias"] = state["pooling.bias"].reshape(1)
    reference.load_state_dict(renamed)
