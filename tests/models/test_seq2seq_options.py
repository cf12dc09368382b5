"""The recurrent seq2seq's extrapolation options (issue 6): local encoder, decoder without
recurrence, input feeding; and the Location / Mix Attender options they are used with."""

import pytest
import torch

from attnlab.attention import build_attender
from attnlab.attention.location import straight_through_gate
from attnlab.models.seq2seq import RecurrentSeq2Seq

SOURCE_VOCAB, TARGET_VOCAB = 12, 9
EXTRAPOLATING = {
    "mix_gate": "straight_through",
    "location_options": {"weighter": "feedforward", "gates": "straight_through", "initial_rho": [1, 0, -2]},
}
SHIFT_OPTIONS_OF_ISSUE_26 = {
    "attender": "shift",
    "attender_options": {"moves": ["content", "stay", "forward", "start", "end", "forward2", "last_match"]},
    "encoder": "local",
    "decoder_recurrence": False,
    "input_feeding": True,
}
DECODERS = [
    pytest.param({}, id="paper"),
    pytest.param({"decoder_recurrence": False}, id="no-recurrence"),
    pytest.param({"input_feeding": True}, id="input-feeding"),
    pytest.param({"decoder_recurrence": False, "input_feeding": True}, id="no-recurrence+input-feeding"),
    pytest.param(
        {
            "encoder": "local",
            "decoder_recurrence": False,
            "input_feeding": True,
            "attender_options": EXTRAPOLATING,
        },
        id="extrapolating",
    ),
    pytest.param(
        {"attender": "shift", "encoder": "local", "decoder_recurrence": False, "input_feeding": True},
        id="shift",
    ),
    pytest.param(SHIFT_OPTIONS_OF_ISSUE_26 | {"encoder_context": "right"}, id="shift-right-context"),
    pytest.param(SHIFT_OPTIONS_OF_ISSUE_26 | {"encoder_values": "word"}, id="shift-word-values"),
    pytest.param(
        SHIFT_OPTIONS_OF_ISSUE_26 | {"encoder_values": "word", "prediction": "word"},
        id="shift-word-prediction",
    ),
]


def _model(**options) -> RecurrentSeq2Seq:
    torch.manual_seed(0)
    options.setdefault("attender", "mix")
    return RecurrentSeq2Seq(SOURCE_VOCAB, TARGET_VOCAB, embedding_dim=8, hidden_dim=16, **options).eval()


def _source(lengths=(6, 4, 2), seed=1):
    generator = torch.Generator().manual_seed(seed)
    source = torch.randint(3, SOURCE_VOCAB, (len(lengths), max(lengths)), generator=generator)
    mask = torch.arange(max(lengths))[None, :] >= torch.tensor(lengths)[:, None]
    return source.masked_fill(mask, 0), mask


