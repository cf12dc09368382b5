"""The Location Attender (Dubois et al. 2020, §5.1) and its building blocks."""

from __future__ import annotations

import math

import pytest
import torch

from attnlab.attention.location import LocationAttender, leaky_clamp, softstair, straight_through_clamp

D = 6
BIG = 30.0  # a logit that saturates a sigmoid gate


def location(**options: object) -> LocationAttender:
    torch.manual_seed(0)
    return LocationAttender(D, D, 5, **options).double()


def set_weighter_output(attender: LocationAttender, rho: list[float], sigma: float = 0.0) -> None:
    """Make the weighter's final layers constant: rho logits ``[previous, steps, bias]``."""
    with torch.no_grad():
        attender.rho_layer.weight.zero_()
        attender.rho_layer.bias.copy_(torch.tensor(rho))
        attender.sigma_layer.weight.zero_()
        attender.sigma_layer.bias.fill_(sigma)


def relative_positions(length: int) -> torch.Tensor:
    return torch.arange(length, dtype=torch.float64) / max(length - 1, 1)


# ------------------------------------------------------------------------------- soft staircase


def test_softstair_is_near_integer_on_plateaus():
    n = torch.arange(-3.0, 4.0, dtype=torch.float64)
    for offset in (0.0, 0.1, 0.2):
        assert torch.all((softstair(n + offset) - n).abs() < 3e-3)
    for offset in (0.8, 0.9, 0.999):
        assert torch.all((softstair(n + offset) - (n + 1)).abs() < 3e-3)
    torch.testing.assert_close(softstair(n), n + torch.sigmoid(torch.tensor(-10.0)).double())
    torch.testing.assert_close(softstair(n + 0.5), n + 0.5)


def test_softstair_is_monotone_and_almost_continuous():
    x = torch.linspace(-4, 4, 80001, dtype=torch.float64)
    y = softstair(x)
    assert torch.all(y.diff() >= 0)
    n = torch.arange(-3.0, 4.0, dtype=torch.float64)
    jumps = softstair(n) - softstair(n - 1e-12)
    torch.testing.assert_close(jumps, torch.full_like(n, 2 / (1 + math.exp(10))))  # ~9e-5
    assert torch.all(jumps < 1e-4)


def test_softstair_sharpness_and_gradient():
    x = torch.tensor([0.3, 1.5], dtype=torch.float64, requires_grad=True)
    softstair(x).sum().backward()
    torch.testing.assert_close(x.grad[1], torch.tensor(5.0, dtype=torch.float64))  # 20 / 4
    assert x.grad[0] > 0
    expected = torch.sigmoid(torch.tensor(-0.5))
    torch.testing.assert_close(softstair(torch.tensor(0.4), sharpness=5.0), expected)


# ---------------------------------------------------------------------------------- leaky clamp


def test_leaky_clamp_is_identity_on_unit_interval():
    x = torch.linspace(0, 1, 101, dtype=torch.float64)
    torch.testing.assert_close(leaky_clamp(x), x)


def test_leaky_clamp_is_leaky_outside():
    x = torch.tensor([-3.0, -0.5, 1.5, 4.0], dtype=torch.float64)
    expected = torch.tensor([-0.03, -0.005, 1.005, 1.03], dtype=torch.float64)
    torch.testing.assert_close(leaky_clamp(x), expected)
    expected = torch.tensor([-0.3, -0.05, 1.05, 1.3], dtype=torch.float64)
    torch.testing.assert_close(leaky_clamp(x, slope=0.1), expected)
    dense = leaky_clamp(torch.linspace(-5, 5, 10001, dtype=torch.float64))
    assert torch.all(dense.diff() > 0)


def test_straight_through_clamp_clamps_forward_and_passes_the_whole_gradient():
    x = torch.tensor([-0.5, 0.3, 1.8], dtype=torch.float64, requires_grad=True)
    value = straight_through_clamp(x)
    torch.testing.assert_close(value, torch.tensor([0.0, 0.3, 1.0], dtype=torch.float64))
    value.sum().backward()
    torch.testing.assert_close(x.grad, torch.ones(3, dtype=torch.float64))


