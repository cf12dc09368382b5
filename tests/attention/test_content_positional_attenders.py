"""Scores of the content (Dubois eq. 3) and sinusoidal (eq. 4) attenders against their formulas."""

from __future__ import annotations

import math

import pytest
import torch

from attnlab.attention.content import (
    AdditiveAttender,
    MultiplicativeAttender,
    ScaledDotAttender,
)
from attnlab.attention.positional import (
    TransformerAttender,
    TransformerXLAttender,
    sinusoidal_encoding,
    source_positions,
)

D = 6


def softmax_rows(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.softmax(scores.masked_fill(mask.unsqueeze(1), float("-inf")), dim=-1)


def test_additive_score(source, make_queries):
    torch.manual_seed(0)
    attender = AdditiveAttender(D, D, 5, hidden_dim=4).double()
    assert attender.key_layer.out_features == 4
    queries = make_queries(4, 2)
    output = attender(queries, source.keys, source.values, source.mask)
    hidden = torch.tanh(
        (source.keys @ attender.key_layer.weight.T)[:, None]
        + (queries @ attender.query_layer.weight.T + attender.query_layer.bias)[:, :, None]
    )
    scores = (hidden @ attender.energy_layer.weight.T).squeeze(-1)
    torch.testing.assert_close(output.weights, softmax_rows(scores, source.mask))
    assert "projected_keys" in output.state


def test_multiplicative_score(source, make_queries):
    torch.manual_seed(0)
    attender = MultiplicativeAttender(3, D, 5).double()
    queries = make_queries(4, 2, query_dim=3)
    output = attender(queries, source.keys, source.values, source.mask)
    scores = torch.einsum("bsk,kq,btq->bts", source.keys, attender.query_layer.weight, queries)
    torch.testing.assert_close(output.weights, softmax_rows(scores, source.mask))


def test_scaled_dot_score(source, make_queries):
    queries = make_queries(4, 2)
    output = ScaledDotAttender(D, D, 5)(queries, source.keys, source.values, source.mask)
    scores = queries @ source.keys.transpose(1, 2) / math.sqrt(D)
    torch.testing.assert_close(output.weights, softmax_rows(scores, source.mask))


@pytest.mark.parametrize("cls", [ScaledDotAttender, TransformerAttender])
def test_parameter_free_attenders_need_equal_dims(cls):
    with pytest.raises(ValueError, match="query_dim == key_dim"):
        cls(4, 6)


@pytest.mark.parametrize(
    ("cls", "options"),
    [(AdditiveAttender, {"hidden_dim": 0}), (TransformerXLAttender, {"attention_dim": -1})],
)
def test_non_positive_sizes_raise(cls, options):
    with pytest.raises(ValueError, match="must be > 0"):
        cls(4, 6, **options)


def test_sinusoidal_encoding_formula():
    positions = torch.tensor([0.0, 1.0, 7.0, 30.0], dtype=torch.float64)
    encoding = sinusoidal_encoding(positions, 7)
    assert encoding.shape == (4, 7)
    for i in range(7):
        frequency = 10000.0 ** (-(2 * (i // 2)) / 7)
        angles = positions * frequency
        expected = torch.sin(angles) if i % 2 == 0 else torch.cos(angles)
        torch.testing.assert_close(encoding[:, i], expected)
    at_zero = torch.tensor([0.0, 1, 0, 1, 0, 1, 0], dtype=torch.float64)
    torch.testing.assert_close(encoding[0], at_zero)


def test_sinusoidal_encoding_integer_positions_and_batch_shape():
    encoding = sinusoidal_encoding(torch.arange(6).view(2, 3), 4)
    assert encoding.shape == (2, 3, 4) and encoding.dtype == torch.get_default_dtype()


def test_source_positions_rank_real_keys_whatever_the_padding():
    keys = torch.zeros(2, 5, 1)
    mask = torch.tensor([[True, True, False, False, False], [False, True, False, True, True]])
    positions = source_positions(keys, mask)
    torch.testing.assert_close(positions, torch.tensor([[0.0, 0, 0, 1, 2], [0, 0, 1, 0, 0]]))
    torch.testing.assert_close(source_positions(keys, None), torch.arange(5.0).expand(2, 5))


def test_transformer_score_formula_uses_the_absolute_step(source, make_queries):
    attender = TransformerAttender(D, D, 5)
    queries = make_queries(4, 2)
    state = {**attender.initial_state(source.keys, source.mask), "step": 3}
    output = attender(queries, source.keys, source.values, source.mask, state)
    p_s = sinusoidal_encoding(torch.arange(7, dtype=torch.float64), D)
    p_t = sinusoidal_encoding(torch.tensor([3.0, 4.0], dtype=torch.float64), D)
    scores = (queries + p_t) @ (source.keys + p_s).transpose(1, 2) / math.sqrt(D)
    torch.testing.assert_close(output.weights, softmax_rows(scores, source.mask))


def test_transformer_weights_depend_on_the_step(source, make_queries):
    attender = TransformerAttender(D, D, 5)
    query = make_queries(4, 1)[:, 0]
    state = attender.initial_state(source.keys, source.mask)
    at_0 = attender(query, source.keys, source.values, source.mask, state).weights
    at_5 = attender(query, source.keys, source.values, source.mask, {**state, "step": 5}).weights
    assert not torch.allclose(at_0[:2], at_5[:2], atol=1e-3)


def _xl(seed: int = 0, query_dim: int = D, key_dim: int = D) -> TransformerXLAttender:
    torch.manual_seed(seed)
    attender = TransformerXLAttender(query_dim, key_dim, 5, attention_dim=4).double()
    with torch.no_grad():
        attender.content_bias.normal_()
        attender.position_bias.normal_()
    return attender


@pytest.mark.parametrize("key_dim", [6, 5])
def test_transformer_xl_score_formula(key_dim, make_source, make_queries):
    attender = _xl(key_dim=key_dim)
    source = make_source(key_dim=key_dim)
    queries = make_queries(4, 3)
    state = {**attender.initial_state(source.keys, source.mask), "step": 2}
    output = attender(queries, source.keys, source.values, source.mask, state)
    q = queries @ attender.query_layer.weight.T  # [B, T, A]
    k = source.keys @ attender.key_layer.weight.T  # [B, S, A]
    offsets = torch.arange(7.0, dtype=torch.float64)[None, :] - torch.tensor([2.0, 3, 4])[:, None]
    relative = sinusoidal_encoding(offsets, attender.encoding_dim)  # [T, S, E]
    projected = relative @ attender.position_layer.weight.T  # [T, S, A]
    content = (q + attender.content_bias) @ k.transpose(1, 2)
    position = torch.einsum("bta,tsa->bts", q + attender.position_bias, projected)
    scores = (content + position) / math.sqrt(4)
    torch.testing.assert_close(output.weights, softmax_rows(scores, source.mask))


def test_transformer_xl_position_term_is_relative(make_source, make_queries):
    """Without the content term the score depends on s - t only: moving the step by 2 moves it
    by 2 source positions."""
    attender = _xl()
    with torch.no_grad():
        attender.key_layer.weight.zero_()
    source = make_source(lengths=(9,))
    query = make_queries(1, 1)
    state = attender.initial_state(source.keys)
    scores_1 = attender.score(query, source.keys, {**state, "step": 1})
    scores_3 = attender.score(query, source.keys, {**state, "step": 3})
    torch.testing.assert_close(scores_3[..., 2:], scores_1[..., :-2])
    assert not torch.allclose(scores_3, scores_1)