@pytest.mark.parametrize("options", DECODERS)
def test_teacher_forcing_on_the_greedy_tokens_gives_the_greedy_logits(options):
    """The step-by-step decoder and the teacher-forced forward pass compute the same model."""
    model = _model(**options)
    source, mask = _source()
    decoded = model.greedy_decode(source, mask, max_length=5)
    tokens = decoded.tokens
    sos = torch.full((source.size(0), 1), model.sos_id)
    forced = model(source, mask, torch.cat([sos, tokens[:, :-1]], dim=1))
    ended_before = torch.cat([torch.zeros_like(sos), (tokens[:, :-1] == model.eos_id).long().cumsum(1)], 1)
    alive = ended_before == 0
    torch.testing.assert_close(forced.logits[alive], decoded.logits[alive], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(forced.attention[alive], decoded.attention[alive], rtol=1e-5, atol=1e-5)


def test_without_recurrence_a_step_depends_only_on_its_own_input_token():
    model = _model(attender="additive", decoder_recurrence=False)
    source, mask = _source()
    target = torch.randint(3, TARGET_VOCAB, (source.size(0), 5))
    changed = target.clone()
    changed[:, 1] = (changed[:, 1] + 1 - 3) % (TARGET_VOCAB - 3) + 3
    before, after = model(source, mask, target).logits, model(source, mask, changed).logits
    assert not torch.allclose(before[:, 1], after[:, 1])
    torch.testing.assert_close(before[:, [0, 2, 3, 4]], after[:, [0, 2, 3, 4]])


def test_the_recurrent_decoder_carries_earlier_tokens_forward():
    """The contrast: the paper's decoder does depend on earlier tokens (a step counter can form)."""
    model = _model(attender="additive")
    source, mask = _source()
    target = torch.randint(3, TARGET_VOCAB, (source.size(0), 5))
    changed = target.clone()
    changed[:, 1] = (changed[:, 1] + 1 - 3) % (TARGET_VOCAB - 3) + 3
    assert not torch.allclose(
        model(source, mask, target).logits[:, 3], model(source, mask, changed).logits[:, 3]
    )


def test_local_encoder_vectors_do_not_depend_on_position_or_length():
    """A token's key depends on its window only: the same trigram anywhere, in any length, encodes
    the same; batched (padded) and unbatched encodings agree."""
    model = _model(encoder="local", encoder_window=3, residual=True)
    short = torch.tensor([[5, 6, 7, 8]])
    long = torch.tensor([[4, 4, 9, 10, 11, 5, 6, 7, 8, 9]])
    no_padding = torch.zeros_like
    short_keys, _ = model.encode(short, no_padding(short, dtype=torch.bool))
    long_keys, _ = model.encode(long, no_padding(long, dtype=torch.bool))
    torch.testing.assert_close(short_keys[0, 1:3], long_keys[0, 6:8])  # "5 6 7", "6 7 8"
    assert not torch.allclose(short_keys[0, 0], long_keys[0, 5])  # "<start> 5 6" vs "11 5 6"
    padded = torch.cat([short, torch.zeros(1, 6, dtype=torch.long)], dim=1)
    padded_keys, _ = model.encode(padded, padded == 0)
    torch.testing.assert_close(padded_keys[0, :4], short_keys[0])


@pytest.mark.parametrize("window", [0, 2, -1])
def test_local_encoder_window_must_be_positive_and_odd(window):
    with pytest.raises(ValueError, match="encoder_window must be a positive odd number"):
        _model(encoder="local", encoder_window=window)


@pytest.mark.parametrize("residual", [True, False])
def test_right_context_encoder_keys_depend_on_what_follows_only_through_a_max(residual):
    """``encoder_context="right"``: a key changes when a later word changes (beyond the window),
    not when an earlier one does (beyond the window); repeating later words changes nothing (a
    max does not count); padding, right or left, changes nothing; output shape ``[B, S, H]``."""
    model = _model(encoder="local", encoder_context="right", residual=residual)
    base = torch.tensor([[5, 6, 7, 8, 9, 10, 11]])
    keys, _ = model.encode(base, torch.zeros_like(base, dtype=torch.bool))
    assert keys.shape == (1, 7, 16)
    later = base.clone()
    later[0, 6] = 4
    later_keys, _ = model.encode(later, torch.zeros_like(later, dtype=torch.bool))
    assert not torch.allclose(keys[0, 0], later_keys[0, 0])  # word 6 is outside word 0's window
    earlier = base.clone()
    earlier[0, 0] = 4
    earlier_keys, _ = model.encode(earlier, torch.zeros_like(earlier, dtype=torch.bool))
    torch.testing.assert_close(keys[0, 2:], earlier_keys[0, 2:])  # word 0 is before and outside
    repeated = torch.tensor([[5, 6, 7, 8, 9, 10, 9, 10, 9, 10, 11]])
    repeated_keys, _ = model.encode(repeated, torch.zeros_like(repeated, dtype=torch.bool))
    torch.testing.assert_close(keys[0, :4], repeated_keys[0, :4])
    right = torch.cat([base, torch.zeros(1, 3, dtype=torch.long)], dim=1)
    left = torch.cat([torch.zeros(1, 3, dtype=torch.long), base], dim=1)
    torch.testing.assert_close(model.encode(right, right == 0)[0][0, :7], keys[0])
    torch.testing.assert_close(model.encode(left, left == 0)[0][0, 3:], keys[0])


def test_right_context_tells_the_word_after_the_last_marker_from_one_after_an_earlier_marker():
    """Noisy multi (Dubois et al. 2020): ``x ! a b ! a b .``, the tables start after the last ``!``.
    Both words after a ``!`` have the same 3-word window, so the window-only encoder gives them the
    same key; with ``V`` set to detect ``!``, the right-context summary is 1 before the last ``!``
    and 0 from it on, and the two keys differ."""
    bang = 4
    source = torch.tensor([[5, bang, 7, 9, bang, 7, 9, 10]])
    no_padding = torch.zeros_like(source, dtype=torch.bool)
    model = _model(encoder="local", encoder_context="right", residual=False)
    window_only = _model(encoder="local", residual=False)
    with torch.no_grad():
        model.source_embedding.weight[:, 0] = 0.0
        model.source_embedding.weight[bang, 0] = 1.0  # coordinate 0 of the embedding: "is !"
        model.encoder.context_features.weight.zero_()
        model.encoder.context_features.bias.fill_(-1.0)
        model.encoder.context_features.weight[0, 0] = 1.0
        model.encoder.context_features.bias[0] = 0.0  # summary feature 0: "a ! follows"
        window_only.source_embedding.weight.copy_(model.source_embedding.weight)
        window_only.encoder.convolution.load_state_dict(model.encoder.convolution.state_dict())
        summary = model.encoder.right_context(model.source_embedding(source), no_padding)
    assert (summary[0, :, 1:] == 0).all()
    assert summary[0, :, 0].tolist() == [1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    plain, _ = window_only.encode(source, no_padding)
    keys, _ = model.encode(source, no_padding)
    torch.testing.assert_close(plain[0, 2], plain[0, 5])
    assert not torch.allclose(keys[0, 2], keys[0, 5])
    torch.testing.assert_close(keys[0, 4:], plain[0, 4:])  # nothing follows that has the feature


@pytest.mark.parametrize("encoder", ["local", "gru"])
@pytest.mark.parametrize("residual", [True, False])
def test_word_values_hold_the_word_and_its_end_flags_only(encoder, residual):
    """``encoder_values="word"``: a value depends on its own word and on whether it is the first or
    last real word, never on its neighbours or the length; right padding (and left padding, which
    the local encoder reads too; the GRU encoder refuses it) gives the same values; the keys stay
    the encoder outputs (they do see the neighbours)."""
    model = _model(encoder=encoder, encoder_values="word", residual=residual)
    base = torch.tensor([[5, 6, 7, 8, 9]])
    changed = torch.tensor([[5, 4, 7, 10, 9, 11, 11]])  # other neighbours, longer
    no_padding = torch.zeros_like

    def keys_and_values(source, mask):
        keys, _ = model.encode(source, mask)
        return keys, model.encode_values(source, mask, keys)

    keys, values = keys_and_values(base, no_padding(base, dtype=torch.bool))
    changed_keys, changed_values = keys_and_values(changed, no_padding(changed, dtype=torch.bool))
    assert values.shape == keys.shape == (1, 5, 16)
    torch.testing.assert_close(values[0, 2], changed_values[0, 2])  # "7", middle, other neighbours
    assert not torch.allclose(keys[0, 2], changed_keys[0, 2])
    torch.testing.assert_close(values[0, 0], changed_values[0, 0])  # "5", first in both
    assert not torch.allclose(values[0, 4], changed_values[0, 4])  # "9": last, then not last
    middle_nine = torch.tensor([[5, 9, 7]])
    assert not torch.allclose(
        keys_and_values(middle_nine, no_padding(middle_nine, dtype=torch.bool))[1][0, 1], values[0, 4]
    )
    right_padded = torch.cat([base, torch.zeros(1, 2, dtype=torch.long)], 1)
    left_padded = torch.cat([torch.zeros(1, 2, dtype=torch.long), base], 1)
    for padded in (right_padded, left_padded) if encoder == "local" else (right_padded,):
        _, padded_values = keys_and_values(padded, padded == 0)
        torch.testing.assert_close(padded_values[padded != 0], values[0])
    default = _model(encoder=encoder, residual=residual)
    default_keys, _ = default.encode(base, no_padding(base, dtype=torch.bool))
    assert default.encode_values(base, no_padding(base, dtype=torch.bool), default_keys) is default_keys


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"encoder": "local", "encoder_values": "embeddings"}, "encoder_values must be one of"),
        ({"encoder": "gru", "encoder_context": "right"}, "encoder_context='right' needs encoder='local'"),
        ({"encoder": "local", "encoder_context": "left"}, "encoder_context must be one of"),
        ({"prediction": "glimpse"}, "prediction must be one of"),
    ],
)
def test_bad_encoder_context_is_refused(options, message):
    with pytest.raises(ValueError, match=message):
        _model(**options)