def test_clamp_gradient_option_pulls_a_mu_parked_past_the_end(source, make_queries):
    """Previous mean + bias gate put mu past the end; only the straight-through clamp's gradient
    tells the bias gate to close (the leaky clamp passes 1% of it)."""
    gradients = {}
    for clamp in ("leaky", "straight_through"):
        attender = location(clamp_gradient=clamp)
        set_weighter_output(attender, [BIG, 0.0, 0.0])  # previous-mean gate on, 0 steps, bias gate at 0.5
        state = attender.initial_state(source.keys, source.mask)
        state["previous_mean"] = torch.full_like(state["previous_mean"], 0.8)
        output = attender(make_queries(4, 1), source.keys, source.values, source.mask, state)
        assert torch.all(output.variables["mu"] <= 1.0 + 0.01 * 0.5 + 1e-9)
        output.variables["mu"].sum().backward()
        gradients[clamp] = attender.rho_layer.bias.grad[2].item()
    assert gradients["straight_through"] == pytest.approx(100 * gradients["leaky"], rel=1e-6)
    assert gradients["straight_through"] > 0
    with pytest.raises(ValueError, match="clamp_gradient"):
        location(clamp_gradient="hard")


# ------------------------------------------------------------------------- where the peak lands


def peaks(weights: torch.Tensor) -> list[int]:
    return weights.argmax(dim=-1).flatten().tolist()


def test_bias_gate_puts_mu_at_one_so_the_peak_is_the_last_real_position(source, make_queries):
    attender = location()
    set_weighter_output(attender, [-BIG, 0.0, BIG])
    output = attender(make_queries(4, 1)[:, 0], source.keys, source.values, source.mask)
    ones = torch.ones(4, dtype=torch.float64)
    torch.testing.assert_close(output.variables["mu"], ones, atol=1e-4, rtol=0)
    assert peaks(output.weights) == [n - 1 for n in source.lengths]


@pytest.mark.parametrize("k", [0, 1, 2])
def test_k_steps_from_nothing_peaks_at_position_k(k, make_source, make_queries):
    source = make_source(lengths=(7, 5, 3))
    attender = location()
    set_weighter_output(attender, [-BIG, float(k), -BIG])
    output = attender(make_queries(3, 1)[:, 0], source.keys, source.values, source.mask)
    assert peaks(output.weights) == [k, k, k]
    expected = torch.full((3,), float(k), dtype=torch.float64)
    torch.testing.assert_close(output.variables["rho_steps"], expected, atol=1e-4, rtol=0)


@pytest.mark.parametrize("k", [-2, 1, 3])
def test_previous_mean_plus_k_steps_moves_the_peak_by_k(k, make_source, make_queries):
    source = make_source(lengths=(9, 8))
    attender = location()
    set_weighter_output(attender, [BIG, float(k), -BIG])
    start = torch.tensor([4, 4])
    state = attender.initial_state(source.keys, source.mask)
    previous = start / (torch.tensor(source.lengths) - 1.0)
    state = attender.with_previous_mean(state, previous.double())
    output = attender(make_queries(2, 1)[:, 0], source.keys, source.values, source.mask, state)
    assert peaks(output.weights) == (start + k).tolist()
    torch.testing.assert_close(output.variables["previous_mean"], previous.double())


def test_incremental_attention_walks_one_position_per_step(make_source, make_queries):
    source = make_source(lengths=(10, 8))
    attender = location()
    set_weighter_output(attender, [BIG, 1.0, -BIG])
    output = attender(make_queries(2, 6), source.keys, source.values, source.mask)
    assert output.weights.argmax(-1).tolist() == [[1, 2, 3, 4, 5, 6]] * 2


