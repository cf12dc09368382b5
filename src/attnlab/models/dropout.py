"""Dropout whose masks are cheap on a CPU.

PyTorch's CPU dropout draws one Bernoulli sample per element from its Mersenne Twister, which made
dropout's masks 20% of a training update of ``scan_transformer_csordas2021`` (as it was then, dropout 0.5 on
attention weights, residual branches and feed-forward layers) on one thread. :class:`Dropout`
takes one 16-bit lane per element (its 15 random low bits) from one 64-bit draw per four elements
instead: forward and backward 2.5-2.8× faster than ``torch.nn.functional.dropout`` on the
Transformer's tensors (docs/results.md, issue 28, session 28), so that update took 1.23× less CPU
time (1.34× with sinusoidal positions). Elsewhere than on a CPU it is ``nn.Dropout``. The
Transformer uses it; the recurrent models keep ``nn.Dropout``, so their finished runs stay
reproducible bit for bit.

Choice where the semantics could differ: the drop probability is rounded to a multiple of
``2**-15`` (0.1 becomes 0.100006; 0.5 and every multiple of 1/32768 stay exact), and survivors are
scaled by ``1 / (1 - p)`` of that rounded ``p``, so the expectation of the output is exactly the
input. The random bits come from PyTorch's default generator, so ``torch.manual_seed`` and a saved
RNG state reproduce the masks.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

LEVELS = 1 << 15
"""How finely the drop probability is resolved: 15 random bits per element."""


def cpu_dropout(x: torch.Tensor, p: float) -> torch.Tensor:
    """``x`` with each element zeroed with probability ``p`` (rounded to a multiple of ``2**-15``)
    and the rest scaled to keep the expectation; differentiable (the gradient is the same mask)."""
    threshold = round(p * LEVELS)
    if threshold == 0:
        return x
    if threshold == LEVELS:
        return x * 0.0
    count = x.numel()
    # random_() on int64 draws from [0, 2**63): 63 random bits, so each of its four 16-bit lanes has
    # 15 random low bits (the top lane's sign bit is always 0; the mask below drops every sign bit).
    bits = torch.empty((count + 3) // 4, dtype=torch.int64, device=x.device).random_()
    keep = (bits.view(torch.int16)[:count] & (LEVELS - 1)) >= threshold
    return x * keep.view(x.shape).to(x.dtype).mul_(LEVELS / (LEVELS - threshold))


class Dropout(nn.Dropout):
    """``nn.Dropout`` with :func:`cpu_dropout`'s masks on a CPU (module docstring)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        if x.device.type != "cpu" or self.inplace:
            return F.dropout(x, self.p, True, self.inplace)
        return cpu_dropout(x, self.p)