def test_unknown_encoder_is_refused():
    with pytest.raises(ValueError, match="encoder must be one of"):
        _model(encoder="lstm")


def test_straight_through_gate_is_binary_with_the_sigmoid_gradient():
    logits = torch.tensor([-3.0, -0.1, 0.2, 4.0], requires_grad=True)
    gate = straight_through_gate(logits)
    assert gate.tolist() == [0.0, 0.0, 1.0, 1.0]
    gate.sum().backward()
    sigmoid = torch.sigmoid(logits.detach())
    torch.testing.assert_close(logits.grad, sigmoid * (1 - sigmoid))


def test_hard_gated_location_attention_moves_exactly_one_step_at_any_length():
    """With binary gates (previous-mean gate on, bias gate off) and one staircase step, ``mu``
    is exactly "previous position + 1 word" for every source length."""
    attender = build_attender(
        "location", 4, 4, 4, weighter="feedforward", gates="straight_through", initial_rho=(5.0, 1.0, -5.0)
    )
    torch.nn.init.zeros_(attender.rho_layer.weight)
    for length in (4, 9, 30):
        keys = torch.randn(1, length, 4)
        mask = torch.zeros(1, length, dtype=torch.bool)
        steps = 3
        output = attender(torch.randn(1, steps, 4), keys, keys, mask)
        mu = output.variables["mu"][0]
        # mu_0 = 0 + 1 step; each later step adds one word to the previous attention's mean.
        assert mu[0].item() == pytest.approx(1 / (length - 1), abs=1e-3)
        previous = output.variables["previous_mean"][0]
        torch.testing.assert_close(
            mu[1:] - previous[1:], torch.full((steps - 1,), 1 / (length - 1)), atol=1e-3, rtol=0
        )


