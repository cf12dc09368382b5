"""The short-attention-span language models (Daniluk et al. 2017): every variant of one class."""

import pytest
import torch
import torch.nn.functional as F

from attnlab.models.language_model import (
    VARIANTS,
    LanguageModel,
    count_parameters,
    hidden_dim_for_budget,
    output_parts,
    parameter_count,
)

V, E, H, L, N = 23, 8, 12, 3, 4
CONFIGS = [
    {"variant": "lstm"},
    {"variant": "attention", "window": L},
    {"variant": "key_value", "window": L},
    {"variant": "key_value_predict", "window": L},
    *({"variant": "ngram", "ngram": n} for n in (2, 3, 4, 5)),
]
IDS = [f"{c['variant']}{c.get('ngram', '')}" for c in CONFIGS]


def _model(config, hidden=H) -> LanguageModel:
    torch.manual_seed(0)
    parts = output_parts(config["variant"], config.get("ngram", N))
    return LanguageModel(V, embedding_dim=E, hidden_dim=hidden * parts, **config).eval()


def _log_likelihood(model, inputs, targets, resets, cuts):
    """Sum of log p(target) with the sequence cut into segments at ``cuts``, state carried."""
    bounds = [0, *cuts, inputs.size(1)]
    state, total = None, torch.zeros(inputs.size(0))
    for start, end in zip(bounds[:-1], bounds[1:]):
        output = model(inputs[:, start:end], resets[:, start:end], state)
        state = model.detach_state(output.state)
        log_probs = torch.log_softmax(output.logits, -1)
        total += log_probs.gather(-1, targets[:, start:end, None]).squeeze(-1).sum(1)
    return total


@pytest.mark.parametrize("config", CONFIGS, ids=IDS)
def test_log_likelihood_does_not_depend_on_segmentation(config):
    """The memory window and the LSTM state carry across BPTT segments: one segment or many."""
    model = _model(config)
    generator = torch.Generator().manual_seed(1)
    inputs = torch.randint(3, V, (2, 29), generator=generator)
    targets = torch.randint(3, V, (2, 29), generator=generator)
    resets = torch.zeros(2, 29, dtype=torch.bool)
    resets[:, 0] = True
    resets[0, 13] = True
    whole = _log_likelihood(model, inputs, targets, resets, [])
    for cuts in ([1, 2, 3, 4], [5, 13, 14, 20], [7, 27]):
        torch.testing.assert_close(_log_likelihood(model, inputs, targets, resets, cuts), whole)


@pytest.mark.parametrize("config", CONFIGS, ids=IDS)
def test_a_document_is_scored_the_same_whatever_came_before(config):
    """Resets clear the LSTM state and the memory: a document after another == the document alone."""
    model = _model(config)
    generator = torch.Generator().manual_seed(2)
    first, second = (
        torch.randint(3, V, (1, 9), generator=generator),
        torch.randint(3, V, (1, 8), generator=generator),
    )
    both = torch.cat([first, second], 1)
    resets = torch.zeros_like(both, dtype=torch.bool)
    resets[0, [0, 9]] = True
    together = model(both, resets).logits[:, 9:]
    alone = model(second, resets[:, 9:]).logits
    torch.testing.assert_close(together, alone)
    # Without the reset, the earlier document does change the scores.
    assert not torch.allclose(model(both, torch.zeros_like(resets)).logits[:, 9:], alone)


@pytest.mark.parametrize("variant", ["attention", "key_value", "key_value_predict"])
def test_attentive_heads_follow_equations_4_10_12(variant):
    """h*_t = tanh(W^r r_t + W^x x_t) with x = h, v or p, and r_t the glimpse over earlier steps."""
    model = _model({"variant": variant, "window": L})
    inputs = torch.randint(3, V, (2, 10), generator=torch.Generator().manual_seed(3))
    outputs, _ = model.lstm(model.embedding(inputs))
    d = model.part_dim
    parts = {
        "attention": (outputs, outputs, outputs),
        "key_value": (outputs[..., :d], outputs[..., d:], outputs[..., d:]),
    }
    parts["key_value_predict"] = (outputs[..., :d], outputs[..., d : 2 * d], outputs[..., 2 * d :])
    keys, values, own = parts[variant]
    result = model(inputs)
    w_r, w_x = model.combine.weight[:, :d], model.combine.weight[:, d:]
    for t in range(10):
        window = list(range(max(0, t - L), t))
        if window:
            m = torch.tanh(
                model.attention.key_layer(keys[:, window]) + model.attention.query_layer(keys[:, t : t + 1])
            )
            alpha = torch.softmax(model.attention.energy_layer(m).squeeze(-1), -1)
            r = (alpha.unsqueeze(-1) * values[:, window]).sum(1)
        else:
            r = torch.zeros(2, d)
        h_star = torch.tanh(r @ w_r.T + own[:, t] @ w_x.T)
        torch.testing.assert_close(result.logits[:, t], model.decoder(h_star))
    assert result.attention.shape == (2, 10, L)


