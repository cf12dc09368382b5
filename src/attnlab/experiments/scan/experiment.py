"""The SCAN experiment (Russin et al. 2019; Lake & Baroni 2018) and its English–French variant.

Config → data → model → trainer → metrics:

* **data** (:class:`ScanDataConfig`): a public SCAN split read from its files
  (``simple``, ``length``, ``addprim_jump``, ``addprim_turn_left``), the same split built by the
  generator (``generate: true``), a custom generated split (``primitive``, ``template``,
  ``random``, ``length`` with ``max_train_actions``), or any ``IN: … OUT: …`` files
  (``split: files``, e.g. the English–French set). Following Bastings et al. (2018) and Russin et
  al., 20% of the training set is held out (``validation_fraction``, seeded by ``data.seed``) for
  early stopping: ``checkpoints/best.pt`` has the lowest validation loss and training stops after
  ``training.patience`` epochs without improvement.
* **model** (:class:`ScanModelConfig`): Syntactic Attention with its two ablations, or the GRU +
  attention baselines with or without the dependency on the previous action
  (:mod:`attnlab.models.syntactic_attention`), or a Transformer (``architecture: transformer``,
  options under ``model.transformer``; :mod:`attnlab.models.transformer`).
* **metrics** per test set: ``seq_acc`` — exact match with the model producing ``<eos>`` itself;
  ``seq_acc_given_length`` — exact match when the model decodes exactly as many tokens as the
  target has (the evaluation of the authors' code, which runs the decoder for the target's
  length); ``loss`` (teacher-forced cross-entropy per token); ``bleu`` (sacrebleu corpus BLEU of
  the greedy outputs against the raw references, ``evaluation.bleu: true``); and, with
  ``data.unknown_words: unk``, the number of source / target words outside the training
  vocabulary that were read as ``<unk>`` (with ``error``, such a word is an error naming the file
  and line).

Batches are bucketed by target length (``training.bucket_by_length``,
:func:`attnlab.tasks.batching.bucketed_batches`): each epoch's shuffled order is cut into pools of
``bucket_pool`` batches, each pool is sorted by target length and cut into batches, and the batches
are shuffled; everything is drawn from the trainer's per-epoch generator, so resumed runs stay
exact.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch

from attnlab.config import ConfigError
from attnlab.evaluation.bleu import corpus_bleu
from attnlab.evaluation.metrics import sequence_correct
from attnlab.evaluation.seq2seq import ExampleOutcomes, teacher_forced_loss
from attnlab.experiments.base import Capability, Evaluation
from attnlab.experiments.seq2seq_common import (
    Seq2SeqData,
    Seq2SeqExperiment,
    TransformerModelConfig,
    build_transformer,
    decoded_attention_samples,
    evaluate_with_predictions,
)
from attnlab.models.syntactic_attention import (
    GRUAttentionSeq2Seq,
    StepwiseSeq2Seq,
    SyntacticAttentionSeq2Seq,
)
from attnlab.tasks import scan
from attnlab.tasks.batching import EncodedDataset, batches, bucketed_batches, encode_examples
from attnlab.tasks.examples import Seq2SeqBatch, Seq2SeqExample
from attnlab.tasks.splits import random_hold_out
from attnlab.tasks.vocab import (
    EOS_TOKEN,
    PAD_TOKEN,
    SOS_TOKEN,
    Vocabulary,
)
from attnlab.training.trainer import RunSummary, TrainingConfig

SYSTEM = "scan/seq2seq"
UNK_TOKEN = "<unk>"
STANDARD_TEST_SET = "test"
GENERATED_SPLITS = ("primitive", "template", "random")


@dataclass
class ScanDataConfig:
    """Which split, and how the validation set is held out.

    ``split``: a public split read from the SCAN checkout at ``root``: any ``name`` with files
    ``tasks_train_<name>.txt`` and ``tasks_test_<name>.txt`` in a folder below it (``simple``,
    ``length``, ``addprim_jump``, ``addprim_turn_left``, ``template_around_right``,
    ``filler_num1``, …; see :func:`attnlab.tasks.scan.public_split_files`); with ``generate``, one
    of the first four built by the generator instead; a generated custom split (``primitive`` — holds out
    ``primitive`` as in the add-primitive splits; ``template`` — holds out every command matching
    ``template``, ``*`` = any word; ``random`` — ``test_fraction`` at random); or ``files``
    (``train_file``, ``test_files`` name → path, optional ``validation_file``).
    """

    split: str = "addprim_jump"
    root: str = "../shared/data/scan"
    generate: bool = False
    primitive: str = "jump"
    template: str = "jump around right"
    test_fraction: float = 0.2
    max_train_actions: int = scan.LENGTH_SPLIT_MAX_TRAIN_ACTIONS
    oversample_fraction: float = scan.PRIMITIVE_OVERSAMPLE_FRACTION
    train_file: str | None = None
    validation_file: str | None = None
    test_files: dict[str, str] = field(default_factory=dict)
    validation_fraction: float = 0.2
    seed: int = 0
    unknown_words: Literal["error", "unk"] = "error"
    train_limit: int | None = None
    """Keep a random subset of this many training examples (quick runs); ``null`` keeps all."""
    test_limit: int | None = None
    """Keep a random subset of this many examples of the validation set and of each test set."""

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[A-Za-z0-9_]+", self.split):
            raise ValueError(
                f"split must be a public split name (letters, digits, _; e.g. addprim_jump, "
                f"template_around_right), one of {list(GENERATED_SPLITS)} or 'files', got {self.split!r}"
            )
        if self.generate and self.split not in scan.STANDARD_SPLITS:
            raise ValueError(
                f"generate: true builds the splits {list(scan.STANDARD_SPLITS)} only, not {self.split!r}"
            )
        if self.split == "files" and (self.train_file is None or not self.test_files):
            raise ValueError("split 'files' needs train_file and test_files (name: path)")
        if self.split != "files" and (self.train_file or self.test_files or self.validation_file):
            raise ValueError("train_file / validation_file / test_files need split: files")
        if not 0 < self.validation_fraction < 1:
            raise ValueError(f"validation_fraction must be in (0, 1), got {self.validation_fraction}")
        for name in ("train_limit", "test_limit"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1 or null, got {value}")


@dataclass
class ScanModelConfig:
    """Syntactic Attention (paper sizes), the GRU + attention baseline or a Transformer (``architecture``).

    ``translation_encoder`` (``linear`` | ``rnn``) and ``translate_from_context`` are the two
    ablations of Russin et al.'s Table 2 (Syntactic Attention only); ``previous_output: false``
    is Bastings et al.'s "−dep" (GRU baseline only). ``end_marker`` (append an end-of-command
    word the alignment can attend; its translation is read out as ``<eos>``) and
    ``stop_from_attention`` (``p(<eos>)`` = the attention on that end marker; needs
    ``end_marker``) are the stop mechanisms of issue 29 (Syntactic Attention only; see
    :mod:`attnlab.models.syntactic_attention`). All default to the paper's model.
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
    transformer: TransformerModelConfig = field(default_factory=TransformerModelConfig)
    end_marker: bool = False
    stop_from_attention: bool = False

    def __post_init__(self) -> None:
        if self.architecture != "syntactic_attention" and (
            self.translation_encoder != "linear"
            or self.translate_from_context
            or self.end_marker
            or self.stop_from_attention
        ):
            raise ValueError(
                "translation_encoder / translate_from_context / end_marker / stop_from_attention "
                "apply to syntactic_attention only"
            )
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

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.max_length < 1:
            raise ValueError("batch_size and max_length must be >= 1")


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


