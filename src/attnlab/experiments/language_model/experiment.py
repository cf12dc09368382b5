"""Language models with short attention spans (Daniluk et al. 2017): config, training, evaluation.

A word-level :class:`~attnlab.models.language_model.LanguageModel` (LSTM, attention, key-value,
key-value-predict or N-gram RNN) is trained on a corpus in the WikiText / PTB layout
(:mod:`attnlab.tasks.corpus`) with the procedure of §4.1: Adam 1e-3, batches of 64 streams,
gradient-norm clipping at 5, truncated BPTT over 20 steps with the LSTM state and the memory
carried from segment to segment and reset at document starts. After every epoch the validation
perplexity is computed (it chooses ``checkpoints/best.pt``); at the end the best checkpoint is
evaluated on the validation and test splits (perplexity, and the average attention weight per
window position for Figure 3b, in ``eval/attention.json``; the NLL of every sentence, in
``eval/<split>.sentences.csv``, for ``attnlab compare``) and, when CBT files are configured, on
the Children's Book Test (accuracy per word class, Figure 2d). The data config and its loading are
:mod:`attnlab.tasks.corpus_data`. ``attnlab generate`` samples text from a trained run, with the
attention of every generated word (:mod:`attnlab.evaluation.generation`).

Model size: ``model.hidden_dim`` fixes the LSTM size; ``model.parameter_budget`` (parameters
without the word embeddings) or ``model.match_lstm_hidden`` (the count of the LSTM baseline with
that hidden size, as in Figure 2c) picks it with
:func:`~attnlab.models.language_model.hidden_dim_for_budget` instead; set ``hidden_dim: null``
then. The resolved size is stored in the checkpoint's model spec.

Choices where the paper is silent: each document's first word is predicted from a fresh state with
``<eos>`` as input (so a document's likelihood depends only on itself); epochs and dropout are
configurable (defaults 20 and 0); batches are not shuffled (TBPTT reads each stream in order).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NamedTuple

import torch

from attnlab.config import ConfigError, from_dict, to_dict
from attnlab.evaluation.generation import as_text, generate_text
from attnlab.evaluation.perplexity import evaluate_cbt, evaluate_corpus, evaluate_perplexity, segment_loss
from attnlab.experiments.base import Capability, Evaluation, Experiment, GenerationRequest
from attnlab.experiments.driver import load_trained
from attnlab.experiments.runs import RunDirectory
from attnlab.experiments.unit_scores import SENTENCES_SUFFIX, write_sentence_losses
from attnlab.io import atomic_write_json
from attnlab.models.language_model import (
    LanguageModel,
    ModelState,
    hidden_dim_for_budget,
    model_summary,
    parameter_count,
)
from attnlab.tasks.corpus import (
    EncodedCorpus,
    LMBatch,
    Streams,
    find_split_files,
    segments,
    vocabulary_file_difference,
    write_vocabulary_file,
)
from attnlab.tasks.corpus_data import (
    LMDataConfig,
    absolute_data_paths,
    load_cbt,
    load_corpus_file,
    load_split,
    load_vocabulary,
    streams_for,
)
from attnlab.tasks.vocab import Vocabulary
from attnlab.training.checkpoint import (
    CheckpointError,
    check_model_spec,
    load_model_weights,
    load_system_checkpoint,
)
from attnlab.training.trainer import RunSummary, TrainingConfig

SYSTEM = "language_model/short_attention_spans"
EVALUATION_SPLITS = ("valid", "test")


@dataclass
class LMModelConfig:
    """See :class:`~attnlab.models.language_model.LanguageModel`; sizing in the module docstring."""

    variant: Literal["lstm", "attention", "key_value", "key_value_predict", "ngram"] = "lstm"
    window: int = 10
    ngram: int = 4
    embedding_dim: int = 300
    hidden_dim: int | None = 300
    parameter_budget: int | None = None
    match_lstm_hidden: int | None = None
    dropout: float = 0.0
    init_range: float = 0.1
    """Parameters start in U(-init_range, init_range) (§4.1); tiny models learn faster with ~0.5."""

    def __post_init__(self) -> None:
        sizes = [
            name for name in ("hidden_dim", "parameter_budget", "match_lstm_hidden") if getattr(self, name)
        ]
        if len(sizes) != 1:
            raise ValueError(
                "set exactly one of hidden_dim, parameter_budget and match_lstm_hidden (the others null); "
                f"got {sizes or 'none'}"
            )
        # checked here as well as by the model, which the sizing builds only after other checks fail
        for name, least in (("window", 1), ("ngram", 2), ("embedding_dim", 1)):
            if getattr(self, name) < least:
                raise ValueError(f"{name} must be >= {least}, got {getattr(self, name)}")
        for name in sizes:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")


@dataclass
class LMTrainingConfig(TrainingConfig):
    """The shared :class:`TrainingConfig` with §4.1's settings and the BPTT length."""

    epochs: int = 20
    batch_size: int = 64
    learning_rate: float = 1e-3
    gradient_clip: float | None = 5.0
    bptt: int = 20
    max_segments_per_epoch: int | None = None
    """Stop each epoch after this many segments (quick runs); null: the whole training split."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.bptt < 1:
            raise ValueError(f"bptt must be >= 1, got {self.bptt}")


@dataclass
class LMEvaluationConfig:
    batch_size: int = 64
    layout: Literal["auto", "contiguous", "documents"] = "auto"
    """Evaluation streams: ``documents`` gives every token its whole document as context."""
    checkpoint: Literal["best", "last"] = "best"

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")


@dataclass
class LMExperimentConfig:
    experiment: Literal["language_model"] = "language_model"
    data: LMDataConfig = field(default_factory=LMDataConfig)
    model: LMModelConfig = field(default_factory=LMModelConfig)
    training: LMTrainingConfig = field(default_factory=LMTrainingConfig)
    evaluation: LMEvaluationConfig = field(default_factory=LMEvaluationConfig)


# ---------------------------------------------------------------------------------- model


def resolve_hidden_dim(model: LMModelConfig, vocab_size: int) -> int:
    """The LSTM size: given, or chosen for the parameter budget (see the module docstring)."""
    options: dict[str, Any] = {"embedding_dim": model.embedding_dim, "window": model.window}
    if model.hidden_dim is not None:
        return model.hidden_dim
    budget = model.parameter_budget
    if budget is None:
        budget = parameter_count(vocab_size, variant="lstm", hidden_dim=model.match_lstm_hidden, **options)
    return hidden_dim_for_budget(budget, vocab_size, variant=model.variant, ngram=model.ngram, **options)


def build_model(model: LMModelConfig, vocab_size: int, hidden_dim: int) -> LanguageModel:
    try:
        return LanguageModel(
            vocab_size,
            variant=model.variant,
            embedding_dim=model.embedding_dim,
            hidden_dim=hidden_dim,
            window=model.window,
            ngram=model.ngram,
            dropout=model.dropout,
            init_range=model.init_range,
        )
    except ValueError as error:
        raise ConfigError(f"model: {error}") from None


def model_spec(model: LMModelConfig, vocabulary: Vocabulary, hidden_dim: int) -> dict[str, Any]:
    return {
        "system": SYSTEM,
        "model": to_dict(model),
        "hidden_dim": hidden_dim,
        "vocabularies": {"words": vocabulary.to_dict()},
    }


def model_from_checkpoint(
    path: Path, device: torch.device, expected: LMModelConfig | None = None
) -> tuple[LanguageModel, Vocabulary]:
    """Rebuild the model a checkpoint was written for; with ``expected``, it must be that model."""
    expected_model = None if expected is None else to_dict(expected)
    checkpoint, spec = load_system_checkpoint(path, SYSTEM, "language-model", expected_model, device)
    model_config = from_dict(LMModelConfig, spec["model"], f"{path}: model")
    vocabulary = Vocabulary.from_dict(spec["vocabularies"]["words"])
    model = build_model(model_config, len(vocabulary), int(spec["hidden_dim"]))
    check_model_spec(path, checkpoint, model_spec(model_config, vocabulary, int(spec["hidden_dim"])))
    load_model_weights(path, model, checkpoint)
    return model.to(device).eval(), vocabulary


# ------------------------------------------------------------------------------- training


class LMTrainingTask:
    """The :class:`~attnlab.training.trainer.TrainingTask` of truncated-BPTT language modelling.

    The model state (LSTM state and memory window) is carried, detached, from one training
    segment to the next and starts afresh every epoch; a checkpoint within an epoch stores it.
    """

    def __init__(self, train: Streams, valid: Streams, config: LMExperimentConfig, device: torch.device):
        self.train = train
        self.valid = valid
        self.config = config
        self.device = device
        self.state: ModelState | None = None

    def train_batches(self, generator: torch.Generator) -> Iterator[LMBatch]:
        self.state = None
        training = self.config.training
        for batch in segments(self.train, training.bptt, max_segments=training.max_segments_per_epoch):
            yield batch.to(self.device)

    def updates_per_epoch(self) -> int:
        """BPTT segments per epoch (all-padding segments, which are skipped, are rare)."""
        count = -(-self.train.length // self.config.training.bptt)
        cap = self.config.training.max_segments_per_epoch
        return count if cap is None else min(count, cap)

    def training_loss(self, model: torch.nn.Module, batch: LMBatch) -> torch.Tensor:
        output = model(batch.inputs, batch.resets, self.state, padding_mask=~batch.target_mask)
        self.state = LanguageModel.detach_state(output.state)
        nll, count = segment_loss(output.logits, batch)
        return nll / count

    def carried_state(self) -> dict[str, Any]:
        """The LSTM state and memory after the last segment (a checkpoint within an epoch)."""
        return {} if self.state is None else {"model_state": self.state}

    def restore_carried_state(self, state: dict[str, Any]) -> None:
        carried = state.get("model_state")
        self.state = None if carried is None else LanguageModel.move_state(carried, self.device)

    def validate(self, model: torch.nn.Module) -> dict[str, float]:
        metrics = evaluate_perplexity(model, segments(self.valid, self.config.training.bptt), self.device)  # type: ignore[arg-type]
        return {
            "loss": float(metrics["loss"]),
            "perplexity": float(metrics["perplexity"]),
        }

    def attention_samples(self, model: torch.nn.Module) -> dict[str, torch.Tensor]:
        """The window attention of the first validation stream over its first segment
        (TensorBoard images: rows = steps, columns = window positions, oldest first); none for
        the variants without attention (``lstm``, ``ngram``)."""
        batch = next(segments(self.valid, self.config.training.bptt), None)
        if batch is None:
            return {}
        batch = batch.to(self.device)
        output = model(batch.inputs, batch.resets, None, padding_mask=~batch.target_mask)
        return {} if output.attention is None else {"validation_stream_0": output.attention[0]}


# ----------------------------------------------------------------------------- experiment


@dataclass
class LMData:
    """A training run's data: the vocabulary, the train and valid splits, the LSTM size."""

    vocabulary: Vocabulary
    train: EncodedCorpus
    valid: EncodedCorpus
    hidden_dim: int


