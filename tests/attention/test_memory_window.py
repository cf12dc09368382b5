"""Sliding-window memory attention and the N-gram concatenation (Daniluk et al. 2017, eqs. 1–3, 7–9, 13)."""

import pytest
import torch

from attnlab.attention.content import AdditiveAttender
from attnlab.attention.memory_window import NGramConcatenation, SlidingWindowAttention

B, T, D, L = 3, 11, 6, 4


def _resets() -> torch.Tensor:
    resets = torch.zeros(B, T, dtype=torch.bool)
    resets[:, 0] = True
    resets[0, 5] = True
    resets[1, 1] = True
    resets[1, 9] = True
    return resets


def _reference_attention(module, query, keys, values, resets):
    """Eqs. 1–3 step by step: the window is the previous L steps of the same document."""
    glimpses = torch.zeros(B, T, module.value_dim)
    weights = torch.zeros(B, T, module.window)
    for b in range(B):
        start = 0
        for t in range(T):
            if resets[b, t]:
                start = t
            positions = [s for s in range(t - module.window, t) if s >= start]
            if not positions:
                continue
            memory = keys[b, positions]  # Y_t, oldest first
            m = torch.tanh(module.key_layer(memory) + module.query_layer(query[b, t]))  # eq. 1
            alpha = torch.softmax(module.energy_layer(m).squeeze(-1), 0)  # eq. 2
            glimpses[b, t] = alpha @ values[b, positions]  # eq. 3
            weights[b, t, module.window - len(positions) :] = alpha
    return glimpses, weights


@pytest.fixture
def inputs():
    torch.manual_seed(0)
    return torch.randn(B, T, D), torch.randn(B, T, D), torch.randn(B, T, D + 1)


def test_window_attention_matches_the_equations_step_by_step(inputs):
    query, keys, values = inputs
    module = SlidingWindowAttention(D, D, D + 1, window=L)
    output = module(query, keys, values, resets=_resets())
    expected_glimpse, expected_weights = _reference_attention(module, query, keys, values, _resets())
    assert output.glimpse.shape == (B, T, D + 1) and output.weights.shape == (B, T, L)
    torch.testing.assert_close(output.weights, expected_weights)
    torch.testing.assert_close(output.glimpse, expected_glimpse)


def test_weights_are_zero_outside_the_document_and_sum_to_one_inside(inputs):
    query, keys, values = inputs
    weights = SlidingWindowAttention(D, D, D + 1, window=L)(
        query, keys, values, resets=_resets()
    ).weights.detach()
    assert torch.all(weights[:, 0] == 0)  # first step of a document: nothing to attend to
    assert torch.all(weights[0, 5] == 0) and torch.all(weights[1, 9] == 0)
    # Row 0, step 7: two earlier steps (5, 6) of its document -> only the last two positions.
    assert torch.all(weights[0, 7, :2] == 0) and weights[0, 7, 2:].sum() == pytest.approx(1.0)
    # Row 2 never resets after step 0: full windows from step L on.
    torch.testing.assert_close(weights[2, L:].sum(-1), torch.ones(T - L))
    assert torch.all((weights > 0).sum(-1) <= L)


def test_memory_carries_across_segments_exactly(inputs):
    """Chunked with the state threaded through == one call over the whole sequence."""
    query, keys, values = inputs
    module = SlidingWindowAttention(D, D, D + 1, window=L)
    resets = _resets()
    whole = module(query, keys, values, resets=resets)
    state, glimpses, weights = None, [], []
    for start, end in [(0, 2), (2, 3), (3, 9), (9, T)]:  # segments shorter and longer than L
        part = module(
            query[:, start:end],
            keys[:, start:end],
            values[:, start:end],
            state=state,
            resets=resets[:, start:end],
        )
        state = part.state
        glimpses.append(part.glimpse)
        weights.append(part.weights)
    torch.testing.assert_close(torch.cat(glimpses, 1), whole.glimpse)
    torch.testing.assert_close(torch.cat(weights, 1), whole.weights)
    assert state["step"] == T and state["values"].shape == (B, L, D + 1)


