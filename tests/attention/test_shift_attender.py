"""The Shift Attender (issue 6): exact one-word moves of the previous attention at any length."""

from __future__ import annotations

import pytest
import torch

from attnlab.attention import build_attender
from attnlab.attention.shift import (
    MOVES,
    ShiftAttender,
    attend_heads,
    can_attend_together,
    heads_initial_state,
    move_stride,
    shift_targets,
)

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
        ({"moves": ("forward", "jump")}, "moves must name moves among"),
        ({"moves": ("forward", "forward0")}, "moves must name moves among"),
        ({"moves": ("forward", "forward1")}, "stride must be at least 2"),
        ({"moves": ("forward", "backward2", "backward2")}, "names a move twice"),
        ({"moves": ("forward", "forward")}, "names a move twice"),
        ({"choice": "sample"}, "choice must be one of"),
        ({"content": "cosine"}, "content must be one of"),
        ({"hidden_dim": 0}, "hidden_dim must be > 0"),
        ({"content_strength": 0.0}, "content_strength must be > 0"),
        (
            {"content_strength": 5.0, "moves": ("forward", "stay")},
            "content_strength needs the 'content' move",
        ),
        ({"content_strength": 5.0, "content": "additive"}, "content_strength needs multiplicative"),
        ({"content_steps": 0}, "content_steps must be an int >= 1"),
        ({"content_steps": 1.5}, "content_steps must be an int >= 1"),
        ({"content_steps": True}, "content_steps must be an int >= 1"),
        ({"content_steps": 1, "moves": ("forward", "stay")}, "content_steps needs a move among"),
        ({"content_steps": 1, "moves": ("content", "last_match")}, "content_steps needs a move other than"),
        ({"content_once": 1}, "content_once must be true or false"),
        ({"content_once": True, "moves": ("forward", "stay")}, "content_once needs a move among"),
        (
            {"shared_match_query": 1, "moves": ("content", "last_match")},
            "shared_match_query must be true or false",
        ),
        ({"shared_match_query": True}, "shared_match_query needs both the 'content' and 'last_match'"),
        (
            {"shared_match_query": True, "moves": ("last_match", "forward")},
            "shared_match_query needs both the 'content' and 'last_match'",
        ),
        (
            {"shared_match_query": True, "moves": ("content", "last_match"), "content": "additive"},
            "shared_match_query needs multiplicative or scaled_dot",
        ),
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


def saturated_content_attender(content_strength: float | None) -> ShiftAttender:
    """A content-only attender whose multiplicative scores are huge (differences in the
    hundreds), as a trained model's become: its softmax sits on one word."""
    attender = only_move("content")
    attender.content_strength = content_strength
    with torch.no_grad():
        attender.content.query_layer.weight.copy_(100.0 * torch.eye(QUERY_DIM, dtype=torch.float64))
    return attender


def test_content_strength_keeps_a_saturated_content_attention_trainable(make_source, make_queries):
    """Issue 26: a content attention that settled on a wrong word has no gradient toward the
    others (a loss on what it reads scales with their weights) unless its scores are bounded;
    with ``content_strength=beta`` (cosine scores) every real word keeps at least
    ``exp(-2 beta)`` times the largest weight and a gradient toward it, and the attended word is
    the same."""
    source = make_source(lengths=(7, 5, 3))
    queries = make_queries(3, 1)
    strength = 5.0
    outputs = {}
    for name, content_strength in (("unbounded", None), ("bounded", strength)):
        attender = saturated_content_attender(content_strength)
        keys = source.keys.clone().requires_grad_(True)
        output = attender(queries, keys, source.values, source.mask)
        # the loss asks to read the value of the word the attention puts the least weight on
        weights = output.weights[:, 0]
        least = weights.masked_fill(source.mask, 2.0).argmin(-1)
        wanted = source.values[torch.arange(3), least]
        ((output.glimpse[:, 0] - wanted) ** 2).sum().backward()
        outputs[name] = (weights.detach(), keys.grad[torch.arange(3), least].abs().sum(-1))
    (unbounded, unbounded_grad), (bounded, bounded_grad) = outputs["unbounded"], outputs["bounded"]
    assert torch.equal(unbounded.argmax(-1), bounded.argmax(-1))
    assert torch.all(unbounded.masked_fill(source.mask, 1.0).min(-1).values < 1e-30)
    assert torch.all(unbounded_grad < 1e-20)
    real = ~source.mask
    floor = bounded.max(-1, keepdim=True).values * torch.exp(torch.tensor(-2 * strength))
    assert torch.all(bounded[real] >= floor.expand_as(bounded)[real] * (1 - 1e-9))
    assert torch.all(bounded_grad > 1e-3)
    assert ShiftAttender(QUERY_DIM, KEY_DIM).content_strength is None  # the default