def test_initialisation_follows_section_4_1():
    model = _model({"variant": "key_value_predict", "window": L})
    hidden = model.hidden_dim
    forget = model.lstm.bias_ih_l0[hidden : 2 * hidden] + model.lstm.bias_hh_l0[hidden : 2 * hidden]
    assert torch.all(forget == 1.0)
    for name, parameter in model.named_parameters():
        if "bias_" not in name:
            assert parameter.abs().max() <= 0.1, name


@pytest.mark.parametrize("config", CONFIGS, ids=IDS)
def test_training_step_reduces_loss_and_gradients_reach_every_parameter(config):
    model = _model(config).train()
    inputs = torch.randint(3, V, (4, 12), generator=torch.Generator().manual_seed(4))
    targets = torch.roll(inputs, -1, 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(5):
        loss = F.cross_entropy(model(inputs).logits.reshape(-1, V), targets.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
        optimizer.step()
        losses.append(float(loss.detach()))
    assert losses[-1] < losses[0]


def test_parameter_counts_and_the_budget_helper():
    model = LanguageModel(1000, variant="lstm", embedding_dim=30, hidden_dim=30)
    lstm = 4 * 30 * (30 + 30) + 8 * 30
    assert count_parameters(model) == lstm + 30 * 1000 + 1000
    assert count_parameters(model, include_embedding=True) == count_parameters(model) + 30 * 1000
    assert parameter_count(1000, variant="lstm", embedding_dim=30, hidden_dim=30) == count_parameters(model)
    budget = count_parameters(model)
    for variant in VARIANTS:
        for window in (1, 15):
            hidden = hidden_dim_for_budget(budget, 1000, variant=variant, embedding_dim=30, window=window)
            parts = output_parts(variant)
            assert hidden % parts == 0
            count = parameter_count(1000, variant=variant, embedding_dim=30, hidden_dim=hidden, window=window)
            step = [
                parameter_count(
                    1000, variant=variant, embedding_dim=30, hidden_dim=hidden + s * parts, window=window
                )
                for s in (-1, 1)
            ]
            # Closest achievable count: the neighbouring sizes are no closer to the budget.
            assert abs(count - budget) <= min(abs(c - budget) for c in step)
    assert hidden_dim_for_budget(budget, 1000, variant="lstm", embedding_dim=30) == 30
    # The paper's trend (Fig. 2c): splitting the output leaves room for a larger LSTM.
    sizes = [
        hidden_dim_for_budget(budget, 1000, variant=v, embedding_dim=30)
        for v in ("lstm", "key_value", "key_value_predict")
    ]
    assert sizes == sorted(sizes) and sizes[0] < sizes[-1]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"variant": "key_value_predict", "hidden_dim": 10}, "multiple of 3"),
        ({"variant": "ngram", "ngram": 1}, "ngram"),
        ({"variant": "attention", "window": 0}, "window"),
        ({"variant": "bogus"}, "unknown variant"),
        ({"dropout": 1.0}, "dropout"),
    ],
)
def test_bad_options(options, message):
    with pytest.raises(ValueError, match=message):
        LanguageModel(V, **options)


def test_repeat_state_copies_each_row():
    model = _model({"variant": "key_value", "window": L})
    state = model(torch.randint(3, V, (2, 5))).state
    repeated = model.repeat_state(state, 3)
    assert repeated["h"].shape == (1, 6, H * 2) and repeated["memory"]["values"].shape == (6, L, H)
    torch.testing.assert_close(repeated["memory"]["values"][3], state["memory"]["values"][1])
