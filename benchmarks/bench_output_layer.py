"""Would fusing the language model's output layer with its loss pay on the CPU?

The scaled-down WikiText-2 models of the Daniluk et al. reproduction spend most of a training step
in the output layer: ``logits = x Wᵀ + b`` over 33,278 words, the cross-entropy, and their
backward (a 42 MB logits tensor for 16 × 20 tokens, read and written several times). This
benchmark times, side by side in one run, that step as the trainer runs it (``F.linear`` +
``F.cross_entropy`` + ``backward``) against two fused variants that never keep the whole logits
tensor through autograd:

* ``token chunks``: rows in chunks of ``c``; each chunk's logits are turned into the gradient
  ``softmax − one_hot`` while they are in cache, and the input, weight and bias gradients are
  accumulated in the forward pass (the backward only scales them);
* ``vocabulary chunks``: logits written once, column block by column block, with a running
  log-sum-exp; a second pass turns each block into its gradient and multiplies it out.

All variants give the same loss and gradients (checked here, to float rounding); only speed
differs. The ratio printed is reference time ÷ variant time (> 1: the variant is faster). The
shapes default to the Key-Value model of the reproduction (``x``: 320 × 62).

Usage: ``OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_output_layer.py [--repeats 7]``
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from attnlab.training.allocator import keep_freed_memory

Gradients = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


class _PrecomputedGradients(torch.autograd.Function):
    """Base of the fused variants: ``forward`` returns the summed NLL and saves the gradients of
    it; ``backward`` scales them by the incoming gradient."""

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        grad_x, grad_weight, grad_bias = ctx.saved_tensors
        return grad_x * grad, grad_weight * grad, grad_bias * grad, None, None


class TokenChunks(_PrecomputedGradients):
    @staticmethod
    def forward(ctx, x, weight, bias, targets, chunk):  # type: ignore[override]
        grad_x = torch.empty_like(x)
        grad_weight = torch.zeros_like(weight)
        grad_bias = torch.zeros_like(bias)
        total = x.new_zeros((), dtype=torch.float64)
        for start in range(0, x.size(0), chunk):
            rows, target = x[start : start + chunk], targets[start : start + chunk, None]
            logits = torch.addmm(bias, rows, weight.t())
            logits.sub_(logits.amax(1, keepdim=True))
            target_logit = logits.gather(1, target)
            sums = logits.exp_().sum(1, keepdim=True)
            total += (sums.log() - target_logit).sum()
            logits.div_(sums).scatter_add_(1, target, logits.new_full(target.shape, -1.0))
            torch.mm(logits, weight, out=grad_x[start : start + chunk])
            grad_weight.addmm_(logits.t(), rows)
            grad_bias.add_(logits.sum(0))
        ctx.save_for_backward(grad_x, grad_weight, grad_bias)
        return total.to(x.dtype)


class VocabularyChunks(_PrecomputedGradients):
    @staticmethod
    def forward(ctx, x, weight, bias, targets, chunk):  # type: ignore[override]
        rows, vocabulary = x.size(0), weight.size(0)
        logits = x.new_empty(rows, vocabulary)
        running_max = x.new_full((rows, 1), -float("inf"))
        running_sum = x.new_zeros(rows, 1)
        for start in range(0, vocabulary, chunk):
            block = logits[:, start : start + chunk]
            torch.addmm(bias[start : start + chunk], x, weight[start : start + chunk].t(), out=block)
            new_max = torch.maximum(running_max, block.amax(1, keepdim=True))
            running_sum = running_sum * (running_max - new_max).exp() + (block - new_max).exp().sum(
                1, keepdim=True
            )
            running_max = new_max
        log_normalizer = running_max + running_sum.log()
        total = (log_normalizer - logits.gather(1, targets[:, None])).double().sum()
        grad_x, grad_weight, grad_bias = torch.zeros_like(x), torch.empty_like(weight), torch.empty_like(bias)
        for start in range(0, vocabulary, chunk):
            block = logits[:, start : start + chunk].sub_(log_normalizer).exp_()
            inside = ((targets >= start) & (targets < start + chunk)).nonzero().squeeze(1)
            block[inside, targets[inside] - start] -= 1
            grad_x.addmm_(block, weight[start : start + chunk])
            grad_weight[start : start + chunk] = (x.t() @ block).t()
            torch.sum(block, 0, out=grad_bias[start : start + chunk])
        ctx.save_for_backward(grad_x, grad_weight, grad_bias)
        return total.to(x.dtype)


def _step(loss: Callable[[], torch.Tensor], parameters: list[torch.Tensor], rows: int) -> Gradients:
    for parameter in parameters:
        parameter.grad = None
    (loss() / rows).backward()
    return tuple(parameter.grad for parameter in parameters)  # type: ignore[return-value]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=320, help="tokens per step (batch × BPTT)")
    parser.add_argument("--features", type=int, default=62, help="width of the layer's input")
    parser.add_argument("--vocab", type=int, default=33278)
    parser.add_argument("--token-chunks", type=int, nargs="+", default=[8, 32, 128])
    parser.add_argument("--vocab-chunks", type=int, nargs="+", default=[1024, 2048, 4096])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()

    generator = torch.Generator().manual_seed(0)
    x = torch.randn(args.rows, args.features, generator=generator).requires_grad_()
    weight = (torch.rand(args.vocab, args.features, generator=generator) * 0.2 - 0.1).requires_grad_()
    bias = (torch.rand(args.vocab, generator=generator) * 0.2 - 0.1).requires_grad_()
    targets = torch.randint(0, args.vocab, (args.rows,), generator=generator)
    parameters = [x, weight, bias]

    variants: dict[str, Callable[[], torch.Tensor]] = {
        "reference": lambda: F.cross_entropy(F.linear(x, weight, bias), targets, reduction="sum")
    }
    for chunk in args.token_chunks:
        variants[f"token chunks of {chunk}"] = lambda c=chunk: TokenChunks.apply(x, weight, bias, targets, c)
    for chunk in args.vocab_chunks:
        variants[f"vocabulary chunks of {chunk}"] = lambda c=chunk: VocabularyChunks.apply(
            x, weight, bias, targets, c
        )

    expected = _step(variants["reference"], parameters, args.rows)
    for name, loss in variants.items():
        got = _step(loss, parameters, args.rows)
        error = max(float((a - b).abs().max()) for a, b in zip(expected, got))
        if error > 1e-6:
            raise SystemExit(f"{name}: gradients differ from the reference by {error:.2e}")

    best = dict.fromkeys(variants, float("inf"))
    names = list(variants)
    for repeat in range(args.repeats):  # rotate the order so that machine noise hits all alike
        for name in names[repeat % len(names) :] + names[: repeat % len(names)]:
            started = time.perf_counter()
            _step(variants[name], parameters, args.rows)
            best[name] = min(best[name], time.perf_counter() - started)
    print(
        f"output layer + cross-entropy, forward and backward: {args.rows} x {args.features} -> "
        f"{args.vocab:,} words, torch {torch.__version__}, {torch.get_num_threads()} thread(s), "
        f"best of {args.repeats}"
    )
    print(f"\n{'variant':28s} {'ms':>8s} {'reference / variant':>20s}")
    for name in names:
        print(f"{name:28s} {best[name] * 1000:8.1f} {best['reference'] / best[name]:20.2f}")


if __name__ == "__main__":
    keep_freed_memory()  # as the CLI does
    main()
