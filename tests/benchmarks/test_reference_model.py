"""The benchmark's plain-PyTorch reference (benchmarks/reference_seq2seq.py) is a faithful twin
of attnlab's scaled-dot RecurrentSeq2Seq: same parameters, and with the same weights the same
teacher-forced loss and the same greedy decodings."""

from __future__ import annotations

import pytest
import torch

from attnlab.evaluation.seq2seq import teacher_forced_loss
from attnlab.models.seq2seq import RecurrentSeq2Seq
from attnlab.tasks.examples import Seq2SeqBatch

SOURCE_VOCAB, TARGET_VOCAB = 16, 11


@pytest.fixture(scope="module")
def reference(load_benchmark_module):
    return load_benchmark_module("reference_seq2seq.py")


def _twins(reference):
    torch.manual_seed(0)
    ours = RecurrentSeq2Seq(SOURCE_VOCAB, TARGET_VOCAB, attender="scaled_dot")
    theirs = reference.ReferenceSeq2Seq(SOURCE_VOCAB, TARGET_VOCAB)
    reference.load_attnlab_state_dict(theirs, ours.state_dict())
    return ours.eval(), theirs.eval()


def _batch() -> Seq2SeqBatch:
    generator = torch.Generator().manual_seed(1)
    lengths = torch.tensor([5, 3, 7, 1, 6])
    width = int(lengths.max())
    mask = torch.arange(width)[None, :] >= lengths[:, None]
    source = torch.randint(1, SOURCE_VOCAB, (5, width), generator=generator).masked_fill(mask, 0)
    target_lengths = torch.tensor([4, 6, 2, 5, 3])  # len(target) + 1
    t_width = int(target_lengths.max())
    t_mask = torch.arange(t_width)[None, :] >= target_lengths[:, None]
    target_output = torch.randint(3, TARGET_VOCAB, (5, t_width), generator=generator)
    target_output[torch.arange(5), target_lengths - 1] = 2  # <eos>
    target_output = target_output.masked_fill(t_mask, 0)
    target_input = torch.cat([torch.ones(5, 1, dtype=torch.long), target_output[:, :-1]], dim=1)
    target_input = target_input.masked_fill(target_input == 2, 0)
    return Seq2SeqBatch(source, mask, target_input, target_output, gold_attention=None)


def test_same_parameter_count(reference):
    ours = RecurrentSeq2Seq(SOURCE_VOCAB, TARGET_VOCAB, attender="scaled_dot")
    theirs = reference.ReferenceSeq2Seq(SOURCE_VOCAB, TARGET_VOCAB)
    count = lambda model: sum(p.numel() for p in model.parameters())  # noqa: E731
    assert count(theirs) == count(ours)
    assert sorted(p.shape for p in theirs.parameters()) == sorted(p.shape for p in ours.parameters())


def test_same_teacher_forced_loss_and_logits_with_the_same_weights(reference):
    ours, theirs = _twins(reference)
    batch = _batch()
    with torch.no_grad():
        expected_logits = ours(batch.source, batch.source_padding_mask, batch.target_input).logits
        logits = theirs(batch.source, batch.source_padding_mask, batch.target_input)
        expected = teacher_forced_loss(ours, batch)
        loss = theirs.loss(batch.source, batch.source_padding_mask, batch.target_input, batch.target_output)
    torch.testing.assert_close(logits, expected_logits, atol=1e-5, rtol=1e-5)
    assert abs(float(loss) - float(expected)) < 1e-5


def test_same_gradients_in_training_mode(reference):
    ours, theirs = _twins(reference)
    ours.train()
    theirs.train()
    batch = _batch()
    torch.manual_seed(3)  # the same bottleneck dropout mask for both
    teacher_forced_loss(ours, batch).backward()
    torch.manual_seed(3)
    theirs.loss(batch.source, batch.source_padding_mask, batch.target_input, batch.target_output).backward()
    ours_grads = {reference.ATTNLAB_NAMES[n]: p.grad for n, p in ours.named_parameters()}
    for name, parameter in theirs.named_parameters():
        torch.testing.assert_close(parameter.grad, ours_grads[name], atol=1e-5, rtol=1e-4, msg=name)


def test_same_greedy_decoding(reference):
    ours, theirs = _twins(reference)
    batch = _batch()
    expected = ours.greedy_decode(batch.source, batch.source_padding_mask, 12).tokens
    tokens = theirs.greedy_decode(batch.source, batch.source_padding_mask, 12)
    assert torch.equal(tokens, expected)


def test_load_rejects_another_attender(reference):
    mix = RecurrentSeq2Seq(SOURCE_VOCAB, TARGET_VOCAB, attender="mix")
    with pytest.raises(KeyError, match="not a scaled-dot"):
        reference.load_attnlab_state_dict(
            reference.ReferenceSeq2Seq(SOURCE_VOCAB, TARGET_VOCAB), mix.state_dict()
        )
