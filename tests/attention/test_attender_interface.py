"""Contract tests every registered attender must pass (the interface of attnlab.attention.base)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from attnlab.attention import (
    ATTENDERS,
    Attender,
    AttentionOutput,
    AttentionState,
    build_attender,
)

QUERY_DIM, KEY_DIM, VALUE_DIM = 6, 6, 5
NAMES = sorted(ATTENDERS)


def build(name: str, **options: object) -> Attender:
    """In evaluation mode: the contract is about deterministic outputs (the Shift Attender samples
    its moves in training; tests/attention/test_shift_attender.py covers that)."""
    torch.manual_seed(0)
    return build_attender(name, QUERY_DIM, KEY_DIM, VALUE_DIM, **options).double().eval()


def run_steps(
    attender: Attender, queries: torch.Tensor, source: Any, state: AttentionState | None = None
) -> list[AttentionOutput]:
    """Thread the state through ``queries.size(1)`` single-step calls."""
    if state is None:
        state = attender.initial_state(source.keys, source.mask)
    outputs = []
    for i in range(queries.size(1)):
        output = attender(queries[:, i], source.keys, source.values, source.mask, state)
        state = output.state
        outputs.append(output)
    return outputs


@pytest.mark.parametrize("name", NAMES)
def test_weights_are_distributions_with_zero_on_padding(name, source, make_queries):
    attender = build(name)
    output = attender(make_queries(4, 3), source.keys, source.values, source.mask)
    weights = output.weights
    assert weights.shape == (4, 3, source.keys.size(1))
    assert torch.all(weights >= 0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(4, 3, dtype=weights.dtype))
    assert torch.all(weights.masked_select(source.mask.unsqueeze(1).expand_as(weights)) == 0)


@pytest.mark.parametrize("name", NAMES)
def test_glimpse_is_weighted_sum_of_values(name, source, make_queries):
    output = build(name)(make_queries(4, 3), source.keys, source.values, source.mask)
    assert output.glimpse.shape == (4, 3, VALUE_DIM)
    torch.testing.assert_close(output.glimpse, output.weights @ source.values)


@pytest.mark.parametrize("name", NAMES)
def test_single_step_shapes(name, source, make_queries):
    output = build(name)(make_queries(4, 1)[:, 0], source.keys, source.values, source.mask)
    source_len = source.keys.size(1)
    assert output.glimpse.shape == (4, VALUE_DIM)
    assert output.weights.shape == (4, source_len)
    for variable in output.variables.values():
        assert variable.shape in {(4,), (4, source_len)}
    assert output.state["step"] == 1


@pytest.mark.parametrize("name", NAMES)
def test_variables_are_per_step(name, source, make_queries):
    output = build(name)(make_queries(4, 3), source.keys, source.values, source.mask)
    for variable_name, variable in output.variables.items():
        assert variable.shape in {(4, 3), (4, 3, source.keys.size(1))}, variable_name


@pytest.mark.parametrize("name", NAMES)
def test_single_steps_match_one_multi_step_call(name, source, make_queries):
    attender = build(name)
    queries = make_queries(4, 4)
    whole = attender(queries, source.keys, source.values, source.mask)
    steps = run_steps(attender, queries, source)
    torch.testing.assert_close(torch.stack([o.weights for o in steps], 1), whole.weights)
    torch.testing.assert_close(torch.stack([o.glimpse for o in steps], 1), whole.glimpse)
    for variable_name, variable in whole.variables.items():
        stacked = torch.stack([o.variables[variable_name] for o in steps], 1)
        torch.testing.assert_close(stacked, variable, msg=variable_name)
    assert set(steps[-1].state) == set(whole.state)
    for key, value in whole.state.items():
        if isinstance(value, torch.Tensor):
            torch.testing.assert_close(steps[-1].state[key], value, msg=key)
        else:
            assert steps[-1].state[key] == value, key


@pytest.mark.parametrize("name", NAMES)
def test_continuing_from_a_state_matches_one_call(name, source, make_queries):
    attender = build(name)
    queries = make_queries(4, 5)
    whole = attender(queries, source.keys, source.values, source.mask)
    first = attender(queries[:, :2], source.keys, source.values, source.mask)
    rest = attender(queries[:, 2:], source.keys, source.values, source.mask, first.state)
    torch.testing.assert_close(torch.cat([first.weights, rest.weights], 1), whole.weights)


@pytest.mark.parametrize("name", NAMES)
def test_state_is_not_mutated_and_step_advances(name, source, make_queries):
    attender = build(name)
    state = attender.initial_state(source.keys, source.mask)
    assert state["step"] == 0
    torch.testing.assert_close(state["source_lengths"], torch.tensor(source.lengths))
    before = dict(state)
    output = attender(make_queries(4, 3), source.keys, source.values, source.mask, state)
    assert output.state is not state
    assert state == before  # same keys, same objects
    assert output.state["step"] == 3
    again = attender(make_queries(4, 2), source.keys, source.values, source.mask, output.state)
    assert again.state["step"] == 5


@pytest.mark.parametrize("name", NAMES)
def test_gradients_reach_every_parameter(name, source, make_queries):
    attender = build(name)
    queries = make_queries(4, 3).requires_grad_()
    values = source.values.clone().requires_grad_()
    output = attender(queries, source.keys, values, source.mask)
    (output.glimpse**2).sum().backward()
    parameters = dict(attender.named_parameters())
    for parameter_name, parameter in parameters.items():
        assert parameter.grad is not None, parameter_name
        assert torch.isfinite(parameter.grad).all(), parameter_name
    if parameters:
        assert any(bool(p.grad.abs().sum() > 0) for p in parameters.values())
    assert queries.grad is not None and queries.grad.abs().sum() > 0
    assert values.grad is not None and values.grad.abs().sum() > 0


@pytest.mark.parametrize("name", NAMES)
def test_padding_does_not_change_real_positions(name, make_source, make_queries):
    attender = build(name)
    padded = make_source(lengths=(6, 4, 1, 3), source_len=9)  # random keys on the padding
    queries = make_queries(4, 3)
    batched = attender(queries, padded.keys, padded.values, padded.mask)
    for b, length in enumerate(padded.lengths):
        keys, values = padded.keys[b : b + 1, :length], padded.values[b : b + 1, :length]
        alone = attender(queries[b : b + 1], keys, values)
        torch.testing.assert_close(batched.weights[b : b + 1, :, :length], alone.weights)
        torch.testing.assert_close(batched.glimpse[b : b + 1], alone.glimpse)


@pytest.mark.parametrize("name", NAMES)
def test_float32_inputs_give_float32_outputs(name, make_source, make_queries):
    attender = build(name).float()
    source = make_source(dtype=torch.float32)
    output = attender(make_queries(4, 2, dtype=torch.float32), source.keys, source.values, source.mask)
    assert output.weights.dtype == output.glimpse.dtype == torch.float32
    assert torch.isfinite(output.glimpse).all()


@pytest.mark.parametrize("name", NAMES)
def test_wrong_shapes_raise_value_error(name, source, make_queries):
    attender = build(name)
    query = make_queries(4, 2)
    with pytest.raises(ValueError, match="query"):
        attender(make_queries(4, 2, query_dim=QUERY_DIM + 1), source.keys, source.values)
    with pytest.raises(ValueError, match="query"):
        attender(query[:3], source.keys, source.values)
    with pytest.raises(ValueError, match="query"):
        attender(query.unsqueeze(0), source.keys, source.values)
    with pytest.raises(ValueError, match="keys"):
        attender(query, source.keys[..., :-1], source.values)
    with pytest.raises(ValueError, match="values"):
        attender(query, source.keys, source.values[..., :-1])
    with pytest.raises(ValueError, match="values"):
        attender(query, source.keys, source.values[:, :-1])
    with pytest.raises(ValueError, match="key_padding_mask"):
        attender(query, source.keys, source.values, source.mask.double())
    with pytest.raises(ValueError, match="key_padding_mask"):
        attender(query, source.keys, source.values, source.mask[:, :-1])


@pytest.mark.parametrize("name", NAMES)
def test_all_padding_rows_raise_value_error(name, source, make_queries):
    mask = source.mask.clone()
    mask[1] = True
    with pytest.raises(ValueError, match="all padding"):
        build(name)(make_queries(4, 1), source.keys, source.values, mask)


@pytest.mark.parametrize("name", NAMES)
def test_unknown_option_raises_value_error(name):
    with pytest.raises(ValueError, match="unknown option"):
        build_attender(name, QUERY_DIM, KEY_DIM, VALUE_DIM, not_an_option=1)


def test_unknown_attender_raises_value_error():
    with pytest.raises(ValueError, match="unknown attender"):
        build_attender("not_an_attender", QUERY_DIM, KEY_DIM)


@pytest.mark.parametrize("name", NAMES)
def test_value_dim_defaults_to_key_dim(name, source, make_queries):
    attender = build_attender(name, QUERY_DIM, KEY_DIM).double()
    assert attender.value_dim == KEY_DIM
    output = attender(make_queries(4, 1), source.keys, source.keys, source.mask)
    assert output.glimpse.shape == (4, 1, KEY_DIM)


@pytest.mark.parametrize("name", ["additive", "multiplicative", "transformer_xl", "location", "mix", "shift"])
def test_query_dim_may_differ_from_key_dim(name, make_source, make_queries):
    attender = build_attender(name, 3, KEY_DIM, VALUE_DIM).double()
    source = make_source()
    output = attender(make_queries(4, 2, query_dim=3), source.keys, source.values, source.mask)
    assert output.glimpse.shape == (4, 2, VALUE_DIM)


@pytest.mark.parametrize("name", NAMES)
def test_stateful_flag(name):
    assert build(name).stateful == (name in {"location", "mix", "shift"})


@pytest.mark.parametrize("name", NAMES)
def test_device_agnostic_on_meta_tensors(name):
    """No tensor is created on a hard-coded device (a run on the meta device would then fail),
    and nothing reads tensor values back to the host (meta tensors have none)."""
    attender = build_attender(name, QUERY_DIM, KEY_DIM, VALUE_DIM).to("meta")
    keys = torch.empty(3, 7, KEY_DIM, device="meta")
    values = torch.empty(3, 7, VALUE_DIM, device="meta")
    state = attender.initial_state(keys)
    output = attender(torch.empty(3, 2, QUERY_DIM, device="meta"), keys, values, None, state)
    assert output.weights.device.type == output.glimpse.device.type == "meta"
    assert all(v.device.type == "meta" for v in output.state.values() if torch.is_tensor(v))


def test_every_public_name_of_the_package_is_importable():
    import attnlab.attention as package

    missing = [name for name in package.__all__ if not hasattr(package, name)]
    assert missing == []
