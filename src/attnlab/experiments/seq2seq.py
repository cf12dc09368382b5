"""What the sequence-to-sequence experiments (:mod:`~attnlab.experiments.lookup`,
:mod:`~attnlab.experiments.scan`) share: a model spec that carries the source and target
vocabularies, and rebuilding a model from a checkpoint with such a spec."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import torch

from attnlab.config import from_dict, to_dict
from attnlab.tasks.vocab import Vocabulary
from attnlab.training.checkpoint import check_model_spec, load_model_weights, load_system_checkpoint

ModelConfigT = TypeVar("ModelConfigT")
ModelT = TypeVar("ModelT", bound=torch.nn.Module)


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