def test_weights_are_the_normalised_gaussian_pdf(source, make_queries):
    output = location()(make_queries(4, 3), source.keys, source.values, source.mask)
    mu, sigma = output.variables["mu"], output.variables["sigma"]
    for b, length in enumerate(source.lengths):
        positions = relative_positions(length)
        gaussian = torch.distributions.Normal(mu[b, :, None], sigma[b, :, None])
        pdf = gaussian.log_prob(positions).exp()
        torch.testing.assert_close(output.weights[b, :, :length], pdf / pdf.sum(-1, keepdim=True))


def test_mu_is_the_clamped_weighted_building_blocks(source, make_queries):
    output = location()(make_queries(4, 4), source.keys, source.values, source.mask)
    v = output.variables
    step_size = 1.0 / (torch.tensor(source.lengths, dtype=torch.float64) - 1).clamp_min(1)
    mu = v["rho_previous"] * v["previous_mean"] + v["rho_steps"] * step_size[:, None]
    mu = mu + v["rho_bias"]
    torch.testing.assert_close(v["mu"], leaky_clamp(mu))
    assert torch.all((v["rho_previous"] > 0) & (v["rho_previous"] < 1))
    assert torch.all((v["rho_bias"] > 0) & (v["rho_bias"] < 1))


def test_previous_mean_is_the_mean_position_of_the_previous_attention(source, make_queries):
    attender = location()
    output = attender(make_queries(4, 4), source.keys, source.values, source.mask)
    positions = torch.zeros(4, source.keys.size(1), dtype=torch.float64)
    for b, length in enumerate(source.lengths):
        positions[b, :length] = relative_positions(length)
    means = (output.weights * positions[:, None]).sum(-1)  # [B, T]
    previous = output.variables["previous_mean"]
    torch.testing.assert_close(previous[:, 0], torch.zeros(4, dtype=torch.float64))
    torch.testing.assert_close(previous[:, 1:], means[:, :-1])
    torch.testing.assert_close(output.state["previous_mean"], means[:, -1])
    torch.testing.assert_close(attender.attention_mean(output.weights, output.state), means)


def test_sigma_scales_with_one_over_the_source_length(make_source, make_queries):
    source = make_source(lengths=(8, 4, 2, 1))
    attender = location()
    query = make_queries(1, 2).expand(4, 2, D)  # the same query for every sequence
    sigma = attender(query, source.keys, source.values, source.mask).variables["sigma"]
    lengths = torch.tensor(source.lengths, dtype=torch.float64)[:, None]
    scaled = sigma * lengths
    torch.testing.assert_close(scaled, scaled[:1].expand_as(scaled))
    assert torch.all(scaled >= 0.27 - 1e-12)
    set_weighter_output(attender, [0.0, 0.0, 0.0], sigma=-5.0)
    sigma = attender(query, source.keys, source.values, source.mask).variables["sigma"]
    torch.testing.assert_close(sigma, (0.27 / lengths).expand(4, 2))


def test_min_sigma_option(source, make_queries):
    attender = location(min_sigma=0.5)
    set_weighter_output(attender, [0.0, 0.0, 0.0], sigma=-5.0)
    sigma = attender(make_queries(4, 1), source.keys, source.values, source.mask).variables["sigma"]
    expected = 0.5 / torch.tensor(source.lengths, dtype=torch.float64)
    torch.testing.assert_close(sigma[:, 0], expected)


def test_single_key_sequences_get_all_the_weight(make_source, make_queries):
    source = make_source(lengths=(1, 1))
    attender = location()
    set_weighter_output(attender, [BIG, 3.0, BIG])  # mu far outside [0, 1]
    output = attender(make_queries(2, 3), source.keys, source.values, source.mask)
    torch.testing.assert_close(output.weights, torch.ones(2, 3, 1, dtype=torch.float64))
    state = attender.initial_state(source.keys)
    torch.testing.assert_close(state["step_size"], torch.ones(2, dtype=torch.float64))
    torch.testing.assert_close(state["relative_positions"], torch.zeros(2, 1, dtype=torch.float64))


