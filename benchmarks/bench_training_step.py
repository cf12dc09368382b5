"""CPU time of one training update (loss, backward, optimiser step) of config variants, side by side.

Each variant is a config plus ``key=value`` overrides. The script builds every variant's model,
data and training task the way ``attnlab train`` does (:func:`attnlab.experiments.registry.experiment_for`),
then times rounds of ``--updates`` updates on each in turn (interleaved, so that a change in the
machine's load falls on all of them) and prints the best round's CPU seconds per update and each
variant's ratio to the first. One thread, as the campaigns run.

Usage::

    .venv/bin/python benchmarks/bench_training_step.py --config scan_transformer \\
        --variant "dot: model.transformer.cross_attention=dot" \\
        --variant "shift: model.transformer.cross_attention=shift" [--updates 20] [--rounds 3] [key=value ...]

Overrides after the options apply to every variant. A variant is ``NAME: key=value key=value``;
``training.precision=bf16`` runs its forward passes under bfloat16 autocast, as the trainer does, e.g.::

    .venv/bin/python benchmarks/bench_training_step.py --config scan_transformer \
        --variant "fp32: " --variant "bf16: training.precision=bf16"

``--compiled NAME`` runs that variant's model through ``torch.compile(model, dynamic=True)``; its
warm-up is then a whole round, so that compiling (for every batch shape) is not timed.
``--shift-heads-apart NAME`` runs that variant's Transformer Shift Attender heads one call per head
(as before session 43) instead of together (:func:`attnlab.attention.shift.attend_heads`), e.g.::

    .venv/bin/python benchmarks/bench_training_step.py --config scan_transformer \
        --variant "together: model.transformer.cross_attention=shift" \
        --variant "apart: model.transformer.cross_attention=shift" --shift-heads-apart apart data.split=length

``--relative-per-pair NAME`` gives that variant's relative (Shaw) self-attention the bias as it was
computed before session 43, from a ``[B, Q, K, D]`` tensor of each pair's distance embedding,
instead of each query's scores against the table of distances.

``--xl-queries-projected NAME`` gives that variant's Transformer-XL self-attention its position term
as it was computed before session 62: each query projected into the encodings' width,
``(W_R,h^T (q_i + v_h))^T R``, instead of the encodings projected into the heads',
``(q_i + v_h)^T (W_R R)``; the same scores, e.g.::

    .venv/bin/python benchmarks/bench_training_step.py --config scan_transformer_csordas2021 \
        --variant "encodings projected: " --variant "queries projected: " \
        --xl-queries-projected "queries projected" model.transformer.universal=true
"""

from __future__ import annotations

import argparse
import math
import shlex
import time
import types
from dataclasses import dataclass
from typing import Any

import torch

from attnlab.attention.positions import (
    SelfAttentionPositions,
    distinct_offsets,
    pair_scores,
    sinusoidal_encoding,
)
from attnlab.experiments.registry import experiment_for, resolve_config
from attnlab.models.transformer import CrossAttention
from attnlab.training.trainer import make_optimizer, training_autocast
from bench_relative_bias import per_pair_relative_bias


@dataclass
class Variant:
    name: str
    model: torch.nn.Module
    task: Any
    optimizer: torch.optim.Optimizer
    batches: list[Any]
    precision: str = "fp32"


def built(config_name: str, overrides: list[str]) -> tuple[Any, Any, Any, torch.nn.Module]:
    """The experiment, config, prepared data and model (seed 0) of a config, on the CPU, as
    ``attnlab train`` builds them."""
    data = resolve_config(config_name, overrides)
    experiment = experiment_for(data)
    config = experiment.parse_config(data)
    experiment.prepare_config(config)
    prepared = experiment.training_data(config, torch.device("cpu"))
    torch.manual_seed(0)
    return experiment, config, prepared, experiment.build_model(config, prepared)


def build(name: str, config_name: str, overrides: list[str], updates: int) -> Variant:
    experiment, config, prepared, model = built(config_name, overrides)
    model.train()
    task = experiment.training_task(config, prepared, torch.device("cpu"))
    generator = torch.Generator().manual_seed(0)
    batches = []
    for batch in task.train_batches(generator):
        batches.append(batch)
        if len(batches) == updates:
            break
    optimizer = make_optimizer(model, 1e-4)  # the trainer's Adam
    return Variant(name, model, task, optimizer, batches, config.training.precision)


def one_round(variant: Variant) -> float:
    """CPU seconds per update over the variant's batches."""
    start = time.process_time()
    for batch in variant.batches:
        variant.optimizer.zero_grad(set_to_none=True)
        with training_autocast(variant.precision, torch.device("cpu")):  # as the trainer
            loss = variant.task.training_loss(variant.model, batch)
        loss.backward()
        variant.optimizer.step()
    return (time.process_time() - start) / len(variant.batches)


def run_shift_heads_apart(model: torch.nn.Module) -> None:
    """Make every Transformer cross-attention layer of ``model`` call its Shift Attender heads one
    by one (each head's own ``forward``, the same numbers) instead of together."""
    layers = [module for module in model.modules() if isinstance(module, CrossAttention)]
    if not any(layer.shift_heads for layer in layers):
        raise SystemExit("--shift-heads-apart: the variant's model runs no Shift Attender heads together")
    for layer in layers:
        layer.call_heads_one_by_one()