@pytest.mark.parametrize(
    ("move", "stride"),
    [("forward", 1), ("backward", -1), ("forward2", 2), ("backward3", -3), ("forward12", 12)]
    + [(move, None) for move in ("content", "stay", "start", "end", "forward0", "forwards2", "Forward2")],
)
def test_move_stride_reads_the_signed_offset_of_shift_moves(move, stride):
    assert move_stride(move) == stride


STRIDE_MOVES = (*MOVES, "forward2", "backward2", "forward3")


@pytest.mark.parametrize(("move", "stride"), [("forward2", 2), ("forward3", 3), ("forward", 1)])
def test_stride_moves_from_the_first_word_step_k_words_and_saturate_at_the_last(
    source, make_queries, move, stride
):
    attender = only_move(move, moves=STRIDE_MOVES)
    output = attender(make_queries(4, 5), source.keys, source.values, source.mask)
    for row, length in enumerate(source.lengths):
        assert one_hot_rows(output.weights)[row] == [min(stride * (i + 1), length - 1) for i in range(5)]
    assert output.weights[source.mask.unsqueeze(1).expand_as(output.weights)].abs().sum() == 0


def test_backward2_from_the_end_walks_two_words_at_a_time_with_left_padding(make_queries):
    """Positions are ranks among the real keys, so a stride counts real words, not tensor slots."""
    keys = torch.randn(2, 7, QUERY_DIM, dtype=torch.float64)
    values = torch.randn(2, 7, VALUE_DIM, dtype=torch.float64)
    mask = torch.tensor([[False] * 7, [True, True, False, False, False, False, False]])
    end = only_move("end", moves=STRIDE_MOVES)
    state = end(make_queries(2, 1), keys, values, mask).state
    output = only_move("backward2", moves=STRIDE_MOVES)(make_queries(2, 4), keys, values, mask, state)
    assert one_hot_rows(output.weights) == [[4, 2, 0, 0], [4, 2, 2, 2]]


def test_forward2_is_the_route_through_intermediate_noise(make_queries):
    """Hand-built Intermediate-noise source ``000 n1 t1 n2 t2 n3 t3 .`` (Dubois et al. 2020): the
    gold attention is ``0 2 4 6 7``; ``stay`` then ``forward2`` at every step gives exactly that,
    at this length and at a longer one (``forward2`` from the last table lands on ``.``)."""
    for length, gold in ((8, [0, 2, 4, 6, 7]), (12, [0, 2, 4, 6, 8, 10, 11])):
        keys = torch.randn(1, length, QUERY_DIM, dtype=torch.float64)
        values = torch.randn(1, length, VALUE_DIM, dtype=torch.float64)
        stay = only_move("stay", moves=STRIDE_MOVES)
        first = stay(make_queries(1, 1), keys, values, None)
        forward2 = only_move("forward2", moves=STRIDE_MOVES)
        rest = forward2(make_queries(1, len(gold) - 1), keys, values, None, first.state)
        assert one_hot_rows(torch.cat([first.weights, rest.weights], dim=1))[0] == gold
        assert rest.variables["move_forward2"].eq(1).all()
        assert "forward2_targets" in rest.state and "forward3_targets" in rest.state


def test_stride_moves_are_not_among_the_default_moves():
    attender = ShiftAttender(QUERY_DIM, KEY_DIM, VALUE_DIM)
    assert attender.moves == MOVES and attender.move_layer.out_features == 6
    state = attender.initial_state(torch.zeros(1, 3, KEY_DIM), None)
    assert not any(key.startswith(("forward2", "backward2")) for key in state)