# ----------------------------------------------------------------------------------- data


@dataclass
class Split:
    """Examples and where they come from (for error messages: ``f"{origin} {item} {i + 1}"``)."""

    examples: list[Seq2SeqExample]
    origin: str
    item: str = "example"


def load_splits(data: ScanDataConfig) -> dict[str, Split]:
    """``train``, ``validation`` and the test sets (see :func:`test_set_names`)."""
    train, tests = _train_and_tests(data)
    if data.validation_file is not None:
        validation = Split(scan.read_scan_file(data.validation_file), data.validation_file, "line")
    else:
        kept, held = _hold_out(train.examples, data.validation_fraction, data.seed)
        validation = Split(held, f"{train.origin} (held-out validation)")
        train = Split(kept, f"{train.origin} (training part)")
    if data.train_limit is not None:
        train = Split(_subset(train.examples, data.train_limit, data.seed), train.origin)
    if data.test_limit is not None:
        limit = data.test_limit
        validation = Split(_subset(validation.examples, limit, data.seed), validation.origin)
        tests = {name: Split(_subset(s.examples, limit, data.seed), s.origin) for name, s in tests.items()}
    return {"train": train, "validation": validation, **tests}


def test_set_names(data: ScanDataConfig) -> list[str]:
    return list(data.test_files) if data.split == "files" else [STANDARD_TEST_SET]


