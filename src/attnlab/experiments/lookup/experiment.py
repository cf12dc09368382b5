"""The Lookup Tables experiment (Dubois et al. 2020): config, model, training and evaluation.

Data come either from a generator — attnlab's own protocol (:mod:`attnlab.tasks.lookup`, Long /
Reversed / Noisy-start Lookup Tables with interpolation and ``long1`` … ``long5`` test sets, the
default) or the machine-tasks ``LongLookupTables`` protocol the paper's data were made with
(:mod:`attnlab.tasks.lookup_machine_tasks`, ``data.protocol=machine_tasks``) — or from files in
the public machine-tasks TSV format (:mod:`attnlab.tasks.tsv`); the ``data:`` config and what it
reads are :mod:`attnlab.tasks.lookup_data`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch

from attnlab.attention.registry import attender_options
from attnlab.config import ConfigError
from attnlab.evaluation.seq2seq import (
    decode_within_budget,
    evaluate_seq2seq,
    targets_past_the_budget,
    teacher_forced_loss,
)
from attnlab.experiments.base import Capability, Evaluation
from attnlab.experiments.seq2seq_common import (
    Seq2SeqData,
    Seq2SeqExperiment,
    TransformerModelConfig,
    build_transformer,
    changed_options,
    check_architecture_options,
    decoded_attention_samples,
    describe_transformer,
    evaluate_with_predictions,
)
from attnlab.models.seq2seq import RecurrentSeq2Seq, Seq2SeqOutput
from attnlab.models.transformer import TransformerSeq2Seq
from attnlab.tasks.batching import EncodedDataset, batches, encode_examples
from attnlab.tasks.examples import Seq2SeqBatch
from attnlab.tasks.lookup_data import LookupDataConfig, encode_split, load_splits, test_set_names
from attnlab.tasks.tsv import read_tsv
from attnlab.tasks.vocab import Vocabulary, build_vocabularies
from attnlab.training.trainer import RunSummary, TrainingConfig

logger = logging.getLogger(__name__)

SYSTEM = "lookup/recurrent_seq2seq"


@dataclass
class Seq2SeqModelConfig:
    """The recurrent seq2seq of §6.3 (see :class:`attnlab.models.seq2seq.RecurrentSeq2Seq`), or with
    ``architecture: transformer`` a Transformer whose options are under ``transformer``
    (:class:`~attnlab.experiments.seq2seq_common.TransformerModelConfig`; the recurrent options
    do not apply to it; its location attenders are ``transformer.cross_attention``)."""

    architecture: Literal["recurrent", "transformer"] = "recurrent"
    attender: str = "mix"
    attender_options: dict[str, Any] = field(default_factory=dict)
    embedding_dim: int = 64
    hidden_dim: int = 128
    bottleneck_dropout: float = 0.5
    residual: bool = True
    encoder: str = "gru"
    encoder_window: int = 3
    encoder_context: str = "none"
    encoder_values: str = "outputs"
    decoder_recurrence: bool = True
    input_feeding: bool = False
    prediction: str = "state"
    transformer: TransformerModelConfig = field(default_factory=TransformerModelConfig)

    def __post_init__(self) -> None:
        recurrent = [name for name in changed_options(self) if name not in ("architecture", "transformer")]
        check_architecture_options(self.architecture, self.transformer, recurrent)
        attender_options(self.attender)  # an unknown name fails here, before a sweep starts its runs
        for name in ("embedding_dim", "hidden_dim", "encoder_window"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 0 <= self.bottleneck_dropout < 1:
            raise ValueError(f"bottleneck_dropout must be in [0, 1), got {self.bottleneck_dropout}")
        if self.transformer.end_marker:
            raise ValueError(
                "transformer.end_marker is for sources without an end token (SCAN); a Lookup Tables "
                "source ends in '.', and the gold attention has no column for a marker after it"
            )


@dataclass
class Seq2SeqTrainingConfig(TrainingConfig):
    """:class:`TrainingConfig` plus the seq2seq experiments' optional attention supervision."""

    attention_guidance: float = 0.0
    """Weight of the attentive-guidance loss (Hupkes et al. 2018) added to the token loss: the
    cross-entropy of the data's gold attention (Dubois et al. 2020, Tables 1–2) under the model's
    attention. 0 (the default, and the paper's setting) trains without attention supervision."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.attention_guidance < 0:
            raise ValueError(f"attention_guidance must be >= 0, got {self.attention_guidance}")


@dataclass
class EvaluationConfig:
    batch_size: int = 500
    max_length: int | None = None
    """Greedy decoding budget in tokens, ``<eos>`` included; ``null``: twice the source length
    plus 10 (:func:`~attnlab.evaluation.seq2seq.decoding_budget`)."""
    checkpoint: Literal["best", "last"] = "best"

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.max_length is not None and self.max_length < 1:
            raise ValueError(f"max_length must be >= 1 or null (the default budget), got {self.max_length}")


@dataclass
class LookupExperimentConfig:
    experiment: Literal["lookup"] = "lookup"
    data: LookupDataConfig = field(default_factory=LookupDataConfig)
    model: Seq2SeqModelConfig = field(default_factory=Seq2SeqModelConfig)
    training: Seq2SeqTrainingConfig = field(default_factory=Seq2SeqTrainingConfig)
    evaluation: EvaluationConfig = field(default_factory=EvaluationConfig)


# ---------------------------------------------------------------------------------- model


LookupModel = RecurrentSeq2Seq | TransformerSeq2Seq


def build_model(model: Seq2SeqModelConfig, source: Vocabulary, target: Vocabulary) -> LookupModel:
    try:
        if model.architecture == "transformer":
            return build_transformer(model.transformer, source, target)
        return RecurrentSeq2Seq(
            len(source),
            len(target),
            attender=model.attender,
            attender_options=model.attender_options,
            embedding_dim=model.embedding_dim,
            hidden_dim=model.hidden_dim,
            bottleneck_dropout=model.bottleneck_dropout,
            residual=model.residual,
            encoder=model.encoder,
            encoder_window=model.encoder_window,
            encoder_context=model.encoder_context,
            encoder_values=model.encoder_values,
            decoder_recurrence=model.decoder_recurrence,
            input_feeding=model.input_feeding,
            prediction=model.prediction,
            pad_id=target.pad_id,
            sos_id=target.sos_id,
            eos_id=target.eos_id,
        )
    except ValueError as error:
        raise ConfigError(f"model: {error}") from None


def model_from_checkpoint(
    path: Path, device: torch.device, expected: Seq2SeqModelConfig | None = None
) -> tuple[LookupModel, Vocabulary, Vocabulary]:
    """Rebuild the model a checkpoint was written for; with ``expected``, it must be that model."""
    return EXPERIMENT.model_from_checkpoint(path, device, expected)


# ------------------------------------------------------------------------------- training


class LookupTrainingTask:
    """The :class:`~attnlab.training.trainer.TrainingTask` of the seq2seq experiments."""

    def __init__(self, train: Any, validation: Any, config: LookupExperimentConfig, device: torch.device):
        self.train = train
        self.validation = validation
        self.config = config
        self.device = device

    def train_batches(self, generator: torch.Generator):
        for batch in batches(self.train, self.config.training.batch_size, shuffle=True, generator=generator):
            yield batch.to(self.device)

    def updates_per_epoch(self) -> int:
        return -(-len(self.train) // self.config.training.batch_size)

    def training_loss(self, model: torch.nn.Module, batch: Seq2SeqBatch) -> torch.Tensor:
        return teacher_forced_loss(model, batch, self.config.training.attention_guidance)  # type: ignore[arg-type]

    def validate(self, model: torch.nn.Module) -> dict[str, float]:
        metrics = evaluate_seq2seq(
            model,  # type: ignore[arg-type]
            batches(self.validation, self.config.evaluation.batch_size, shuffle=False),
            self.device,
            max_length=self.config.evaluation.max_length,
        )
        return {
            "loss": metrics["loss"],
            "seq_acc": metrics["seq_acc"],
            **({"attn_loss": metrics["attn_loss"]} if "attn_loss" in metrics else {}),
        }

    def attention_samples(self, model: torch.nn.Module) -> dict[str, torch.Tensor]:
        """The decoded attention of the first validation examples (TensorBoard images)."""
        return decoded_attention_samples(
            model, self.validation, self.device, self.config.evaluation.max_length
        )


def describe(config: LookupExperimentConfig) -> str:
    """What a run trains, in a few words (the first line of its log)."""
    data = config.data
    source = f"files ({data.train_file})" if data.train_file else f"{data.variant} Lookup Tables (generated)"
    model = config.model
    if model.architecture == "transformer":
        return f"lookup on {source}: {describe_transformer(model.transformer)}"
    return f"lookup on {source}: recurrent seq2seq, attender {model.attender}"


# ----------------------------------------------------------------------------- experiment


LookupData = Seq2SeqData[EncodedDataset]
"""A training run's data: every split encoded with the training set's vocabularies."""
LoadedLookup = tuple[LookupModel, Vocabulary, Vocabulary]


class LookupExperiment(Seq2SeqExperiment[LookupExperimentConfig, EncodedDataset, LookupModel]):
    """Lookup Tables (generated or machine-tasks TSV files) with a seq2seq model; evaluates on
    given TSV files too."""

    name = "lookup"
    label = "Lookup Tables"
    title = "Lookup Tables and other machine tasks (sequence to sequence)"
    config_type = LookupExperimentConfig
    capabilities = frozenset({Capability.EVALUATE_FILES, Capability.TRANSLATE})
    system = SYSTEM
    description = "Lookup Tables seq2seq"
    model_config_type = Seq2SeqModelConfig

    def training_data(self, config: LookupExperimentConfig, device: torch.device) -> LookupData:
        splits = load_splits(config.data)
        source, target = build_vocabularies(splits["train"])
        encoded = {
            name: encode_split(config.data, name, examples, source, target)
            for name, examples in splits.items()
        }
        if config.training.attention_guidance > 0 and encoded["train"].gold_attention is None:
            where = config.data.train_file or "the generated training set"
            raise ConfigError(
                f"training.attention_guidance={config.training.attention_guidance} needs gold attention, "
                f"and {where} has none (machine-tasks files give it as a third column)"
            )
        return Seq2SeqData(encoded, source, target)

    def build_seq2seq(self, model: Seq2SeqModelConfig, source: Vocabulary, target: Vocabulary) -> LookupModel:
        return build_model(model, source, target)

    def test_set_names(self, config: LookupExperimentConfig) -> list[str]:
        return test_set_names(config.data)

    def decode(
        self,
        model: LookupModel,
        source: torch.Tensor,
        source_padding_mask: torch.Tensor,
        config: LookupExperimentConfig,
    ) -> Seq2SeqOutput:
        """As :func:`~attnlab.evaluation.seq2seq.evaluate_seq2seq` decodes: at most
        ``evaluation.max_length`` tokens, by default a budget of the source's length."""
        return decode_within_budget(model, source, source_padding_mask, config.evaluation.max_length)

    def encoded_dataset(self, split: EncodedDataset) -> EncodedDataset:
        return split

    def training_task(
        self, config: LookupExperimentConfig, data: LookupData, device: torch.device
    ) -> LookupTrainingTask:
        return LookupTrainingTask(data.encoded["train"], data.encoded["validation"], config, device)

    def run_summary(self, config: LookupExperimentConfig, data: LookupData) -> RunSummary:
        return RunSummary(
            describe(config), {name: len(data.encoded[name]) for name in ("train", "validation")}
        )

    def test_sets(
        self, config: LookupExperimentConfig, loaded: LoadedLookup, device: torch.device
    ) -> dict[str, Any]:
        _, source, target = loaded
        splits = load_splits(config.data)
        names = test_set_names(config.data)
        return {name: encode_split(config.data, name, splits[name], source, target) for name in names}

    def file_test_sets(
        self, config: LookupExperimentConfig, loaded: LoadedLookup, files: Sequence[str]
    ) -> dict[str, Any]:
        """Machine-tasks TSV files, read with the run's vocabularies."""
        _, source, target = loaded
        return {
            Path(path).stem: encode_examples(
                read_tsv(path), source, target, where_prefix=path, item_name="line"
            )
            for path in files
        }

    def evaluate_set(
        self, evaluation: Evaluation[LookupExperimentConfig, LoadedLookup], name: str, test_set: Any
    ) -> dict[str, Any]:
        """seqAcc, seqAccBE, loss (and attnLoss with gold attention); ``<name>.predictions.tsv``."""
        options = evaluation.config.evaluation
        too_long = targets_past_the_budget(test_set) if options.max_length is None else 0
        if too_long:
            logger.warning(
                "%s: %d of %d targets are longer than the decoding budget of their source (2 × its "
                "length + 10), so they cannot be right; set evaluation.max_length",
                name,
                too_long,
                len(test_set),
            )
        return evaluate_with_predictions(
            evaluation,
            name,
            test_set,
            lambda outcomes: evaluate_seq2seq(
                evaluation.loaded[0],
                batches(test_set, options.batch_size, shuffle=False),
                evaluation.device,
                max_length=options.max_length,
                outcomes=outcomes,
            ),
        )


EXPERIMENT = LookupExperiment()