def test_single_step_calls_match_the_segment_call(inputs):
    query, keys, values = inputs
    module = SlidingWindowAttention(D, D, D + 1, window=L)
    resets = _resets()
    whole = module(query, keys, values, resets=resets)
    state = None
    for t in range(T):
        step = module(query[:, t], keys[:, t], values[:, t], state=state, resets=resets[:, t])
        state = step.state
        assert step.glimpse.shape == (B, D + 1)
        torch.testing.assert_close(step.weights, whole.weights[:, t])


def test_padded_steps_are_never_attended(inputs):
    query, keys, values = inputs
    padding = torch.zeros(B, T, dtype=torch.bool)
    padding[1, 3] = True
    weights = SlidingWindowAttention(D, D, D + 1, window=L)(
        query, keys, values, padding, resets=_resets()
    ).weights
    for t in range(4, 4 + L):  # step 3 is position L-1-(t-4) of step t's window
        assert weights[1, t, L - 1 - (t - 4)] == 0


def test_full_window_equals_the_additive_attender_without_biases(inputs):
    """Eqs. 1–2 are Bahdanau's additive score: the existing attender on the same window agrees."""
    query, keys, values = inputs
    module = SlidingWindowAttention(D, D, D + 1, window=L)
    additive = AdditiveAttender(D, D, D + 1)
    with torch.no_grad():
        additive.key_layer.weight.copy_(module.key_layer.weight)
        additive.query_layer.weight.copy_(module.query_layer.weight)
        additive.query_layer.bias.zero_()
        additive.energy_layer.weight.copy_(module.energy_layer.weight)
    output = module(query, keys, values)
    t = T - 1
    expected = additive(query[:, t], keys[:, t - L : t], values[:, t - L : t])
    torch.testing.assert_close(output.weights[:, t], expected.weights)
    torch.testing.assert_close(output.glimpse[:, t], expected.glimpse)


def test_gradients_are_finite_with_empty_windows(inputs):
    query, keys, values = (tensor.clone().requires_grad_() for tensor in inputs)
    module = SlidingWindowAttention(D, D, D + 1, window=L)
    module(query, keys, values, resets=torch.ones(B, T, dtype=torch.bool)).glimpse.sum().backward()
    assert all(torch.isfinite(tensor.grad).all() for tensor in (query, keys, values))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda m, q, k, v: m(q[..., :2], k, v), "query"),
        (lambda m, q, k, v: m(q, k[:, :3], v), "keys"),
        (lambda m, q, k, v: m(q, k, v[..., :2]), "values"),
        (lambda m, q, k, v: m(q, k, v, resets=torch.zeros(B, T)), "resets"),
        (lambda m, q, k, v: m(q, k, v, torch.zeros(B, T + 1, dtype=torch.bool)), "key_padding_mask"),
    ],
)
def test_bad_shapes_are_reported(inputs, call, message):
    with pytest.raises(ValueError, match=message):
        call(SlidingWindowAttention(D, D, D + 1, window=L), *inputs)
    with pytest.raises(ValueError, match="window"):
        SlidingWindowAttention(D, D, window=0)


def _reference_ngram(outputs, n, slice_dim, resets):
    """Eq. 13: slice i (1-based) of the output of step t-i+1, zero before the document start."""
    result = torch.zeros_like(outputs)
    for b in range(outputs.size(0)):
        start = 0
        for t in range(outputs.size(1)):
            if resets[b, t]:
                start = t
            for i in range(n - 1):
                if t - i >= start:
                    piece = slice(i * slice_dim, (i + 1) * slice_dim)
                    result[b, t, piece] = outputs[b, t - i, piece]
    return result


@pytest.mark.parametrize("n", [2, 3, 4, 5])
def test_ngram_concatenation_matches_eq_13_and_carries_across_segments(n):
    torch.manual_seed(n)
    slice_dim = 2
    outputs = torch.randn(B, T, (n - 1) * slice_dim)
    module = NGramConcatenation(slice_dim, n)
    resets = _resets()
    whole, _ = module(outputs, resets=resets)
    torch.testing.assert_close(whole, _reference_ngram(outputs, n, slice_dim, resets))
    state, parts = None, []
    for start, end in [(0, 1), (1, 4), (4, T)]:
        part, state = module(outputs[:, start:end], state, resets=resets[:, start:end])
        parts.append(part)
    torch.testing.assert_close(torch.cat(parts, 1), whole)