def _last_match_attender(strength: float = 5.0) -> ShiftAttender:
    """Chooser always on ``last_match``; its and the content's query maps the identity, its match
    bias ``-strength / 2`` (a word matches when its cosine with the query is above 1/2)."""
    moves = ("content", "last_match", "forward")
    attender = only_move("last_match", moves=moves)
    attender.content_strength = strength
    with torch.no_grad():
        attender.last_match_query.weight.copy_(torch.eye(QUERY_DIM, dtype=torch.float64))
        attender.content.query_layer.weight.copy_(torch.eye(QUERY_DIM, dtype=torch.float64))
        attender.last_match_bias.fill_(-strength / 2)
    return attender


@pytest.mark.parametrize("strength", [5.0, 20.0])
def test_last_match_takes_the_last_of_several_equal_matches(strength):
    """Noisy multi (Dubois et al. 2020): the words after each ``!`` have the same key; the content
    move splits its weight between them, ``last_match`` puts it on the last one, more so with a
    larger strength; with no match at all it still sums to one."""
    torch.manual_seed(0)
    attender = _last_match_attender(strength)
    direction = torch.zeros(QUERY_DIM, dtype=torch.float64)
    direction[0] = 1.0
    keys = -direction.repeat(1, 7, 1) + 0.1 * torch.randn(1, 7, QUERY_DIM, dtype=torch.float64)
    keys[0, [1, 4]] = direction  # the two "words after a !"
    values = torch.randn(1, 7, VALUE_DIM, dtype=torch.float64)
    output = attender(direction.view(1, 1, -1), keys, values, None)
    weights = output.weights[0, 0]
    assert weights.argmax().item() == 4 and output.variables["move_last_match"].eq(1).all()
    assert weights[4] > 0.9 and weights[4] > 10 * weights[1]
    content = output.variables["content_attention"][0, 0]
    torch.testing.assert_close(output.variables["last_match_attention"][0, 0], weights)
    assert content.argmax().item() in (1, 4) and abs(content[1] - content[4]) < 1e-6  # a tie
    if strength == 20.0:
        assert weights[4] > 0.999
    no_match = attender(-direction.view(1, 1, -1), -keys[:, [1, 4]], values[:, [1, 4]], None).weights
    torch.testing.assert_close(no_match.sum(-1), torch.ones(1, 1, dtype=torch.float64))


def test_last_match_ignores_padding_on_either_side(make_queries):
    torch.manual_seed(0)
    attender = _last_match_attender()
    keys = torch.randn(1, 5, QUERY_DIM, dtype=torch.float64)
    values = torch.randn(1, 5, VALUE_DIM, dtype=torch.float64)
    queries = make_queries(1, 3)
    plain = attender(queries, keys, values, None).weights
    pad = torch.randn(1, 2, QUERY_DIM, dtype=torch.float64)
    for padded_keys, mask, real in (
        (torch.cat([keys, pad], 1), torch.tensor([[False] * 5 + [True] * 2]), slice(0, 5)),
        (torch.cat([pad, keys], 1), torch.tensor([[True] * 2 + [False] * 5]), slice(2, 7)),
    ):
        padded_values = torch.cat([values, values[:, :2]], 1)
        weights = attender(queries, padded_keys, padded_values, mask).weights
        torch.testing.assert_close(weights[..., real], plain)
        assert weights[mask.unsqueeze(1).expand_as(weights)].abs().sum() == 0


def test_last_match_has_its_own_parameters_only_when_asked_for():
    assert not hasattr(ShiftAttender(QUERY_DIM, KEY_DIM, VALUE_DIM), "last_match_query")
    attender = ShiftAttender(QUERY_DIM, KEY_DIM, VALUE_DIM, moves=(*MOVES, "last_match"))
    assert attender.last_match_query.weight.shape == (KEY_DIM, QUERY_DIM)
    assert attender.move_layer.out_features == 7


# content_steps: the content-type moves only at the first decoder steps (an inductive bias)

CONTENT_STEP_MOVES = ("content", "last_match", "forward", "stay")