def test_initial_state_layout(source):
    state = location(weighter_hidden_dim=7).initial_state(source.keys, source.mask)
    assert set(state) == {
        "step",
        "source_lengths",
        "hidden",
        "previous_mean",
        "relative_positions",
        "step_size",
        "inverse_length",
    }
    assert state["hidden"].shape == (4, 7) and torch.all(state["hidden"] == 0)
    torch.testing.assert_close(state["previous_mean"], torch.zeros(4, dtype=torch.float64))
    torch.testing.assert_close(state["relative_positions"][0], relative_positions(7))
    assert torch.all(state["relative_positions"][source.mask] == 0)


def test_learned_initial_hidden(source, make_queries):
    attender = location(learn_initial_hidden=True)
    with torch.no_grad():
        attender.initial_hidden.fill_(0.5)
    state = attender.initial_state(source.keys, source.mask)
    torch.testing.assert_close(state["hidden"], torch.full((4, 64), 0.5, dtype=torch.float64))
    output = attender(make_queries(4, 2), source.keys, source.values, source.mask)
    (output.glimpse**2).sum().backward()
    assert attender.initial_hidden.grad is not None and attender.initial_hidden.grad.abs().sum() > 0


def test_option_sizes(source, make_queries):
    attender = location(resize_dim=3, weighter_hidden_dim=5)
    assert attender.resize.out_features == 3 and attender.weighter.hidden_size == 5
    output = attender(make_queries(4, 2), source.keys, source.values, source.mask)
    assert output.state["hidden"].shape == (4, 5)


@pytest.mark.parametrize(
    "options",
    [
        {"min_sigma": 0.0},
        {"resize_dim": 0},
        {"staircase_sharpness": -1.0},
        {"clamp_slope": 1.0},
        {"clamp_slope": -0.1},
    ],
)
def test_invalid_options_raise(options):
    with pytest.raises(ValueError, match="option"):
        LocationAttender(D, D, **options)


def test_default_initialisation_walks_one_word_per_step(source, make_queries):
    """The default initial_rho starts near a one-word step from the previous attention."""
    attender = location()
    with torch.no_grad():
        attender.rho_layer.weight.zero_()  # isolate the initial biases from the random weights
    v = attender(make_queries(4, 3), source.keys, source.values, source.mask).variables
    torch.testing.assert_close(v["rho_steps"], torch.full_like(v["rho_steps"], 1.0), atol=1e-3, rtol=0)
    torch.testing.assert_close(
        v["rho_previous"], torch.full_like(v["rho_previous"], torch.sigmoid(torch.tensor(1.0)).item())
    )
    torch.testing.assert_close(
        v["rho_bias"], torch.full_like(v["rho_bias"], torch.sigmoid(torch.tensor(-2.0)).item())
    )


def test_initial_rho_none_keeps_pytorch_initialisation(source, make_queries):
    """initial_rho=None: gates near 0.5 and the staircase near 0 steps."""
    attender = location(initial_rho=None)
    output = attender(make_queries(4, 1), source.keys, source.values, source.mask)
    v = output.variables
    assert torch.all((v["rho_steps"] > -0.5) & (v["rho_steps"] < 0.5))
    assert torch.all((v["mu"] > 0.2) & (v["mu"] < 0.9))
    assert torch.isfinite(output.weights).all()


def test_staircase_gradient_options():
    x = torch.tensor([0.0, 1.1, -0.9], requires_grad=True)
    straight = location().staircase
    straight(x, 20.0).sum().backward()
    torch.testing.assert_close(x.grad, torch.ones(3))  # straight-through: identity gradient
    x.grad = None
    exact = location(staircase_gradient="exact").staircase
    value = exact(x, 20.0)
    value.sum().backward()
    assert torch.all(x.grad < 1e-2)  # the exact staircase is nearly flat off the half-integers
    torch.testing.assert_close(value, straight(x, 20.0).detach())
    with pytest.raises(ValueError, match="staircase_gradient"):
        location(staircase_gradient="round")
    with pytest.raises(ValueError, match="initial_rho"):
        location(initial_rho=(1.0, 2.0))
