"""Attentive guidance (Hupkes et al. 2018): the loss, its place in training, and its config key."""

import math

import pytest
import torch
import torch.nn.functional as F

from attnlab.config import ConfigError
from attnlab.evaluation.seq2seq import attention_guidance_loss, teacher_forced_loss
from attnlab.experiments.lookup import experiment as lookup
from attnlab.experiments.registry import resolve_config
from attnlab.models.seq2seq import RecurrentSeq2Seq
from attnlab.tasks.batching import collate_examples
from attnlab.tasks.examples import Seq2SeqExample
from attnlab.tasks.tsv import read_tsv, write_tsv
from attnlab.tasks.vocab import build_vocabularies


def test_guidance_loss_is_the_mean_negative_log_weight_of_the_gold_positions():
    attention = torch.tensor([[[0.5, 0.25, 0.25], [0.1, 0.8, 0.1]], [[0.2, 0.2, 0.6], [1.0, 0.0, 0.0]]])
    gold = torch.tensor([[0, 1], [2, -1]])  # the last step has no gold position
    expected = -(math.log(0.5) + math.log(0.8) + math.log(0.6)) / 3
    assert attention_guidance_loss(attention, gold).item() == pytest.approx(expected)


def test_guidance_loss_is_zero_without_gold_and_finite_on_underflow():
    attention = torch.tensor([[[1.0, 0.0]]], requires_grad=True)
    assert attention_guidance_loss(attention, torch.tensor([[-1]])).item() == 0.0
    underflow = attention_guidance_loss(attention, torch.tensor([[1]]))
    assert underflow.item() == pytest.approx(-math.log(1e-30))


def _batch_and_model(with_attention: bool):
    examples = [
        Seq2SeqExample(["000", "t1", "."], ["000", "110"], [0, 1, 2] if with_attention else None),
        Seq2SeqExample(
            ["110", "t2", "t1", "."], ["110", "100", "010"], [0, 1, 2, 3] if with_attention else None
        ),
    ]
    source, target = build_vocabularies(examples)
    torch.manual_seed(0)
    model = RecurrentSeq2Seq(len(source), len(target), embedding_dim=8, hidden_dim=16, attender="location")
    return collate_examples(examples, source, target), model


def test_teacher_forced_loss_adds_the_weighted_guidance_term():
    batch, model = _batch_and_model(with_attention=True)
    model.eval()
    output = model(batch.source, batch.source_padding_mask, batch.target_input)
    tokens = F.cross_entropy(
        output.logits.flatten(0, 1), batch.target_output.flatten(), ignore_index=model.pad_id
    )
    guidance = attention_guidance_loss(output.attention, batch.gold_attention)
    assert guidance.item() > 0
    assert teacher_forced_loss(model, batch).item() == pytest.approx(tokens.item())
    assert teacher_forced_loss(model, batch, 0.5).item() == pytest.approx(
        tokens.item() + 0.5 * guidance.item()
    )


def test_guidance_gradient_moves_the_attention_towards_the_gold_positions():
    batch, model = _batch_and_model(with_attention=True)
    model.eval()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)

    def guidance() -> torch.Tensor:
        output = model(batch.source, batch.source_padding_mask, batch.target_input)
        return attention_guidance_loss(output.attention, batch.gold_attention)

    before = guidance().item()
    for _ in range(20):
        optimizer.zero_grad()
        guidance().backward()
        optimizer.step()
    assert guidance().item() < 0.5 * before


def test_guidance_without_gold_attention_is_an_error():
    batch, model = _batch_and_model(with_attention=False)
    assert batch.gold_attention is None
    with pytest.raises(ValueError, match="needs gold attention"):
        teacher_forced_loss(model, batch, 1.0)


def test_negative_guidance_weight_is_a_config_error_naming_the_key():
    with pytest.raises(ConfigError, match="attention_guidance"):
        lookup.EXPERIMENT.parse_config(resolve_config("lookup", ["training.attention_guidance=-1"]))


def test_guidance_on_files_without_gold_attention_names_the_file(tiny_overrides, lookup_files, tmp_path):
    no_attention = tmp_path / "train_no_attention.tsv"
    examples = [
        Seq2SeqExample(example.source, example.target, None) for example in read_tsv(lookup_files["train"])
    ]
    write_tsv(no_attention, examples)
    overrides = tiny_overrides(**{"data.train_file": no_attention, "training.attention_guidance": 1.0})
    config = lookup.EXPERIMENT.parse_config(resolve_config("lookup", overrides))
    with pytest.raises(ConfigError, match=r"train_no_attention\.tsv has none"):
        lookup.EXPERIMENT.train(config, tmp_path / "run")
    assert not (tmp_path / "run" / "checkpoints").exists()