def _content_first_attender(
    content_steps: int | None, choice: str = "straight_through", content_once: bool = False
) -> ShiftAttender:
    """Chooser prefers ``content`` (then ``last_match``) at every step; ``forward`` next best."""
    attender = ShiftAttender(
        QUERY_DIM,
        KEY_DIM,
        VALUE_DIM,
        moves=CONTENT_STEP_MOVES,
        choice=choice,
        content_steps=content_steps,
        content_once=content_once,
    ).double()
    with torch.no_grad():
        attender.move_layer.weight.zero_()
        attender.move_layer.bias.copy_(torch.tensor([10.0, 9.0, 5.0, -10.0]))
    return attender


@pytest.mark.parametrize("choice", ["straight_through", "gumbel", "softmax"])
def test_content_steps_masks_content_type_moves_after_the_first_steps(source, make_queries, choice):
    """Steps 0-1 may take ``content``; from step 2 on ``content`` and ``last_match`` have weight 0
    (training or evaluation), whether the steps come in one call or one at a time."""
    attender = _content_first_attender(content_steps=2, choice=choice).train()
    queries = make_queries(4, 6)
    torch.manual_seed(0)
    output = attender(queries, source.keys, source.values, source.mask)
    for move in ("move_content", "move_last_match"):
        assert torch.all(output.variables[move][:, 2:] == 0)
    assert torch.all(output.variables["move_forward"][:, 2:] + output.variables["move_stay"][:, 2:] > 0.99)
    if choice == "straight_through":
        assert torch.all(output.variables["move_content"][:, :2] == 1)
    attender.eval()
    whole = attender(queries, source.keys, source.values, source.mask)
    state = attender.initial_state(source.keys, source.mask)
    for step in range(6):
        one = attender(queries[:, step], source.keys, source.values, source.mask, state)
        state = one.state
        torch.testing.assert_close(one.weights, whole.weights[:, step])
        if step < 2:
            assert torch.all(one.variables["move_content"] > 0.5)
        else:
            assert torch.all(one.variables["move_content"] == 0)


def test_content_steps_keeps_gradients_flowing_to_every_allowed_move(source, make_queries):
    attender = _content_first_attender(content_steps=1)
    queries = make_queries(4, 4).requires_grad_(True)
    output = attender(queries, source.keys, source.values, source.mask)
    (output.glimpse**2).sum().backward()
    grad = attender.move_layer.bias.grad
    assert torch.isfinite(grad).all() and torch.isfinite(queries.grad).all()
    assert torch.all(grad != 0)  # content/last_match through step 0, forward/stay through every step
    assert torch.isfinite(attender.move_hidden.weight.grad).all()
    assert attender.last_match_query.weight.grad is not None  # the step-0 last_match candidate


def test_content_steps_default_changes_nothing(source, make_queries):
    torch.manual_seed(0)
    plain = _content_first_attender(content_steps=None)
    assert plain.content_steps is None and ShiftAttender(QUERY_DIM, KEY_DIM).content_steps is None
    restricted = _content_first_attender(content_steps=100)
    restricted.load_state_dict(plain.state_dict())  # same parameters: the option adds none
    queries = make_queries(4, 5)
    first = plain(queries, source.keys, source.values, source.mask)
    second = restricted(queries, source.keys, source.values, source.mask)
    torch.testing.assert_close(first.weights, second.weights)
    assert torch.all(first.variables["move_content"] == 1)


@pytest.mark.parametrize("choice", ["straight_through", "gumbel"])
def test_content_once_allows_one_content_type_move_per_sequence(source, make_queries, choice):
    """The chooser prefers content at every step: it takes it at step 0 only, then forward; the
    state carries the fact over calls, one step at a time or all at once alike."""
    attender = _content_first_attender(None, choice, content_once=True).eval()
    queries = make_queries(4, 5)
    whole = attender(queries, source.keys, source.values, source.mask)
    assert torch.all(whole.variables["move_content"][:, 0] == 1)
    assert torch.all(whole.variables["move_content"][:, 1:] + whole.variables["move_last_match"][:, 1:] == 0)
    assert torch.all(whole.variables["move_forward"][:, 1:] == 1)
    assert whole.state["content_used"].all()
    state = attender.initial_state(source.keys, source.mask)
    assert not state["content_used"].any()
    for step in range(5):
        one = attender(queries[:, step], source.keys, source.values, source.mask, state)
        state = one.state
        torch.testing.assert_close(one.weights, whole.weights[:, step])
    attender.train()
    (attender(queries, source.keys, source.values, source.mask).glimpse ** 2).sum().backward()
    grad = attender.move_layer.bias.grad
    assert torch.isfinite(grad).all() and torch.all(grad != 0)