def test_feedforward_weighter_has_no_memory_of_earlier_steps():
    attender = build_attender("location", 4, 4, 4, weighter="feedforward")
    keys = torch.randn(1, 6, 4)
    mask = torch.zeros(1, 6, dtype=torch.bool)
    queries = torch.randn(1, 3, 4)
    together = attender(queries, keys, keys, mask).variables
    alone = attender(queries[:, 2:], keys, keys, mask).variables
    for name in ("sigma", "rho_previous", "rho_steps", "rho_bias"):
        torch.testing.assert_close(together[name][:, 2:], alone[name])


def test_mix_gate_straight_through_picks_one_attention():
    attender = build_attender("mix", 4, 4, 4, mix_gate="straight_through")
    keys = torch.randn(2, 5, 4)
    mask = torch.zeros(2, 5, dtype=torch.bool)
    output = attender(torch.randn(2, 3, 4), keys, keys, mask)
    gamma = output.variables["mix_weight"]
    assert set(gamma.unique().tolist()) <= {0.0, 1.0}
    chosen = torch.where(
        gamma.unsqueeze(-1) == 1,
        output.variables["location_attention"],
        output.variables["content_attention"],
    )
    torch.testing.assert_close(output.weights, chosen)


@pytest.mark.parametrize(
    ("name", "options", "message"),
    [
        ("location", {"weighter": "lstm"}, "weighter must be one of"),
        ("location", {"gates": "hard"}, "gates must be one of"),
        ("mix", {"mix_gate": "hard"}, "mix_gate must be one of"),
        ("location", {"reference": "all"}, "reference must be one of"),
        ("location", {"staircase_gradient": "smooth"}, "staircase_gradient must be one of"),
    ],
)
def test_unknown_option_values_are_refused(name, options, message):
    with pytest.raises(ValueError, match=message):
        build_attender(name, 4, 4, 4, **options)