def _train_and_tests(data: ScanDataConfig) -> tuple[Split, dict[str, Split]]:
    if data.split == "files":
        assert data.train_file is not None
        train = Split(scan.read_scan_file(data.train_file), data.train_file, "line")
        tests = {
            name: Split(scan.read_scan_file(path), path, "line") for name, path in data.test_files.items()
        }
        return train, tests
    if data.split not in GENERATED_SPLITS and not data.generate:
        train_file, test_file = (str(path) for path in scan.public_split_files(data.split, data.root))
        train = Split(scan.read_scan_file(train_file), train_file, "line")
        return train, {STANDARD_TEST_SET: Split(scan.read_scan_file(test_file), test_file, "line")}
    generated = _generated_split(data)
    origin = f"generated {data.split} split"
    return Split(generated.train, f"{origin} (train)"), {
        STANDARD_TEST_SET: Split(generated.test, f"{origin} (test)")
    }


def _generated_split(data: ScanDataConfig) -> scan.ScanSplit:
    examples = scan.generate_scan()
    try:
        if data.split == "primitive":
            return scan.primitive_split(
                examples, data.primitive, oversample_fraction=data.oversample_fraction
            )
        if data.split == "template":
            return scan.template_split(examples, data.template)
        if data.split in ("random", "simple"):
            return scan.random_split(examples, test_fraction=data.test_fraction, seed=data.seed)
        if data.split == "length":
            return scan.length_split(examples, max_train_actions=data.max_train_actions)
        return scan.generate_standard_split(data.split, seed=data.seed)
    except ValueError as error:
        raise ConfigError(f"data: {error}") from None


def _hold_out(
    examples: list[Seq2SeqExample], fraction: float, seed: int
) -> tuple[list[Seq2SeqExample], list[Seq2SeqExample]]:
    size = round(fraction * len(examples))
    if not 0 < size < len(examples):
        raise ConfigError(
            f"data.validation_fraction={fraction} of {len(examples)} training examples leaves an empty "
            "training or validation set; give data.validation_file or more training examples"
        )
    return random_hold_out(examples, size, seed)


def _subset(examples: list[Seq2SeqExample], size: int, seed: int) -> list[Seq2SeqExample]:
    if size >= len(examples):
        return examples
    chosen = sorted(random.Random(seed + 1).sample(range(len(examples)), size))
    return [examples[i] for i in chosen]


def build_vocabularies(train: Sequence[Seq2SeqExample], unknown_words: str) -> tuple[Vocabulary, Vocabulary]:
    """Source and target vocabularies of the training file; with ``unk``, both also hold ``<unk>``."""
    unk = (UNK_TOKEN,) if unknown_words == "unk" else ()
    try:
        source = Vocabulary.build((ex.source for ex in train), (PAD_TOKEN, *unk))
        target = Vocabulary.build((ex.target for ex in train), (PAD_TOKEN, SOS_TOKEN, EOS_TOKEN, *unk))
    except ValueError as error:
        raise ConfigError(f"data: the training set cannot make a vocabulary: {error}") from None
    return source, target


@dataclass
class EncodedSplit:
    """A split encoded for the model, with its raw references and its ``<unk>`` counts."""

    dataset: EncodedDataset
    references: list[tuple[str, ...]]
    unknown_source_words: int = 0
    unknown_target_words: int = 0


def encode_split(split: Split, source: Vocabulary, target: Vocabulary, name: str) -> EncodedSplit:
    """Encode ``split``; unknown words are errors naming the file and line, or ``<unk>`` (counted)."""
    if not split.examples:
        raise ConfigError(f"the {name} split ({split.origin}) has no examples")
    examples, unknown_source, unknown_target = split.examples, 0, 0
    if UNK_TOKEN in source.specials:
        examples, unknown_source, unknown_target = _replace_unknown(split.examples, source, target)
    dataset = encode_examples(examples, source, target, where_prefix=split.origin, item_name=split.item)
    references = [ex.target for ex in split.examples]
    return EncodedSplit(dataset, references, unknown_source, unknown_target)


def _replace_unknown(
    examples: list[Seq2SeqExample], source: Vocabulary, target: Vocabulary
) -> tuple[list[Seq2SeqExample], int, int]:
    counts = [0, 0]

    def known(tokens: tuple[str, ...], vocabulary: Vocabulary, side: int) -> tuple[str, ...]:
        mapped = tuple(token if token in vocabulary else UNK_TOKEN for token in tokens)
        counts[side] += sum(a != b for a, b in zip(tokens, mapped))
        return mapped

    replaced = [Seq2SeqExample(known(ex.source, source, 0), known(ex.target, target, 1)) for ex in examples]
    return replaced, counts[0], counts[1]


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
                end_marker=model.end_marker,
                stop_from_attention=model.stop_from_attention,
                **common,
            )
        return GRUAttentionSeq2Seq(len(source), len(target), previous_output=model.previous_output, **common)
    except ValueError as error:
        raise ConfigError(f"model: {error}") from None