def test_content_once_waits_for_the_first_content_type_move():
    """Rows that have not taken a content-type move may still take one (here: forward is
    preferred, so content stays available and is never taken)."""
    attender = _content_first_attender(None, content_once=True)
    with torch.no_grad():
        attender.move_layer.bias.copy_(torch.tensor([1.0, 0.0, 5.0, -10.0]))
    keys = torch.randn(2, 6, KEY_DIM, dtype=torch.float64)
    output = attender(torch.randn(2, 4, QUERY_DIM, dtype=torch.float64), keys, keys[..., :VALUE_DIM], None)
    assert torch.all(output.variables["move_forward"] == 1) and not output.state["content_used"].any()


# shared_match_query: content and last_match compare the keys with one query map


def _shared_match_attender(content: str, shared: bool, move: str = "last_match") -> ShiftAttender:
    """Chooser always on ``move`` among content / last_match / forward; strength 5."""
    torch.manual_seed(0)
    attender = ShiftAttender(
        QUERY_DIM,
        KEY_DIM,
        VALUE_DIM,
        moves=("content", "last_match", "forward"),
        choice="straight_through",
        content=content,
        content_strength=5.0,
        shared_match_query=shared,
    ).double()
    with torch.no_grad():
        attender.move_layer.weight.zero_()
        attender.move_layer.bias.copy_(torch.tensor([-10.0, -10.0, -10.0], dtype=torch.float64))
        attender.move_layer.bias[attender.moves.index(move)] = 10.0
    return attender


@pytest.mark.parametrize("content", ["multiplicative", "scaled_dot"])
def test_shared_match_query_scores_last_match_with_the_content_query(source, make_queries, content):
    """``last_match`` is the stick-breaking attention of ``sigmoid(5 cos(W q, k) + b)``, ``W`` the
    content move's own query map (the identity for scaled_dot content), and it has no map of its own."""
    attender = _shared_match_attender(content, shared=True)
    assert not hasattr(attender, "last_match_query")
    queries = make_queries(4, 3)
    output = attender(queries, source.keys, source.values, source.mask)
    projected = attender.content.query_layer(queries) if content == "multiplicative" else queries
    cosine = torch.nn.functional.cosine_similarity(projected.unsqueeze(2), source.keys.unsqueeze(1), dim=-1)
    match = torch.sigmoid(5.0 * cosine + attender.last_match_bias)
    for row, length in enumerate(source.lengths):
        m = match[row, :, :length]
        miss_after = torch.stack(
            [torch.prod(1 - m[:, s + 1 :], dim=-1) for s in range(length)], dim=-1
        )  # prod over s' > s
        expected = m * miss_after / (m * miss_after).sum(-1, keepdim=True)
        torch.testing.assert_close(output.weights[row, :, :length], expected)
        assert output.weights[row, :, length:].abs().sum() == 0
    content_scores = torch.softmax(5.0 * cosine.masked_fill(source.mask.unsqueeze(1), float("-inf")), dim=-1)
    torch.testing.assert_close(output.variables["content_attention"], content_scores)


@pytest.mark.parametrize("move", ["content", "last_match"])
def test_shared_match_query_trains_one_map_whichever_move_is_taken(source, make_queries, move):
    """The point of the option: a loss on the attention of either move reaches the same query map,
    so the step that makes the jump trains one direction whichever of the two is chosen. With
    separate maps, ``last_match`` trains its own map and the content map gets nothing from it."""
    for shared in (True, False):
        attender = _shared_match_attender("multiplicative", shared, move)
        output = attender(make_queries(4, 2), source.keys, source.values, source.mask)
        (output.glimpse**2).sum().backward()
        content_grad = attender.content.query_layer.weight.grad
        if shared or move == "content":
            assert content_grad is not None and content_grad.abs().sum() > 0
        else:
            assert content_grad is None or content_grad.abs().sum() == 0
            assert attender.last_match_query.weight.grad.abs().sum() > 0


