"""The Shift Attender (issue 6): exact one-word moves of the previous attention at any length."""

from __future__ import annotations

import pytest
import torch

from attnlab.attention import build_attender
from attnlab.attention.shift import MOVES, ShiftAttender, shift_targets

QUERY_DIM = KEY_DIM = 6
VALUE_DIM = 5


def only_move(move: str, moves: tuple[str, ...] = MOVES, choice: str = "straight_through") -> ShiftAttender:
    """An attender whose chooser always picks ``move``: zero weights, a large bias on it."""
    attender = ShiftAttender(QUERY_DIM, KEY_DIM, VALUE_DIM, moves=moves, choice=choice).double()
    with torch.no_grad():
        attender.move_layer.weight.zero_()
        attender.move_layer.bias.fill_(-10.0)
        attender.move_layer.bias[moves.index(move)] = 10.0
    return attender


def one_hot_rows(weights: torch.Tensor) -> list[int]:
    assert torch.all((weights == 0) | (weights == 1))
    return weights.argmax(-1).tolist()


def test_shift_targets_saturate_at_the_ends_for_right_and_left_padding():
    mask = torch.tensor([[False] * 4, [False, False, True, True], [True, False, False, False]])
    keys = torch.zeros(3, 4, 1)
    assert shift_targets(mask, keys, +1).tolist() == [[1, 2, 3, 3], [1, 1, 2, 3], [0, 2, 3, 3]]
    assert shift_targets(mask, keys, -1).tolist() == [[0, 0, 1, 2], [0, 0, 2, 3], [0, 1, 1, 2]]
    assert shift_targets(None, keys, +1).tolist() == [[1, 2, 3, 3]] * 3


@pytest.mark.parametrize(("move", "expected"), [("forward", [1, 2, 3, 4, 5, 6]), ("stay", [0] * 6)])
def test_moves_from_the_first_word_are_exact_one_hots(source, make_queries, move, expected):
    attender = only_move(move)
    output = attender(make_queries(4, 6), source.keys, source.values, source.mask)
    lengths = torch.tensor(source.lengths)
    positions = one_hot_rows(output.weights)
    for row, length in enumerate(lengths.tolist()):
        assert positions[row] == [min(p, length - 1) for p in expected]
    torch.testing.assert_close(output.variables["position"], output.weights.argmax(-1).double())


def test_backward_from_the_end_walks_to_the_first_word_and_stays(source, make_queries):
    attender = only_move("end")
    state = attender.initial_state(source.keys, source.mask)
    state = attender(make_queries(4, 1), source.keys, source.values, source.mask, state).state
    backward = only_move("backward")
    output = backward(make_queries(4, 8), source.keys, source.values, source.mask, state)
    for row, length in enumerate(source.lengths):
        assert one_hot_rows(output.weights)[row] == [max(length - 2 - i, 0) for i in range(8)]


def test_content_move_is_the_content_attention(source, make_queries):
    attender = only_move("content")
    output = attender(make_queries(4, 3), source.keys, source.values, source.mask)
    torch.testing.assert_close(output.weights, output.variables["content_attention"])


def test_softmax_choice_mixes_the_moves(source, make_queries):
    attender = ShiftAttender(QUERY_DIM, KEY_DIM, VALUE_DIM, moves=("start", "end"), choice="softmax").double()
    with torch.no_grad():
        attender.move_layer.weight.zero_()
        attender.move_layer.bias.zero_()
    output = attender(make_queries(4, 1), source.keys, source.values, source.mask)
    state = attender.initial_state(source.keys, source.mask)
    torch.testing.assert_close(output.weights[:, 0], (state["start"] + state["end"]) / 2)


def test_straight_through_choice_gives_every_move_a_gradient(source, make_queries):
    """The forward pass uses one move only; the backward pass scores all of them."""
    attender = only_move("forward")
    with torch.no_grad():
        attender.move_layer.bias.fill_(0.0)
        attender.move_layer.bias[MOVES.index("forward")] = 1.0
    output = attender(make_queries(4, 3), source.keys, source.values, source.mask)
    assert set(one_hot_rows(output.weights[0])) <= set(range(7))
    (output.glimpse**2).sum().backward()
    assert torch.all(attender.move_layer.bias.grad != 0)


def test_without_content_move_there_is_no_content_attender(source, make_queries):
    attender = ShiftAttender(QUERY_DIM, KEY_DIM, VALUE_DIM, moves=("forward", "backward")).double()
    assert attender.content is None
    output = attender(make_queries(4, 2), source.keys, source.values, source.mask)
    assert "content_attention" not in output.variables
    assert set(output.variables) == {"move_forward", "move_backward", "position"}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"moves": ()}, "at least one"),
        ({"moves": ("forward", "jump")}, "moves must be one of"),
        ({"moves": ("forward", "forward")}, "names a move twice"),
        ({"choice": "sample"}, "choice must be one of"),
        ({"content": "cosine"}, "content must be one of"),
        ({"hidden_dim": 0}, "hidden_dim must be > 0"),
    ],
)
def test_bad_options_raise_clear_errors(options, message):
    with pytest.raises(ValueError, match=message):
        build_attender("shift", QUERY_DIM, KEY_DIM, **options)


def test_gumbel_choice_samples_moves_in_training_and_takes_the_best_in_evaluation(make_source, make_queries):
    """Equal logits: training picks different moves for different queries (exploration, each
    attention still a one-hot); evaluation always picks the largest logit."""
    source = make_source(lengths=(9,) * 64)
    attender = only_move("forward", choice="gumbel")
    with torch.no_grad():
        attender.move_layer.bias.zero_()
        attender.move_layer.bias[MOVES.index("forward")] = 0.1
    queries = make_queries(64, 2)
    torch.manual_seed(0)
    sampled = attender.train()(queries, source.keys, source.values, source.mask)
    chosen = torch.stack([sampled.variables[f"move_{move}"] for move in MOVES]).argmax(0)
    assert len(set(chosen.flatten().tolist())) >= 4
    torch.testing.assert_close(sampled.weights.sum(-1), torch.ones(64, 2, dtype=torch.float64))
    best = attender.eval()(queries, source.keys, source.values, source.mask)
    assert torch.all(best.variables["move_forward"] == 1)
    assert ShiftAttender(QUERY_DIM, KEY_DIM).choice == "gumbel"  # the default
