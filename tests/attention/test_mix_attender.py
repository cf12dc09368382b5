"""The Mix Attender (Dubois et al. 2020, §5.2)."""

from __future__ import annotations

import pytest
import torch

from attnlab.attention.content import AdditiveAttender, ScaledDotAttender
from attnlab.attention.mix import MixAttender

D = 6
BIG = 40.0


def mix(**options: object) -> MixAttender:
    torch.manual_seed(0)
    return MixAttender(D, D, 5, **options).double()


def set_mix_weight(attender: MixAttender, logit: float) -> None:
    with torch.no_grad():
        attender.mix_layer.weight.zero_()
        attender.mix_layer.bias.fill_(logit)


def padded_positions(lengths: tuple[int, ...], source_len: int) -> torch.Tensor:
    positions = torch.zeros(len(lengths), source_len, dtype=torch.float64)
    for b, length in enumerate(lengths):
        positions[b, :length] = torch.arange(length, dtype=torch.float64) / max(length - 1, 1)
    return positions


@pytest.mark.parametrize(("logit", "variable"), [(BIG, "location_attention"), (-BIG, "content_attention")])
def test_mix_weight_selects_location_or_content(logit, variable, source, make_queries):
    attender = mix()
    set_mix_weight(attender, logit)
    output = attender(make_queries(4, 3), source.keys, source.values, source.mask)
    torch.testing.assert_close(output.weights, output.variables[variable])
    expected_gamma = torch.full((4, 3), 1.0 if logit > 0 else 0.0, dtype=torch.float64)
    torch.testing.assert_close(output.variables["mix_weight"], expected_gamma)


def test_weights_are_the_convex_combination(source, make_queries):
    output = mix()(make_queries(4, 3), source.keys, source.values, source.mask)
    v = output.variables
    gamma = v["mix_weight"].unsqueeze(-1)
    expected = gamma * v["location_attention"] + (1 - gamma) * v["content_attention"]
    torch.testing.assert_close(output.weights, expected)
    assert torch.all((v["mix_weight"] > 0) & (v["mix_weight"] < 1))


def test_content_attention_is_the_content_attenders(source, make_queries):
    attender = mix()
    queries = make_queries(4, 2)
    output = attender(queries, source.keys, source.values, source.mask)
    alone = attender.content(queries, source.keys, source.values, source.mask)
    torch.testing.assert_close(output.variables["content_attention"], alone.weights)


def test_previous_mean_follows_the_mixed_attention(source, make_queries):
    attender = mix()
    output = attender(make_queries(4, 4), source.keys, source.values, source.mask)
    positions = padded_positions(source.lengths, source.keys.size(1))
    means = (output.weights * positions[:, None]).sum(-1)  # mean of the mixed attention, [B, T]
    location_means = (output.variables["location_attention"] * positions[:, None]).sum(-1)
    assert not torch.allclose(means, location_means)
    torch.testing.assert_close(output.state["location.previous_mean"], means[:, -1])
    torch.testing.assert_close(output.variables["previous_mean"][:, 1:], means[:, :-1])


def test_content_then_location_continues_after_the_content_match(make_source):
    """The noisy-start pattern: step 0 finds a token by content, step 1 takes "+1 step" from it."""
    lengths, target = (9, 7), torch.tensor([5, 2])
    source = make_source(lengths=lengths)
    keys = torch.zeros_like(source.keys)
    keys[torch.arange(2), target, 0] = 1.0  # the token to find by content
    attender = mix(content="scaled_dot")
    with torch.no_grad():
        attender.mix_layer.weight.zero_()
        attender.mix_layer.weight[0, 1] = 2 * BIG  # query feature 1 switches to location
        attender.mix_layer.bias.fill_(-BIG)
        attender.location.rho_layer.weight.zero_()
        attender.location.rho_layer.bias.copy_(torch.tensor([BIG, 1.0, -BIG]))  # previous + 1
    queries = torch.zeros(2, 3, D, dtype=torch.float64)
    queries[:, 0, 0] = 100.0  # step 0: content, look for feature 0
    queries[:, 1:, 1] = 1.0  # steps 1, 2: location
    output = attender(queries, keys, source.values, source.mask)
    zeros = torch.zeros(2, dtype=torch.float64)
    torch.testing.assert_close(output.variables["mix_weight"][:, 0], zeros)
    assert output.weights.argmax(-1).tolist() == [[5, 6, 7], [2, 3, 4]]


@pytest.mark.parametrize("content", ["additive", "multiplicative", "scaled_dot"])
def test_content_option(content, source, make_queries):
    attender = mix(content=content)
    assert attender.content_name == content
    output = attender(make_queries(4, 2), source.keys, source.values, source.mask)
    torch.testing.assert_close(output.weights.sum(-1), torch.ones(4, 2, dtype=torch.float64))


def test_sub_attender_options_pass_through(source):
    attender = mix(
        content="additive",
        content_options={"hidden_dim": 3},
        location_options={"weighter_hidden_dim": 4, "min_sigma": 0.5},
    )
    assert isinstance(attender.content, AdditiveAttender) and attender.content.hidden_dim == 3
    assert attender.location.weighter.hidden_size == 4 and attender.location.min_sigma == 0.5
    assert isinstance(mix(content="scaled_dot").content, ScaledDotAttender)


def test_state_layout(source):
    state = mix(content="additive").initial_state(source.keys, source.mask)
    assert set(state) == {
        "step",
        "source_lengths",
        "content.projected_keys",
        "location.hidden",
        "location.previous_mean",
        "location.relative_positions",
        "location.step_size",
        "location.inverse_length",
    }


@pytest.mark.parametrize(
    "options",
    [{"content": "location"}, {"content_options": {"bogus": 1}}, {"location_options": {"hidden": 3}}],
)
def test_bad_options_raise(options):
    with pytest.raises(ValueError, match="unknown"):
        MixAttender(D, D, **options)


def test_scaled_dot_content_needs_equal_dims():
    with pytest.raises(ValueError, match="query_dim == key_dim"):
        MixAttender(4, D, content="scaled_dot")
