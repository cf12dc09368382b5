"""Greedy decoding's exact-match verdicts read from one teacher-forced pass
(:func:`attnlab.evaluation.seq2seq.teacher_forced_verdicts`) are the verdicts of decoding itself, for
every decoder the SCAN experiment builds, and :func:`validate_split` reports what
:func:`evaluate_split` reports."""

import dataclasses
from collections.abc import Callable

import pytest
import torch

from attnlab.evaluation.metrics import sequence_correct
from attnlab.evaluation.seq2seq import evaluate_split, teacher_forced_verdicts, validate_split
from attnlab.experiments.scan.experiment import ScanEvaluationConfig
from attnlab.models.gru_attention import GRUAttentionSeq2Seq
from attnlab.models.stepwise import StepwiseSeq2Seq
from attnlab.models.syntactic_attention import SyntacticAttentionSeq2Seq
from attnlab.models.transformer import TransformerSeq2Seq
from attnlab.tasks import scan_data
from attnlab.tasks.examples import Seq2SeqBatch, Seq2SeqExample
from attnlab.tasks.vocab import TARGET_SPECIALS, Vocabulary

SOURCE_VOCAB, TARGET_VOCAB = 12, 9
PAD, SOS, EOS = 0, 1, 2
TINY_TRANSFORMER = {
    "d_model": 16,
    "heads": 2,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "ff_dim": 32,
    "dropout": 0.0,
}
TINY_RECURRENT = {"embedding_dim": 8, "encoder_hidden_dim": 8, "decoder_hidden_dim": 16, "dropout": 0.0}

MODELS: dict[str, Callable[[], StepwiseSeq2Seq]] = {
    "transformer sinusoidal dot": lambda: TransformerSeq2Seq(SOURCE_VOCAB, TARGET_VOCAB, **TINY_TRANSFORMER),
    "transformer rope shift": lambda: TransformerSeq2Seq(
        SOURCE_VOCAB, TARGET_VOCAB, positional="rope", cross_attention="shift", **TINY_TRANSFORMER
    ),
    "transformer relative shift, stop from the attention": lambda: TransformerSeq2Seq(
        SOURCE_VOCAB,
        TARGET_VOCAB,
        positional="relative",
        cross_attention="shift",
        stop_from_attention=True,
        end_marker=True,
        **TINY_TRANSFORMER,
    ),
    "transformer_xl post-norm location": lambda: TransformerSeq2Seq(
        SOURCE_VOCAB,
        TARGET_VOCAB,
        positional="transformer_xl",
        norm="post",
        cross_attention="location",
        **TINY_TRANSFORMER,
    ),
    "gru attention": lambda: GRUAttentionSeq2Seq(SOURCE_VOCAB, TARGET_VOCAB, **TINY_RECURRENT),
    "syntactic attention, stop from the attention": lambda: SyntacticAttentionSeq2Seq(
        SOURCE_VOCAB, TARGET_VOCAB, end_marker=True, stop_from_attention=True, **TINY_RECURRENT
    ),
}

SOURCES = [[3, 4, 5, 6, 7], [8, 3], [5, 9, 10, 11], [4], [6, 6, 7], [11, 10, 9, 8, 7, 3]]
BUDGET = 9


def source_batch() -> tuple[torch.Tensor, torch.Tensor]:
    width = max(map(len, SOURCES))
    source = torch.tensor([row + [PAD] * (width - len(row)) for row in SOURCES])
    return source, source == PAD


def targets_batch(targets: list[list[int]]) -> Seq2SeqBatch:
    """The sources with ``targets`` (word ids, no ``<eos>``) as a teacher-forced batch."""
    source, mask = source_batch()
    width = max(map(len, targets)) + 1
    target_input = [[SOS, *row] + [PAD] * (width - len(row) - 1) for row in targets]
    target_output = [[*row, EOS] + [PAD] * (width - len(row) - 1) for row in targets]
    return Seq2SeqBatch(source, mask, torch.tensor(target_input), torch.tensor(target_output), None)


def words(tokens: torch.Tensor) -> list[list[int]]:
    """Each row of decoded ``tokens`` up to its ``<eos>`` (or whole)."""
    rows = tokens.tolist()
    return [row[: row.index(EOS)] if EOS in row else row for row in rows]


def changed(row: list[int], at: int) -> list[int]:
    """``row`` with its word at ``at`` replaced by another word (ids 3 … 8)."""
    other = 3 + (row[at] - 3 + 1) % (TARGET_VOCAB - 3)
    return [*row[:at], other, *row[at + 1 :]]


def typical_stop_probability(model: StepwiseSeq2Seq) -> float:
    """The median ``p(<eos>)`` of the model's steps: a stop threshold that stops rows at various
    steps of an untrained model."""
    source, mask = source_batch()
    logits = model.decode_with_lengths(source, mask, torch.full((len(SOURCES),), BUDGET)).logits
    return float(torch.softmax(logits + model.never_predicted, dim=-1)[..., EOS].median())


