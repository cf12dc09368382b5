"""The addition / multiplication problems (Raffel & Ellis 2015 §2, Hochreiter & Schmidhuber 1997)."""

from __future__ import annotations

import pytest
import torch

from attnlab.tasks.memory_problems import (
    MIN_LENGTH,
    generate_memory_batch,
    is_correct,
    padded_length,
    pool_the_padding,
    sample_lengths,
)

PROBLEMS = ["addition", "multiplication"]


def _batch(problem: str, seed: int = 0, batch_size: int = 300, t0: int = 20):
    generator = torch.Generator().manual_seed(seed)
    lengths = sample_lengths("fixed", batch_size, generator, t0=t0)
    return generate_memory_batch(problem, batch_size, lengths, generator)


@pytest.mark.parametrize("problem", PROBLEMS)
@pytest.mark.parametrize("t0", [20, 57, 500])
def test_markers(problem: str, t0: int) -> None:
    batch = _batch(problem, t0=t0)
    markers = batch.inputs[..., 1]
    real = ~batch.padding_mask
    # exactly two +1 markers per sequence, at the reported positions
    assert torch.all((markers == 1).sum(dim=1) == 2)
    ones = (markers == 1).nonzero()[:, 1].view(-1, 2)
    assert torch.equal(ones, batch.marker_positions)
    first, second = batch.marker_positions.unbind(1)
    assert torch.all((first >= 0) & (first <= 8))
    assert torch.all(second > first)
    assert torch.all(second < batch.lengths // 2)
    # -1 at the last step always, at the first step unless it is marked
    rows = torch.arange(len(batch.lengths))
    assert torch.all(markers[rows, batch.lengths - 1] == -1)
    assert torch.all(markers[first != 0, 0] == -1)
    assert torch.all(markers[first == 0, 0] == 1)
    # everything else on real steps is 0
    n_minus = (markers == -1).sum(dim=1)
    assert torch.equal(n_minus, 2 - (first == 0).long())
    assert torch.all(markers[real].abs() <= 1)


def test_first_marker_covers_its_range() -> None:
    batch = _batch("addition", batch_size=2000)
    assert set(batch.marker_positions[:, 0].tolist()) == set(range(9))
    # at the minimum length T = 20 the second marker can reach index 9 = T // 2 - 1
    assert batch.marker_positions[batch.lengths == 20, 1].max() == 9


@pytest.mark.parametrize("problem", PROBLEMS)
def test_values_and_targets(problem: str) -> None:
    batch = _batch(problem, t0=100)
    values = batch.inputs[..., 0]
    real = ~batch.padding_mask
    if problem == "addition":
        assert values[real].min() >= -1 and values[real].max() <= 1
        assert values[real].min() < -0.9  # really U(-1, 1), not U(0, 1)
    else:
        assert values[real].min() >= 0 and values[real].max() <= 1
    x = values.gather(1, batch.marker_positions)
    expected = 0.5 + (x[:, 0] + x[:, 1]) / 4 if problem == "addition" else x[:, 0] * x[:, 1]
    torch.testing.assert_close(batch.targets, expected)
    assert batch.targets.shape == (300,)
    assert torch.all(is_correct(batch.targets + 0.039, batch.targets))
    assert not torch.any(is_correct(batch.targets + 0.041, batch.targets))


def test_the_addition_problem_as_the_paper_text_states_it() -> None:
    generator = torch.Generator().manual_seed(0)
    batch = generate_memory_batch("addition", 300, 100, generator, addition="paper_text")
    values = batch.inputs[..., 0]
    assert values.min() >= 0 and values.max() <= 1 and values.max() > 0.99
    x = values.gather(1, batch.marker_positions)
    torch.testing.assert_close(batch.targets, x[:, 0] + x[:, 1])
    assert batch.targets.max() > 1.5  # in [0, 2], not squeezed into [0, 1]
    with pytest.raises(ValueError, match="unknown addition definition 'hs'"):
        generate_memory_batch("addition", 2, 100, generator, addition="hs")


def test_padding_is_zero_and_mask_matches_lengths() -> None:
    batch = _batch("multiplication", t0=100)
    t_max = batch.inputs.size(1)
    assert t_max == int(batch.lengths.max())
    expected_mask = torch.arange(t_max).unsqueeze(0) >= batch.lengths.unsqueeze(1)
    assert torch.equal(batch.padding_mask, expected_mask)
    assert batch.padding_mask.dtype == torch.bool
    assert torch.all(batch.inputs[batch.padding_mask] == 0)
    assert batch.inputs.shape == (300, t_max, 2)


def test_fixed_lengths_within_bounds() -> None:
    generator = torch.Generator().manual_seed(0)
    for t0 in (50, 100, 1000, 10_000, 57):
        lengths = sample_lengths("fixed", 2000, generator, t0=t0)
        high = int(1.1 * t0 + 1e-9)
        assert lengths.dtype == torch.long
        assert lengths.min() >= t0 and lengths.max() <= high
        if t0 == 50:
            assert set(lengths.tolist()) == set(range(50, 56))


def test_variable_lengths_within_bounds() -> None:
    lengths = sample_lengths("variable", 5000, torch.Generator().manual_seed(0))
    assert lengths.min() >= 50 and lengths.max() <= 10_000
    assert lengths.min() < 100 and lengths.max() > 9_900  # spans the range


def test_reproducible_with_same_seed() -> None:
    a = _batch("addition", seed=3, t0=100)
    b = _batch("addition", seed=3, t0=100)
    c = _batch("addition", seed=4, t0=100)
    for name in ("inputs", "padding_mask", "targets", "lengths", "marker_positions"):
        assert torch.equal(getattr(a, name), getattr(b, name))
    assert not torch.equal(a.targets, c.targets)


def test_int_length() -> None:
    batch = generate_memory_batch("addition", 4, 30, torch.Generator().manual_seed(0))
    assert batch.inputs.shape == (4, 30, 2)
    assert not batch.padding_mask.any()
    assert torch.equal(batch.lengths, torch.full((4,), 30))


def test_errors() -> None:
    generator = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match="unknown problem 'subtraction'"):
        generate_memory_batch("subtraction", 2, 50, generator)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=f"too short.*at least {MIN_LENGTH}"):
        generate_memory_batch("addition", 2, MIN_LENGTH - 1, generator)
    with pytest.raises(ValueError, match=r"batch rows \[1\]"):
        generate_memory_batch("addition", 2, torch.tensor([50, 12]), generator)
    with pytest.raises(ValueError, match="shape"):
        generate_memory_batch("addition", 3, torch.tensor([50, 60]), generator)
    for bad in (0, -5):
        with pytest.raises(ValueError, match=r"T0 \(t0\) must be an int >= 1"):
            sample_lengths("fixed", 2, generator, t0=bad)
    with pytest.raises(ValueError, match="needs t0"):
        sample_lengths("fixed", 2, generator)
    with pytest.raises(ValueError, match="t0 must be None"):
        sample_lengths("variable", 2, generator, t0=100)
    with pytest.raises(ValueError, match="unknown length setting"):
        sample_lengths("long", 2, generator, t0=100)  # type: ignore[arg-type]


def test_pooled_padding_is_the_authors_constant_width_with_nothing_masked() -> None:
    assert [padded_length(t0) for t0 in (20, 57, 100, 1000, 10_000)] == [22, 63, 110, 1100, 11_000]
    batch = _batch("addition", t0=57)
    pooled = pool_the_padding(batch, padded_length(57))
    assert pooled.inputs.shape == (300, 63, 2) and not pooled.padding_mask.any()
    width = batch.inputs.size(1)
    assert torch.equal(pooled.inputs[:, :width], batch.inputs)
    assert torch.all(pooled.inputs[:, width:] == 0)
    assert torch.equal(pooled.targets, batch.targets) and torch.equal(pooled.lengths, batch.lengths)
    with pytest.raises(ValueError, match="width 40 is shorter than the batch"):
        pool_the_padding(batch, 40)