def test_anchored_location_attention_steps_from_the_content_attention():
    """``combination="anchor"``: with the anchor gate on, the previous-mean and bias gates off
    and one staircase step, ``mu`` is the content attention's mean position plus one word."""
    attender = build_attender(
        "mix",
        4,
        4,
        4,
        combination="anchor",
        location_options={
            "weighter": "feedforward",
            "gates": "straight_through",
            "initial_rho": (-5.0, 1.0, -5.0),
        },
    )
    assert attender.mix_layer is None
    rho = attender.location.rho_layer
    torch.nn.init.zeros_(rho.weight)
    with torch.no_grad():
        rho.bias[3] = 5.0  # anchor gate on
    keys = torch.randn(2, 9, 4)
    mask = torch.zeros(2, 9, dtype=torch.bool)
    mask[1, 6:] = True
    output = attender(torch.randn(2, 3, 4), keys, keys, mask)
    variables = output.variables
    assert set(variables["rho_anchor"].unique().tolist()) == {1.0}
    step = torch.tensor([1 / 8, 1 / 5]).unsqueeze(1)
    expected = (variables["anchor"] + step).clamp(max=1.0)
    torch.testing.assert_close(variables["mu"], expected, atol=0.02, rtol=0)  # leaky clamp above 1
    torch.testing.assert_close(output.weights, variables["location_attention"])


def test_content_anchor_needs_anchors():
    attender = build_attender("location", 4, 4, 4, content_anchor=True)
    keys = torch.randn(1, 5, 4)
    state = attender.initial_state(keys, None)
    with pytest.raises(ValueError, match="needs anchors"):
        attender.run(torch.randn(1, 2, 4), None, state)


def test_unknown_combination_is_refused():
    with pytest.raises(ValueError, match="combination must be one of"):
        build_attender("mix", 4, 4, 4, combination="sum")


def _always_forward_model(prediction: str) -> RecurrentSeq2Seq:
    """A Shift-Attender model whose chooser always takes ``forward``: step t attends word t + 1."""
    model = _model(
        attender="shift",
        attender_options={"moves": ["content", "stay", "forward"]},
        encoder="local",
        decoder_recurrence=False,
        input_feeding=True,
        prediction=prediction,
    )
    with torch.no_grad():
        model.attender.move_layer.weight.zero_()
        model.attender.move_layer.bias.copy_(torch.tensor([-10.0, -10.0, 10.0]))
    return model


@pytest.mark.parametrize("prediction", ["state", "word"])
def test_word_prediction_depends_on_the_previous_token_and_the_attended_word_only(prediction):
    """``prediction="word"`` (issue 26 part 3): a step's output is a function of the previous output
    and the attended word, as a lookup table is, whatever surrounds the word and whatever was read
    before; the default prediction also sees the decoder state and the window key's neighbours."""
    model = _always_forward_model(prediction)
    target = torch.tensor([[4, 5, 6]])
    source = torch.tensor([[3, 4, 5, 6, 7, 8]])
    other = torch.tensor([[9, 10, 5, 11, 3, 4]])  # the same word at position 2, read at step 1
    first, second = model(source, _no_padding(source), target), model(other, _no_padding(other), target)
    assert torch.all(first.attention.argmax(-1) == torch.tensor([[1, 2, 3]]))
    torch.testing.assert_close(first.attention, second.attention)
    same = torch.allclose(first.logits[:, 1], second.logits[:, 1])
    assert same == (prediction == "word")
    assert not torch.allclose(first.logits[:, 2], second.logits[:, 2])  # words 6 and 11 differ


def _no_padding(source: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(source, dtype=torch.bool)


def test_word_prediction_has_no_state_inputs_in_its_combination_layer():
    assert _model(prediction="word").combine.in_features == 2 * 8  # two embeddings
    assert _model().combine.in_features == 2 * 16  # decoder state and glimpse