def describe_model(model: ScanModelConfig) -> str:
    """The model in a few words (the first line of a run's log)."""
    if model.architecture == "transformer":
        options = model.transformer
        return f"transformer, positional {options.positional}, cross-attention {options.cross_attention}"
    return model.architecture.replace("_", " ")


def model_from_checkpoint(
    path: Path, device: torch.device, expected: ScanModelConfig | None = None
) -> tuple[StepwiseSeq2Seq, Vocabulary, Vocabulary]:
    """Rebuild the model a checkpoint was written for; with ``expected``, it must be that model."""
    return EXPERIMENT.model_from_checkpoint(path, device, expected)


# ----------------------------------------------------------------------------- evaluation


@torch.no_grad()
def evaluate_split(
    model: StepwiseSeq2Seq,
    split: EncodedSplit,
    target: Vocabulary,
    evaluation: ScanEvaluationConfig,
    device: torch.device,
    *,
    given_length: bool | None = None,
    outcomes: ExampleOutcomes | None = None,
) -> dict[str, float]:
    """The metrics of the module docstring over one encoded split; ``outcomes``, when given,
    receives each example's prediction and its ``seq_acc`` (``seq_acc_given_length``) verdicts."""
    model.eval()
    given_length = evaluation.given_length if given_length is None else given_length
    totals = {"correct": 0, "correct_given_length": 0, "loss": 0.0, "tokens": 0}
    hypotheses: list[str] = []
    for batch in batches(split.dataset, evaluation.batch_size, shuffle=False):
        batch = batch.to(device)
        decoded = model.greedy_decode(batch.source, batch.source_padding_mask, evaluation.max_length)
        assert decoded.tokens is not None
        ids = {"eos_id": model.eos_id, "pad_id": model.pad_id}
        correct = {"seq_acc": sequence_correct(decoded.tokens, batch.target_output, **ids)}
        totals["correct"] += int(correct["seq_acc"].sum())
        lengths = (batch.target_output != model.pad_id).sum(dim=1) - 1
        if given_length:
            forced = model.decode_with_lengths(batch.source, batch.source_padding_mask, lengths)
            assert forced.tokens is not None
            correct["seq_acc_given_length"] = sequence_correct(forced.tokens, batch.target_output, **ids)
            totals["correct_given_length"] += int(correct["seq_acc_given_length"].sum())
        if outcomes is not None:
            outcomes.add(decoded.tokens, model.eos_id, **correct)
        tokens = int((lengths + 1).sum())
        totals["loss"] += float(teacher_forced_loss(model, batch)) * tokens
        totals["tokens"] += tokens
        if evaluation.bleu:
            hypotheses += [" ".join(target.decode(row, strip_specials=True)) for row in decoded.tokens.cpu()]
    examples = len(split.dataset)
    metrics = {
        "seq_acc": 100.0 * totals["correct"] / examples,
        "loss": totals["loss"] / max(totals["tokens"], 1),
        "examples": float(examples),
    }
    if given_length:
        metrics["seq_acc_given_length"] = 100.0 * totals["correct_given_length"] / examples
    if evaluation.bleu:
        metrics["bleu"] = corpus_bleu(hypotheses, [" ".join(ref) for ref in split.references])
    if UNK_TOKEN in target.specials:
        metrics["unknown_source_words"] = float(split.unknown_source_words)
        metrics["unknown_target_words"] = float(split.unknown_target_words)
    return metrics


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
        attention achieved."""
        uniform = getattr(model, "uniform_alignment", False)
        if uniform:
            model.uniform_alignment = False  # type: ignore[assignment]
        try:
            metrics = evaluate_split(
                model,  # type: ignore[arg-type]
                self.validation,
                self.target,
                self.config.evaluation,
                self.device,
                given_length=False,
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
    capabilities = frozenset({Capability.EVALUATE_FILES})
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
        """The metrics of :func:`evaluate_split`; ``<name>.predictions.tsv``."""
        model, _, target = evaluation.loaded
        options, device = evaluation.config.evaluation, evaluation.device
        return evaluate_with_predictions(
            evaluation,
            name,
            test_set.dataset,
            lambda outcomes: evaluate_split(model, test_set, target, options, device, outcomes=outcomes),
        )


EXPERIMENT = ScanExperiment()