class LoadedLM(NamedTuple):
    """A checkpoint's model with its vocabulary."""

    model: LanguageModel
    vocabulary: Vocabulary
    checkpoint: Path


REPORTED_METRICS = ("loss", "perplexity", "tokens")
"""What training and evaluation return per split (``eval/<split>.json`` also has the attention
statistics)."""


class LanguageModelExperiment(Experiment[LMExperimentConfig, LMData, LoadedLM]):
    """Word-level language models on a WikiText / PTB corpus (and CBT); evaluates on given corpus
    files too, plots ``--steps`` words of a document, and generates text."""

    name = "language_model"
    label = "language-model"
    title = "Language models (WikiText, PTB; CBT)"
    config_type = LMExperimentConfig
    capabilities = frozenset({Capability.EVALUATE_FILES, Capability.PLOT_STEPS, Capability.GENERATE})

    def prepare_config(self, config: LMExperimentConfig) -> None:
        absolute_data_paths(config.data)

    def training_data(self, config: LMExperimentConfig, device: torch.device) -> LMData:
        find_split_files(config.data.corpus)  # every split is there before training starts
        load_cbt(config.data)  # and the CBT files parse
        vocabulary = load_vocabulary(config.data)
        train = load_split(config.data, "train", vocabulary)
        valid = load_split(config.data, "valid", vocabulary)
        return LMData(vocabulary, train, valid, resolve_hidden_dim(config.model, len(vocabulary)))

    def build_model(self, config: LMExperimentConfig, data: LMData) -> LanguageModel:
        return build_model(config.model, len(data.vocabulary), data.hidden_dim)

    def model_spec(self, config: LMExperimentConfig, data: LMData) -> dict[str, Any]:
        return model_spec(config.model, data.vocabulary, data.hidden_dim)

    def training_task(self, config: LMExperimentConfig, data: LMData, device: torch.device) -> LMTrainingTask:
        return LMTrainingTask(
            streams_for(data.train, data.vocabulary, config.training.batch_size, "contiguous"),
            streams_for(data.valid, data.vocabulary, config.evaluation.batch_size, config.evaluation.layout),
            config,
            device,
        )

    def run_summary(self, config: LMExperimentConfig, data: LMData) -> RunSummary:
        return RunSummary(
            f"language model on {config.data.corpus}: {config.model.variant}, window {config.model.window}",
            {"train": len(data.train), "valid": len(data.valid)},
            "tokens",
        )

    def on_training_start(self, run: RunDirectory, data: LMData) -> None:
        """``RUN_DIR/vocabulary.txt``: the run's vocabulary, one token per line."""
        write_vocabulary_file(run.path / "vocabulary.txt", data.vocabulary)

    def load_model(self, path: Path, device: torch.device, config: LMExperimentConfig) -> LoadedLM:
        return LoadedLM(*model_from_checkpoint(path, device, config.model), path)

    def test_sets(self, config: LMExperimentConfig, loaded: LoadedLM, device: torch.device) -> dict[str, Any]:
        """The valid and test splits, read with the checkpoint's vocabulary."""
        vocabulary = self._checked_vocabulary(config, loaded)
        return {split: load_split(config.data, split, vocabulary) for split in EVALUATION_SPLITS}

    def file_test_sets(
        self, config: LMExperimentConfig, loaded: LoadedLM, files: Sequence[str]
    ) -> dict[str, Any]:
        """Files in the corpus format, read like the run's corpus, with its vocabulary."""
        vocabulary = self._checked_vocabulary(config, loaded)
        return {Path(file).stem: load_corpus_file(config.data, file, vocabulary) for file in files}

    @staticmethod
    def _checked_vocabulary(config: LMExperimentConfig, loaded: LoadedLM) -> Vocabulary:
        """The checkpoint's vocabulary, which a configured vocabulary file must equal."""
        path = config.data.vocabulary_file
        difference = None if path is None else vocabulary_file_difference(path, loaded.vocabulary)
        if difference is not None:
            raise CheckpointError(
                f"{path} does not match the vocabulary of {loaded.checkpoint}: {difference}"
            )
        return loaded.vocabulary

    def evaluate_set(
        self, evaluation: Evaluation[LMExperimentConfig, LoadedLM], name: str, test_set: Any
    ) -> dict[str, Any]:
        """Perplexity and the attention per window position; ``<name>.sentences.csv`` (the NLL of
        every sentence)."""
        config, (model, vocabulary, _) = evaluation.config, evaluation.loaded
        streams = streams_for(test_set, vocabulary, config.evaluation.batch_size, config.evaluation.layout)
        split = segments(streams, config.training.bptt)
        metrics, sentences = evaluate_corpus(model, split, test_set, vocabulary.eos_id, evaluation.device)
        path = evaluation.run.evaluation_file(name, SENTENCES_SUFFIX, data_file=evaluation.data_file)
        write_sentence_losses(path, sentences)
        return metrics

    def reported_metrics(self, metrics: dict[str, Any]) -> dict[str, float]:
        return {key: metrics[key] for key in REPORTED_METRICS}

    def finish_evaluation(
        self, evaluation: Evaluation[LMExperimentConfig, LoadedLM], metrics: dict[str, dict[str, Any]]
    ) -> dict[str, dict[str, Any]]:
        """CBT accuracy per word class (returned); ``eval/attention.json`` (Figure 3b) and
        ``eval/model.json`` (the LSTM size, output parts and parameter count)."""
        run, (model, vocabulary, _) = evaluation.run, evaluation.loaded
        cbt = evaluate_cbt(model, vocabulary, load_cbt(evaluation.config.data), evaluation.device)
        attention = {
            name: {key: split[key] for key in ("attention_by_position", "attention_steps")}
            for name, split in metrics.items()
            if "attention_by_position" in split
        }
        if attention:
            atomic_write_json(run.eval_dir / "attention.json", {"window": model.window, **attention})
        atomic_write_json(run.eval_dir / "model.json", model_summary(model))
        return dict(cbt)

    def generate_text(self, run_dir: str | Path, request: GenerationRequest) -> dict[str, Any]:
        """:func:`attnlab.evaluation.generation.generate_text` with a trained run's model."""
        trained = load_trained(self, run_dir, request.device_name, request.checkpoint)
        model, vocabulary, _ = trained.loaded
        return generate_text(
            model,
            vocabulary,
            request.prompt,
            words=request.words,
            samples=request.samples,
            temperature=request.temperature,
            top_k=request.top_k,
            seed=request.seed,
            normalize_numbers=trained.config.data.normalize_numbers,
            device=trained.device,
        )

    def as_text(self, words: list[str]) -> str:
        return as_text(words)


EXPERIMENT = LanguageModelExperiment()