def test_shared_match_query_default_keeps_last_match_its_own_map():
    attender = ShiftAttender(QUERY_DIM, KEY_DIM, VALUE_DIM, moves=("content", "last_match", "forward"))
    assert attender.shared_match_query is False and hasattr(attender, "last_match_query")


# the walk: alpha_t = sum_k pi_tk candidate_tk, with stay and the shifts as matrices

ALL_MOVES = ("content", "stay", "forward", "backward", "start", "end", "forward2", "backward3", "last_match")


def _candidates_walk(output, attender: ShiftAttender, state) -> torch.Tensor:
    """The module docstring's recurrence, one candidate per move and step, from the moves' weights
    and content-type attentions that ``output`` reports (so gradients reach the same inputs)."""
    previous = state["previous_attention"]
    steps = output.weights.size(1)
    finals = []
    for t in range(steps):
        candidates = []
        for move in attender.moves:
            if move in ("content", "last_match"):
                candidates.append(output.variables[f"{move}_attention"][:, t])
            elif move == "stay":
                candidates.append(previous)
            elif move in ("start", "end"):
                candidates.append(state[move])
            else:
                shifted = torch.zeros_like(previous).scatter_add(1, state[f"{move}_targets"], previous)
                candidates.append(shifted)
        pis = torch.stack([output.variables[f"move_{move}"][:, t] for move in attender.moves], dim=1)
        previous = torch.einsum("bk,bks->bs", pis, torch.stack(candidates, dim=1))
        finals.append(previous)
    return torch.stack(finals, dim=1)


@pytest.mark.parametrize("choice", ["softmax", "gumbel"])
@pytest.mark.parametrize("moves", [ALL_MOVES, ("stay", "forward", "backward"), ("content", "start", "end")])
def test_walk_is_the_candidates_recurrence_in_value_and_gradient(make_source, make_queries, choice, moves):
    """Any mix of moves (soft mixes included), left and right padding: the weights and their
    gradient with respect to the queries equal the per-candidate recurrence's."""
    torch.manual_seed(0)
    attender = ShiftAttender(QUERY_DIM, KEY_DIM, VALUE_DIM, moves=moves, choice=choice).double().train()
    source = make_source()
    for mask in (source.mask, source.mask.flip(1)):  # right, then left padding
        queries = make_queries(4, 9).requires_grad_()
        state = attender.initial_state(source.keys, mask)
        output = attender(queries, source.keys, source.values, mask, state)
        expected = _candidates_walk(output, attender, state)
        torch.testing.assert_close(output.weights, expected, rtol=1e-12, atol=1e-12)
        probe = torch.randn_like(expected)
        (got,) = torch.autograd.grad((output.weights * probe).sum(), queries, retain_graph=True)
        (want,) = torch.autograd.grad((expected * probe).sum(), queries)
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


def test_gumbel_moves_sampled_all_steps_at_once_are_those_sampled_step_by_step(source, make_queries):
    """In training the noise is drawn step-major, so one call over all steps samples the same
    moves as one call per step from the same seed (content_once included)."""
    attender = (
        ShiftAttender(QUERY_DIM, KEY_DIM, VALUE_DIM, moves=ALL_MOVES, choice="gumbel", content_once=True)
        .double()
        .train()
    )
    queries = make_queries(4, 6)
    torch.manual_seed(3)
    whole = attender(queries, source.keys, source.values, source.mask)
    torch.manual_seed(3)
    state = attender.initial_state(source.keys, source.mask)
    for step in range(6):
        one = attender(queries[:, step], source.keys, source.values, source.mask, state)
        state = one.state
        torch.testing.assert_close(one.weights, whole.weights[:, step])
    assert torch.equal(state["content_used"], whole.state["content_used"])


# ------------------------------------------------------------------ heads run together (issue 28)

