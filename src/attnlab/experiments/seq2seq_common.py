"""What the sequence-to-sequence experiments (:mod:`~attnlab.experiments.lookup`,
:mod:`~attnlab.experiments.scan`) share: a model spec that carries the source and target
vocabularies, rebuilding a model from a checkpoint with such a spec, and the attention maps of a
few decoded examples (the trainer's TensorBoard images)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import torch

from attnlab.config import from_dict, to_dict
from attnlab.evaluation.seq2seq import decoding_budget
from attnlab.tasks.batching import EncodedDataset, collate
from attnlab.tasks.vocab import Vocabulary
from attnlab.training.checkpoint import check_model_spec, load_model_weights, load_system_checkpoint

ModelConfigT = TypeVar("ModelConfigT")
ModelT = TypeVar("ModelT", bound=torch.nn.Module)

ATTENTION_SAMPLES = 2
"""How many validation examples :func:`decoded_attention_samples` shows by default."""


def seq2seq_model_spec(system: str, model: Any, source: Vocabulary, target: Vocabulary) -> dict[str, Any]:
    """A checkpoint's model spec: the system, the model config (a dataclass) and both vocabularies."""
    return {
        "system": system,
        "model": to_dict(model),
        "vocabularies": {"source": source.to_dict(), "target": target.to_dict()},
    }


def seq2seq_from_checkpoint(
    path: Path,
    device: torch.device,
    expected: ModelConfigT | None,
    *,
    system: str,
    description: str,
    config_type: type[ModelConfigT],
    build_model: Callable[[ModelConfigT, Vocabulary, Vocabulary], ModelT],
) -> tuple[ModelT, Vocabulary, Vocabulary]:
    """Rebuild the model a ``system`` checkpoint was written for, in eval mode on ``device``.

    With ``expected`` (a model config), the checkpoint must be for that model. ``description``
    names the system in the error for a checkpoint of another one; ``build_model`` makes the model
    from its config and the source and target vocabularies.
    """
    expected_model = None if expected is None else to_dict(expected)
    checkpoint, spec = load_system_checkpoint(path, system, description, expected_model, device)
    model_config = from_dict(config_type, spec["model"], f"{path}: model")
    source = Vocabulary.from_dict(spec["vocabularies"]["source"])
    target = Vocabulary.from_dict(spec["vocabularies"]["target"])
    model = build_model(model_config, source, target)
    check_model_spec(path, checkpoint, seq2seq_model_spec(system, model_config, source, target))
    load_model_weights(path, model, checkpoint)
    return model.to(device).eval(), source, target


@torch.no_grad()
def decoded_attention_samples(
    model: Any,
    dataset: EncodedDataset,
    device: torch.device,
    max_length: int | None,
    *,
    count: int = ATTENTION_SAMPLES,
    prefix: str = "validation",
) -> dict[str, torch.Tensor]:
    """The greedy decoding's attention on the first ``count`` examples of ``dataset``.

    ``<prefix>_<i>`` → ``[decoded steps (<eos> included), source length]`` weights of example
    ``i`` (plus the columns a model appends to every source, e.g. Syntactic Attention's end
    marker), for the trainer's optional ``attention_samples`` hook. ``model`` is any seq2seq model
    with ``greedy_decode(source, padding_mask, max_length)`` returning ``tokens`` and ``attention``;
    ``max_length=None`` decodes up to ``2·S + 10`` tokens.
    """
    rows = list(range(min(count, len(dataset))))
    if not rows:
        return {}
    batch = collate(dataset, rows).to(device)
    budget = decoding_budget(batch.source.size(1), max_length)
    decoded = model.greedy_decode(batch.source, batch.source_padding_mask, budget)
    samples = {}
    appended = decoded.attention.size(-1) - batch.source.size(1)
    for row in rows:
        tokens = decoded.tokens[row].tolist()
        steps = tokens.index(model.eos_id) + 1 if model.eos_id in tokens else len(tokens)
        source_length = int((~batch.source_padding_mask[row]).sum()) + appended
        samples[f"{prefix}_{row}"] = decoded.attention[row, :steps, :source_length]
    return samples
