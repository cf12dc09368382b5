"""The SCAN experiment (Russin et al. 2019; Lake & Baroni 2018) and its English–French variant.

Config → data → model → trainer → metrics:

* **data** (:class:`~attnlab.tasks.scan_data.ScanDataConfig`, :mod:`attnlab.tasks.scan_data`): a
  public SCAN split read from its files, the same split built by the generator, a custom generated
  split, or any ``IN: … OUT: …`` files (``split: files``, e.g. the English–French set), with 20% of
  the training set held out for early stopping: ``checkpoints/best.pt`` has the lowest validation
  loss and training stops after ``training.patience`` epochs without improvement.
* **model** (:class:`ScanModelConfig`): Syntactic Attention with its two ablations, or the GRU +
  attention baselines with or without the dependency on the previous action
  (:mod:`attnlab.models.syntactic_attention`), or a Transformer (``architecture: transformer``,
  options under ``model.transformer``; :mod:`attnlab.models.transformer`).
* **metrics** per test set (:func:`attnlab.evaluation.seq2seq.evaluate_split`): ``seq_acc``,
  ``seq_acc_given_length`` (``evaluation.given_length``), ``loss``, ``bleu``
  (``evaluation.bleu: true``) and, with ``data.unknown_words: unk``, the number of source / target
  words read as ``<unk>`` (with ``error``, such a word is an error naming the file and line); on a
  length split also the exact match of the commands with a sentence longer than every training
  output and of the others (:func:`sentence_length_metrics`).

Batches are bucketed by target length (``training.bucket_by_length``,
:func:`attnlab.tasks.batching.bucketed_batches`): each epoch's shuffled order is cut into pools of
``bucket_pool`` batches, each pool is sorted by target length and cut into batches, and the batches
are shuffled; everything is drawn from the trainer's per-epoch generator, so resumed runs stay
exact.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch

from attnlab.config import ConfigError
from attnlab.evaluation.seq2seq import (
    ExampleOutcomes,
    decode_greedily,
    evaluate_split,
    teacher_forced_loss,
    validate_split,
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
from attnlab.experiments.unit_scores import dataset_texts
from attnlab.models.gru_attention import GRUAttentionSeq2Seq
from attnlab.models.seq2seq import Seq2SeqOutput
from attnlab.models.stepwise import StepwiseSeq2Seq, check_stop_threshold
from attnlab.models.syntactic_attention import SyntacticAttentionSeq2Seq
from attnlab.tasks import scan
from attnlab.tasks.batching import EncodedDataset, batches, bucketed_batches
from attnlab.tasks.examples import Seq2SeqBatch
from attnlab.tasks.scan_data import (
    EncodedSplit,
    ScanDataConfig,
    Split,
    build_vocabularies,
    encode_split,
    load_splits,
    test_set_names,
)
from attnlab.tasks.vocab import Vocabulary
from attnlab.training.trainer import RunSummary, TrainingConfig

SYSTEM = "scan/seq2seq"
logger = logging.getLogger(__name__)

SENTENCE_LENGTH_METRICS: tuple[str, ...] = ("seq_acc", "seq_acc_given_length")
"""The verdicts :func:`sentence_length_metrics` splits by the longest sentence."""


@dataclass
class ScanModelConfig:
    """Syntactic Attention (paper sizes), the GRU + attention baseline or a Transformer (``architecture``).

    ``translation_encoder`` (``linear`` | ``rnn``) and ``translate_from_context`` are the two
    ablations of Russin et al.'s Table 2 (Syntactic Attention only); ``previous_output: false``
    is Bastings et al.'s "−dep" (GRU baseline only). ``end_marker`` (append an end-of-command
    word the alignment can attend; its translation is read out as ``<eos>``) and
    ``stop_from_attention`` (``p(<eos>)`` = the attention on that end marker; needs
    ``end_marker``) are the stop mechanisms of issue 29 (Syntactic Attention, see
    :mod:`attnlab.models.syntactic_attention`; and the GRU baseline, issue 28).
    ``attender`` and ``attender_options`` (GRU baseline only) replace its additive attention by
    any attnlab attender: ``attender: shift`` is the recurrent Shift Attender on SCAN
    (:mod:`attnlab.models.gru_attention`); ``decoder_cell: lstm`` makes its decoder an LSTM, whose
    cell can count without bound (same module). ``alignment_word_dropout`` (a probability in
    [0, 1); Syntactic Attention only) reads a word never seen composed in training as a learned
    unknown word in the alignment stream
    (:class:`~attnlab.attention.syntactic.ComposedWordEmbedding`); ``alignment_peers`` reads it,
    when it was seen as a one-word command, as the mean of the words seen both alone and composed
    (add-jump: "jump" as "walk", "run", "look"; with or without the word dropout).
    ``decoder_init`` (``summary`` | ``learned``; Syntactic Attention only) is where the decoder
    starts: from the command's final encoder states (the authors' code) or from one learned state
    for every command (issue 29: turn-left's "… after turn left" with the end marker). All default
    to the paper's model.
    ``transformer`` holds the Transformer's own options
    (:class:`~attnlab.experiments.seq2seq_common.TransformerModelConfig`: ``positional``,
    ``cross_attention``, sizes, its own ``dropout``); the recurrent sizes and ``dropout`` above
    do not apply to it.
    """

    architecture: Literal["syntactic_attention", "gru_attention", "transformer"] = "syntactic_attention"
    embedding_dim: int = 120
    encoder_hidden_dim: int = 200
    encoder_layers: int = 2
    decoder_hidden_dim: int = 400
    dropout: float = 0.5
    translation_encoder: Literal["linear", "rnn"] = "linear"
    translate_from_context: bool = False
    previous_output: bool = True
    attender: str = "additive"
    attender_options: dict[str, Any] = field(default_factory=dict)
    decoder_cell: Literal["gru", "lstm"] = "gru"
    transformer: TransformerModelConfig = field(default_factory=TransformerModelConfig)
    end_marker: bool = False
    stop_from_attention: bool = False
    alignment_word_dropout: float = 0.0
    alignment_peers: bool = False
    decoder_init: Literal["summary", "learned"] = "summary"

    def __post_init__(self) -> None:
        recurrent = changed_options(
            self, ("embedding_dim", "encoder_hidden_dim", "encoder_layers", "decoder_hidden_dim", "dropout")
        )
        check_architecture_options(self.architecture, self.transformer, recurrent)
        if self.architecture != "syntactic_attention" and (
            self.translation_encoder != "linear"
            or self.translate_from_context
            or self.alignment_word_dropout
            or self.alignment_peers
            or self.decoder_init != "summary"
        ):
            raise ValueError(
                "translation_encoder / translate_from_context / alignment_word_dropout / alignment_peers / "
                "decoder_init apply to syntactic_attention only"
            )
        if self.architecture == "transformer" and (self.end_marker or self.stop_from_attention):
            raise ValueError(
                "end_marker / stop_from_attention apply to syntactic_attention and gru_attention; the "
                "Transformer's are transformer.end_marker / transformer.stop_from_attention"
            )
        if self.architecture != "gru_attention" and changed_options(
            self, ("attender", "attender_options", "decoder_cell")
        ):
            raise ValueError(
                "attender / attender_options / decoder_cell apply to gru_attention only (Syntactic "
                "Attention's alignment and decoder are its own; the Transformer's heads are "
                "transformer.cross_attention, its recurrence transformer.decoder_recurrence)"
            )
        if self.transformer.stop_from_attention and not self.transformer.end_marker:
            raise ValueError(
                "transformer.stop_from_attention reads the stop from the attention on the source's last "
                "token, which must be an end token; a SCAN command ends in a word, so it needs "
                "transformer.end_marker: true"
            )
        if not 0 <= self.alignment_word_dropout < 1:
            raise ValueError(f"alignment_word_dropout must be in [0, 1), got {self.alignment_word_dropout}")
        if self.stop_from_attention and not self.end_marker:
            raise ValueError(
                "stop_from_attention needs end_marker: true (p(<eos>) is the attention on the end marker)"
            )
        if self.architecture != "gru_attention" and not self.previous_output:
            raise ValueError(
                "previous_output applies to gru_attention only (the Syntactic Attention decoder never "
                "reads its previous output; the Transformer always does)"
            )
        if not 0 <= self.dropout < 1:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")


@dataclass
class ScanTrainingConfig(TrainingConfig):
    """The shared :class:`TrainingConfig` plus early stopping and length bucketing."""

    epochs: int = 50
    batch_size: int = 64
    learning_rate: float = 1e-3
    gradient_clip: float | None = 5.0
    patience: int | None = 10
    bucket_by_length: bool = True
    bucket_pool: int = 50
    """Batches per pool sorted by target length (with ``bucket_by_length``)."""
    uniform_alignment_epochs: int = 0
    """Train the first this-many epochs with uniform alignment (Syntactic Attention only; see
    :attr:`SyntacticAttentionSeq2Seq.uniform_alignment`). 0 is the paper's training."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.bucket_pool < 1:
            raise ValueError(f"bucket_pool must be >= 1, got {self.bucket_pool}")
        if self.uniform_alignment_epochs < 0:
            raise ValueError(f"uniform_alignment_epochs must be >= 0, got {self.uniform_alignment_epochs}")


@dataclass
class ScanEvaluationConfig:
    batch_size: int = 500
    max_length: int = 60
    """Greedy decoding budget in tokens, ``<eos>`` included (SCAN outputs have at most 48 actions)."""
    checkpoint: Literal["best", "last"] = "best"
    given_length: bool = True
    """Also report ``seq_acc_given_length`` (decoding exactly the target's length)."""
    bleu: bool = False
    """Report sacrebleu corpus BLEU (needs the ``sacrebleu`` package)."""
    stop_threshold: float | None = None
    """Greedy decoding emits ``<eos>`` only when ``p(<eos>) >= stop_threshold`` (with Syntactic
    Attention's ``stop_from_attention``: once the end marker holds that much of the attention);
    ``null`` (default): plain greedy, ``<eos>`` when it is the most probable token. A stop rule
    from the model's own output only (``StepwiseSeq2Seq.greedy_decode``; issue 29). Applies to
    ``seq_acc`` (test and validation) and the decoded plots, not to ``seq_acc_given_length``."""
    stop_lookahead: float | None = None
    """Greedy decoding runs the whole budget and stops at the first step whose ``<eos>`` passes
    the rule above and has ``p(<eos>) >= stop_lookahead × the largest p(<eos>) of this and the
    later steps``: a tentative end is skipped when the model is much surer of an end later.
    ``null`` (default): no lookahead. Same scope as ``stop_threshold``."""

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.max_length < 1:
            raise ValueError("batch_size and max_length must be >= 1")
        check_stop_threshold(self.stop_threshold)
        check_stop_threshold(self.stop_lookahead, "stop_lookahead")


@dataclass
class ScanExperimentConfig:
    experiment: Literal["scan"] = "scan"
    data: ScanDataConfig = field(default_factory=ScanDataConfig)
    model: ScanModelConfig = field(default_factory=ScanModelConfig)
    training: ScanTrainingConfig = field(default_factory=ScanTrainingConfig)
    evaluation: ScanEvaluationConfig = field(default_factory=ScanEvaluationConfig)

    def __post_init__(self) -> None:
        if self.training.uniform_alignment_epochs and self.model.architecture != "syntactic_attention":
            raise ValueError(
                "training.uniform_alignment_epochs applies to model.architecture: syntactic_attention only"
            )


# ---------------------------------------------------------------------------------- model


def build_model(model: ScanModelConfig, source: Vocabulary, target: Vocabulary) -> StepwiseSeq2Seq:
    if source.pad_id != target.pad_id:
        raise ConfigError("the source and target vocabularies must share the pad id")
    common: dict[str, Any] = {
        "embedding_dim": model.embedding_dim,
        "encoder_hidden_dim": model.encoder_hidden_dim,
        "encoder_layers": model.encoder_layers,
        "decoder_hidden_dim": model.decoder_hidden_dim,
        "dropout": model.dropout,
        "end_marker": model.end_marker,
        "stop_from_attention": model.stop_from_attention,
        "pad_id": target.pad_id,
        "sos_id": target.sos_id,
        "eos_id": target.eos_id,
    }
    try:
        if model.architecture == "transformer":
            return build_transformer(model.transformer, source, target)
        if model.architecture == "syntactic_attention":
            return SyntacticAttentionSeq2Seq(
                len(source),
                len(target),
                translation_encoder=model.translation_encoder,
                translate_from_context=model.translate_from_context,
                alignment_word_dropout=model.alignment_word_dropout,
                alignment_peers=model.alignment_peers,
                decoder_init=model.decoder_init,
                **common,
            )
        return GRUAttentionSeq2Seq(
            len(source),
            len(target),
            previous_output=model.previous_output,
            attender=model.attender,
            attender_options=model.attender_options,
            decoder_cell=model.decoder_cell,
            **common,
        )
    except ValueError as error:
        raise ConfigError(f"model: {error}") from None


def describe_model(model: ScanModelConfig) -> str:
    """The model in a few words (the first line of a run's log)."""
    if model.architecture == "transformer":
        return describe_transformer(model.transformer)
    cell = "" if model.decoder_cell == "gru" else f", decoder cell {model.decoder_cell}"
    if model.architecture == "gru_attention" and (model.attender != "additive" or cell):
        return f"gru attention, attender {model.attender}{cell}"
    return model.architecture.replace("_", " ")


def model_from_checkpoint(
    path: Path, device: torch.device, expected: ScanModelConfig | None = None
) -> tuple[StepwiseSeq2Seq, Vocabulary, Vocabulary]:
    """Rebuild the model a checkpoint was written for; with ``expected``, it must be that model."""
    return EXPERIMENT.model_from_checkpoint(path, device, expected)


# ------------------------------------------------------------------------------- training


class ScanTrainingTask:
    """The :class:`~attnlab.training.trainer.TrainingTask` of the SCAN experiment."""

    def __init__(
        self,
        train: EncodedSplit,
        validation: EncodedSplit,
        target: Vocabulary,
        config: ScanExperimentConfig,
        device: torch.device,
    ) -> None:
        self.train = train.dataset
        self.validation = validation
        self.target = target
        self.config = config
        self.device = device

    def train_batches(self, generator: torch.Generator) -> Iterator[Seq2SeqBatch]:
        training = self.config.training
        if training.bucket_by_length:
            batch_iter = bucketed_batches(self.train, training.batch_size, generator, training.bucket_pool)
        else:
            batch_iter = batches(self.train, training.batch_size, shuffle=True, generator=generator)
        for batch in batch_iter:
            yield batch.to(self.device)

    def updates_per_epoch(self) -> int:
        return -(-len(self.train) // self.config.training.batch_size)

    def start_epoch(self, model: torch.nn.Module, epoch: int) -> None:
        if isinstance(model, SyntacticAttentionSeq2Seq):
            model.uniform_alignment = epoch < self.config.training.uniform_alignment_epochs

    def training_loss(self, model: torch.nn.Module, batch: Seq2SeqBatch) -> torch.Tensor:
        return teacher_forced_loss(model, batch)  # type: ignore[arg-type]

    def validate(self, model: torch.nn.Module) -> dict[str, float]:
        """Validation metrics of the model as it is evaluated: with its alignment switched on even
        in a uniform-alignment epoch, so the best checkpoint is never picked for what the uniform
        attention achieved. Exact match is read from the teacher-forced pass
        (:func:`~attnlab.evaluation.seq2seq.validate_split`): greedy decoding's verdicts without
        decoding."""
        uniform = getattr(model, "uniform_alignment", False)
        if uniform:
            model.uniform_alignment = False  # type: ignore[assignment]
        try:
            metrics = validate_split(
                model,  # type: ignore[arg-type]
                self.validation,
                self.target,
                self.config.evaluation,
                self.device,
            )
        finally:
            if uniform:
                model.uniform_alignment = True  # type: ignore[assignment]
        return {"loss": metrics["loss"], "seq_acc": metrics["seq_acc"]}

    def attention_samples(self, model: torch.nn.Module) -> dict[str, torch.Tensor]:
        """The decoded attention of the first validation examples (TensorBoard images)."""
        return decoded_attention_samples(
            model, self.validation.dataset, self.device, self.config.evaluation.max_length
        )


# ----------------------------------------------------------------------------- experiment


ScanData = Seq2SeqData[EncodedSplit]
"""A training run's data: every split encoded with the vocabularies of train + validation."""
LoadedScan = tuple[StepwiseSeq2Seq, Vocabulary, Vocabulary]


class ScanExperiment(Seq2SeqExperiment[ScanExperimentConfig, EncodedSplit, StepwiseSeq2Seq]):
    """SCAN splits and English–French with Syntactic Attention, GRU + attention or a Transformer;
    evaluates on given ``IN: … OUT: …`` files too."""

    name = "scan"
    label = "SCAN"
    title = "SCAN and English–French (sequence to sequence)"
    config_type = ScanExperimentConfig
    capabilities = frozenset({Capability.EVALUATE_FILES, Capability.TRANSLATE})
    system = SYSTEM
    description = "SCAN seq2seq"
    model_config_type = ScanModelConfig

    def training_data(self, config: ScanExperimentConfig, device: torch.device) -> ScanData:
        splits = load_splits(config.data)
        source, target = build_vocabularies(
            splits["train"].examples + splits["validation"].examples, config.data.unknown_words
        )
        encoded = {name: encode_split(split, source, target, name) for name, split in splits.items()}
        return Seq2SeqData(encoded, source, target)

    def build_seq2seq(
        self, model: ScanModelConfig, source: Vocabulary, target: Vocabulary
    ) -> StepwiseSeq2Seq:
        return build_model(model, source, target)

    def test_set_names(self, config: ScanExperimentConfig) -> list[str]:
        return test_set_names(config.data)

    def decode(
        self,
        model: StepwiseSeq2Seq,
        source: torch.Tensor,
        source_padding_mask: torch.Tensor,
        config: ScanExperimentConfig,
    ) -> Seq2SeqOutput:
        """As :func:`~attnlab.evaluation.seq2seq.evaluate_split` decodes: ``evaluation.max_length``
        tokens at most, with its stop rules."""
        return decode_greedily(model, source, source_padding_mask, config.evaluation)

    def encoded_dataset(self, split: EncodedSplit) -> EncodedDataset:
        return split.dataset

    def training_task(
        self, config: ScanExperimentConfig, data: ScanData, device: torch.device
    ) -> ScanTrainingTask:
        return ScanTrainingTask(
            data.encoded["train"], data.encoded["validation"], data.target, config, device
        )

    def run_summary(self, config: ScanExperimentConfig, data: ScanData) -> RunSummary:
        return RunSummary(
            f"scan on the {config.data.split} split: {describe_model(config.model)}",
            {name: len(data.encoded[name].dataset) for name in ("train", "validation")},
        )

    def test_sets(
        self, config: ScanExperimentConfig, loaded: LoadedScan, device: torch.device
    ) -> dict[str, Any]:
        splits = load_splits(config.data)
        return self._encoded({name: splits[name] for name in test_set_names(config.data)}, loaded)

    def file_test_sets(
        self, config: ScanExperimentConfig, loaded: LoadedScan, files: Sequence[str]
    ) -> dict[str, Any]:
        """``IN: … OUT: …`` files, read with the run's vocabularies."""
        return self._encoded(
            {Path(path).stem: Split(scan.read_scan_file(path), path, "line") for path in files}, loaded
        )

    @staticmethod
    def _encoded(splits: dict[str, Split], loaded: LoadedScan) -> dict[str, Any]:
        _, source, target = loaded
        return {name: encode_split(split, source, target, name) for name, split in splits.items()}

    def evaluate_set(
        self, evaluation: Evaluation[ScanExperimentConfig, LoadedScan], name: str, test_set: Any
    ) -> dict[str, Any]:
        """The metrics of :func:`~attnlab.evaluation.seq2seq.evaluate_split`; ``<name>.predictions.tsv``
        with the raw references (unknown words as they are, not ``<unk>``) as its targets, the
        strings BLEU scored."""
        model, source, target = evaluation.loaded
        options, device, data = evaluation.config.evaluation, evaluation.device, evaluation.config.data

        marker_tokens = [scan.MARKERS[kind] for kind in data.output_markers]
        markers = [target.token_to_id(token) for token in marker_tokens if token in target]

        def evaluate(outcomes: ExampleOutcomes) -> dict[str, Any]:
            metrics = evaluate_split(
                model, test_set, target, options, device, outcomes=outcomes, ignored_ids=markers
            )
            if data.split == "length":
                commands, _ = dataset_texts(test_set.dataset, source, target)
                metrics |= sentence_length_metrics(name, commands, outcomes.correct, data.max_train_actions)
            return metrics

        return evaluate_with_predictions(
            evaluation,
            name,
            test_set.dataset,
            evaluate,
            references=[" ".join(reference) for reference in test_set.references],
            ignored_tokens=marker_tokens,
        )


def sentence_length_metrics(
    test_set: str, commands: Sequence[str], correct: Mapping[str, Sequence[bool]], max_train_actions: int
) -> dict[str, float]:
    """A length split's exact match in two groups: the commands whose every sentence has at most
    ``max_train_actions`` actions (the longest training output), which a model can get right by
    joining sentences of lengths it was trained on, and those with a longer sentence, which it can
    only get right by lengthening a sentence itself (:func:`~attnlab.tasks.scan.sentence_actions`;
    on Lake & Baroni's split, 3,144 of the 3,920 test commands, at any cut-off from 24 up none).

    ``correct``: each example's verdict per metric (``seq_acc``, and ``seq_acc_given_length`` when
    evaluated); for each, ``<metric>_short_sentences`` and ``<metric>_long_sentence`` (a group
    without commands has none), and ``long_sentence_examples``. ``{}``, with a warning, when a
    command of ``test_set`` is not in the SCAN grammar (given ``--data`` files)."""
    try:
        longer = [max(scan.sentence_actions(command)) > max_train_actions for command in commands]
    except ValueError as error:
        logger.warning("%s: no exact match by sentence length: %s", test_set, error)
        return {}
    metrics: dict[str, float] = {"long_sentence_examples": sum(longer)}
    for metric in SENTENCE_LENGTH_METRICS:
        for suffix, group in (("short_sentences", False), ("long_sentence", True)):
            right = [flag for flag, long in zip(correct.get(metric, ()), longer) if long == group]
            if right:
                metrics[f"{metric}_{suffix}"] = 100.0 * sum(right) / len(right)
    return metrics


EXPERIMENT = ScanExperiment()