HEAD_OPTIONS = [
    {},
    {"moves": ("content", "stay", "forward", "backward"), "content_steps": 2, "content_once": True},
    {"content": "additive", "moves": ("content", "stay", "forward", "end")},
    {"moves": ("content", "last_match", "stay", "forward2", "backward"), "content_strength": 5.0},
    {"choice": "softmax"},
]


@pytest.mark.parametrize("options", HEAD_OPTIONS)
@pytest.mark.parametrize(("training", "padded"), [(True, True), (False, True), (True, False)])
def test_heads_together_give_each_head_its_own_call(source, make_queries, options, training, padded):
    """attend_heads == one call per head (weights, glimpses, state, Gumbel draws and gradients),
    over two calls (several steps, then one more), with a padding mask or none."""
    heads = 3
    mask = source.mask if padded else None
    torch.manual_seed(0)
    attenders = [
        ShiftAttender(QUERY_DIM, KEY_DIM, VALUE_DIM, **options).double().train(training) for _ in range(heads)
    ]
    assert can_attend_together(attenders)
    batch = len(source.lengths)
    generator = torch.Generator().manual_seed(1)
    keys = torch.randn(batch, heads, source.keys.size(1), KEY_DIM, generator=generator, dtype=torch.float64)
    values = torch.randn(
        batch, heads, source.keys.size(1), VALUE_DIM, generator=generator, dtype=torch.float64
    )
    queries = [make_queries(batch, steps).unsqueeze(1).repeat(1, heads, 1, 1) for steps in (5, 1)]
    queries = [
        (q + torch.randn(q.shape, generator=generator, dtype=q.dtype)).requires_grad_() for q in queries
    ]

    def own_calls() -> list[torch.Tensor]:
        states = [a.initial_state(keys[:, h], mask) for h, a in enumerate(attenders)]
        outputs = []
        for query in queries:
            step = []
            for h, attender in enumerate(attenders):
                out = attender(query[:, h], keys[:, h], values[:, h], mask, states[h])
                states[h] = out.state
                step.append((out.glimpse, out.weights, out.state["previous_attention"]))
            outputs.append([torch.stack(parts, dim=1) for parts in zip(*step)])
        return [x for step in outputs for x in step]

    def together() -> list[torch.Tensor]:
        state = heads_initial_state(attenders, keys, mask)
        outputs = []
        for query in queries:
            out = attend_heads(attenders, query, keys, values, mask, state)
            state = out.state
            previous = state["previous_attention"].view(heads, batch, -1).transpose(0, 1)
            outputs += [out.glimpse, out.weights, previous]
        return outputs

    results = []
    for run in (own_calls, together):
        torch.manual_seed(2)
        outputs = run()
        loss = sum((x * torch.linspace(-1, 1, x.numel(), dtype=x.dtype).view_as(x)).sum() for x in outputs)
        for attender in attenders:
            attender.zero_grad()
        for query in queries:
            query.grad = None
        loss.backward()
        grads = [q.grad.clone() for q in queries if q.grad is not None]
        grads += [p.grad.clone() for a in attenders for p in a.parameters() if p.grad is not None]
        results.append((outputs, grads))
    (own, own_grads), (joint, joint_grads) = results
    for a, b in zip(own, joint, strict=True):
        torch.testing.assert_close(b, a, rtol=0, atol=1e-12)
    for a, b in zip(own_grads, joint_grads, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-10, atol=1e-12)
    if training and options.get("choice", "gumbel") == "gumbel":  # the draws differ between heads
        assert not torch.equal(joint[1][:, 0], joint[1][:, 1])


def test_heads_that_choose_or_walk_otherwise_do_not_run_together():
    first = ShiftAttender(QUERY_DIM, KEY_DIM, VALUE_DIM)
    assert can_attend_together([first, ShiftAttender(QUERY_DIM, KEY_DIM, VALUE_DIM, hidden_dim=3)])
    assert not can_attend_together([first, ShiftAttender(QUERY_DIM, KEY_DIM, VALUE_DIM, choice="softmax")])
    assert not can_attend_together(
        [first, ShiftAttender(QUERY_DIM, KEY_DIM, VALUE_DIM, moves=("stay", "forward"))]
    )
    assert not can_attend_together([first, build_attender("location", QUERY_DIM, KEY_DIM, VALUE_DIM)])