@pytest.mark.parametrize("name", list(MODELS))
def test_verdicts_are_the_verdicts_of_greedy_decoding(name):
    torch.manual_seed(0)
    model = MODELS[name]().eval()
    source, mask = source_batch()
    seen = {True: 0, False: 0}
    for threshold in (None, typical_stop_probability(model)):
        decoded = model.greedy_decode(source, mask, BUDGET, stop_threshold=threshold).tokens
        own = words(decoded)
        candidates = [
            own,  # right exactly where decoding stopped within the budget
            [changed(row, len(row) // 2) if row else [3] for row in own],  # one word changed: wrong
            [row[:-1] if len(row) > 1 else row for row in own],  # one word short: wrong
            [row + [row[-1] if row else 4] for row in own],  # one word long: wrong
        ]
        for targets in candidates:
            batch = targets_batch(targets)
            with torch.no_grad():
                verdicts = teacher_forced_verdicts(model, batch, BUDGET, threshold)
            expected = sequence_correct(decoded, batch.target_output, eos_id=EOS, pad_id=PAD)
            assert verdicts.exact.tolist() == expected.tolist(), (threshold, targets)
            for verdict in expected.tolist():
                seen[verdict] += 1
    assert seen[True] >= 3 and seen[False] >= 3  # both verdicts were checked


@pytest.mark.parametrize("name", list(MODELS))
def test_given_length_verdicts_are_those_of_decoding_with_the_length(name):
    torch.manual_seed(1)
    model = MODELS[name]().eval()
    source, mask = source_batch()
    lengths = torch.tensor([1, 2, 4, 5, 7, 8])
    forced = words(model.decode_with_lengths(source, mask, lengths).tokens)
    assert [len(row) for row in forced] == lengths.tolist()
    for targets, right in [(forced, True), ([changed(row, len(row) - 1) for row in forced], False)]:
        with torch.no_grad():
            verdicts = teacher_forced_verdicts(model, targets_batch(targets))
        assert verdicts.exact_given_length.tolist() == [right] * len(SOURCES)


def test_a_target_longer_than_the_budget_is_never_exact():
    torch.manual_seed(0)
    model = MODELS["transformer sinusoidal dot"]().eval()
    source, mask = source_batch()
    threshold = typical_stop_probability(model)
    own = words(model.greedy_decode(source, mask, BUDGET, stop_threshold=threshold).tokens)
    longest = max(len(row) for row in own)
    assert longest >= 1
    with torch.no_grad():
        roomy = teacher_forced_verdicts(model, targets_batch(own), longest + 1, threshold).exact
        tight = teacher_forced_verdicts(model, targets_batch(own), longest, threshold).exact
    fits = [len(row) + 1 <= longest for row in own]
    assert bool(roomy.any()) and tight.tolist() == [bool(r) and f for r, f in zip(roomy.tolist(), fits)]


def test_validate_split_reports_what_evaluate_split_reports():
    """Loss, exact match and examples of one split: from the teacher-forced pass and from greedy
    decoding, with and without a stop threshold; with ``stop_lookahead`` validation decodes."""
    torch.manual_seed(0)
    model = MODELS["transformer rope shift"]().eval()
    source_vocab = Vocabulary(["<pad>"] + [f"w{i}" for i in range(1, SOURCE_VOCAB)])
    target_vocab = Vocabulary(
        ["<pad>", "<sos>", "<eos>"] + [f"a{i}" for i in range(3, TARGET_VOCAB)], TARGET_SPECIALS
    )
    source, mask = source_batch()
    threshold = typical_stop_probability(model)
    own = words(model.greedy_decode(source, mask, BUDGET, stop_threshold=threshold).tokens)
    examples = [
        Seq2SeqExample(tuple(f"w{i}" for i in src), tuple(f"a{i}" for i in (tgt or [3])))
        for src, tgt in zip(SOURCES, own)
    ]
    examples += [Seq2SeqExample(ex.source, tuple(reversed(ex.target)) + ("a3",)) for ex in examples]
    split = scan_data.encode_split(
        scan_data.Split(examples, "a test"), source_vocab, target_vocab, "validation"
    )
    checked = 0
    for options in [
        dataclasses.replace(
            ScanEvaluationConfig(), batch_size=4, max_length=BUDGET, stop_threshold=threshold
        ),
        dataclasses.replace(ScanEvaluationConfig(), batch_size=5, max_length=BUDGET),
        dataclasses.replace(ScanEvaluationConfig(), batch_size=5, max_length=BUDGET, stop_lookahead=0.5),
    ]:
        validated = validate_split(model, split, target_vocab, options, torch.device("cpu"))
        evaluated = evaluate_split(
            model, split, target_vocab, options, torch.device("cpu"), given_length=False
        )
        assert validated["seq_acc"] == evaluated["seq_acc"] and validated["examples"] == len(examples)
        assert validated["loss"] == pytest.approx(evaluated["loss"], rel=1e-5)
        checked += evaluated["seq_acc"] > 0
    assert checked >= 1  # some examples were right, so the verdicts were tested both ways