def use_per_pair_relative_bias(model: torch.nn.Module) -> None:
    """Give every relative (Shaw) self-attention layer of ``model`` :func:`per_pair_relative_bias`."""
    layers = [m for m in model.modules() if isinstance(m, SelfAttentionPositions) and m.relative is not None]
    if not layers:
        raise SystemExit("--relative-per-pair: the variant's model has no relative self-attention")
    for layer in layers:
        layer._relative_bias = types.MethodType(per_pair_relative_bias, layer)  # type: ignore[method-assign]


def queries_projected_transformer_xl_bias(
    scheme: SelfAttentionPositions,
    query: torch.Tensor,
    query_positions: torch.Tensor,
    key_positions: torch.Tensor,
    keys: torch.Tensor,
) -> torch.Tensor:
    """Dai et al.'s ``u^T k_j + (q_i + v)^T W_R R_{i-j}`` (scaled) as attnlab computed it before
    session 62: each query projected into the encodings' width, then scored against them."""
    heads, dim = scheme.content_bias.shape
    content = torch.einsum("hd,bhkd->bhk", scheme.content_bias, keys).unsqueeze(2)
    distinct, index = distinct_offsets(query_positions, key_positions, query.dtype)
    weight = scheme.position_layer.weight.view(heads, dim, scheme.encoding_dim)
    projected = torch.einsum("bhqd,hde->bhqe", query + scheme.position_bias.unsqueeze(1), weight)
    by_offset = projected @ sinusoidal_encoding(distinct, scheme.encoding_dim).T  # [B, H, Q, N]
    return (content + pair_scores(by_offset, index)) / math.sqrt(dim)


def use_queries_projected_transformer_xl_bias(model: torch.nn.Module) -> None:
    """Give every Transformer-XL self-attention layer of ``model``
    :func:`queries_projected_transformer_xl_bias`."""
    layers = [
        m for m in model.modules() if isinstance(m, SelfAttentionPositions) and m.scheme == "transformer_xl"
    ]
    if not layers:
        raise SystemExit("--xl-queries-projected: the variant's model has no Transformer-XL self-attention")
    heads, dim = layers[0].content_bias.shape
    query, keys = torch.randn(2, heads, 7, dim), torch.randn(2, heads, 9, dim)
    positions = torch.arange(9.0).expand(2, 9)
    torch.testing.assert_close(  # the same scores as the layer's own
        queries_projected_transformer_xl_bias(layers[0], query, positions[:, 2:], positions, keys),
        layers[0].score_bias(query, positions[:, 2:], positions, keys),
    )
    for layer in layers:
        layer._transformer_xl_bias = types.MethodType(  # type: ignore[method-assign]
            queries_projected_transformer_xl_bias, layer
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", required=True)
    parser.add_argument("--variant", action="append", required=True, help="'NAME: key=value ...'")
    parser.add_argument("--updates", type=int, default=20, help="updates in one timed round")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; the best is reported")
    parser.add_argument(
        "--compiled", action="append", default=[], help="a variant NAME to run through torch.compile"
    )
    parser.add_argument(
        "--shift-heads-apart",
        action="append",
        default=[],
        help="a variant NAME whose Transformer Shift Attender heads run one call per head",
    )
    parser.add_argument(
        "--relative-per-pair",
        action="append",
        default=[],
        help="a variant NAME whose relative self-attention builds each pair's distance embedding",
    )
    parser.add_argument(
        "--xl-queries-projected",
        action="append",
        default=[],
        help="a variant NAME whose Transformer-XL self-attention projects the queries, not the encodings",
    )
    parser.add_argument("overrides", nargs="*", help="key=value for every variant")
    args = parser.parse_args()
    torch.set_num_threads(1)
    variants = []
    for spec in args.variant:
        name, _, rest = spec.partition(":")
        variants.append(build(name.strip(), args.config, args.overrides + shlex.split(rest), args.updates))
    for option, names in (
        ("--compiled", args.compiled),
        ("--shift-heads-apart", args.shift_heads_apart),
        ("--relative-per-pair", args.relative_per_pair),
        ("--xl-queries-projected", args.xl_queries_projected),
    ):
        unknown = sorted(set(names) - {variant.name for variant in variants})
        if unknown:
            parser.error(f"{option} names no variant: {', '.join(unknown)}")
    for variant in variants:
        if variant.name in args.shift_heads_apart:
            run_shift_heads_apart(variant.model)
        if variant.name in args.relative_per_pair:
            use_per_pair_relative_bias(variant.model)
        if variant.name in args.xl_queries_projected:
            use_queries_projected_transformer_xl_bias(variant.model)
    for variant in variants:  # warm-up: first calls allocate and pick kernels (and compile)
        if variant.name in args.compiled:
            variant.model = torch.compile(variant.model, dynamic=True)  # type: ignore[assignment]
            one_round(variant)
        else:
            short = Variant(variant.name, variant.model, variant.task, variant.optimizer, variant.batches[:2])
            one_round(short)
    best = {variant.name: float("inf") for variant in variants}
    for _ in range(args.rounds):
        for variant in variants:
            best[variant.name] = min(best[variant.name], one_round(variant))
    first = best[variants[0].name]
    print(f"{args.config}, {args.updates} updates a round, best of {args.rounds} rounds, one thread")
    print(f"{'variant':<24} {'CPU-s / update':>15} {'× first':>8}")
    for variant in variants:
        print(f"{variant.name:<24} {best[variant.name]:>15.4f} {best[variant.name] / first:>8.2f}")


if __name__ == "__main__":
    main()
