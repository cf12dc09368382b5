"""Syntactic Attention (Russin et al. 2019) and the GRU + attention baselines: equations and masking."""

import pytest
import torch
from torch import nn

from attnlab.attention.syntactic import (
    ComposedWordEmbedding,
    DotProductAttender,
    ShiftedBidirectionalEncoder,
    reverse_padded,
)
from attnlab.models.gru_attention import GRUAttentionSeq2Seq
from attnlab.models.stepwise import append_end_marker
from attnlab.models.syntactic_attention import SyntacticAttentionSeq2Seq

SOURCE_VOCAB, TARGET_VOCAB = 12, 9
PAD, SOS, EOS = 0, 1, 2
SMALL = {"embedding_dim": 8, "encoder_hidden_dim": 6, "decoder_hidden_dim": 12, "dropout": 0.0}
VARIANTS = {
    "syntactic_attention": lambda: SyntacticAttentionSeq2Seq(SOURCE_VOCAB, TARGET_VOCAB, **SMALL),
    "translation_rnn": lambda: SyntacticAttentionSeq2Seq(
        SOURCE_VOCAB, TARGET_VOCAB, translation_encoder="rnn", **SMALL
    ),
    "translate_from_context": lambda: SyntacticAttentionSeq2Seq(
        SOURCE_VOCAB, TARGET_VOCAB, translate_from_context=True, **SMALL
    ),
    "end_marker": lambda: SyntacticAttentionSeq2Seq(SOURCE_VOCAB, TARGET_VOCAB, end_marker=True, **SMALL),
    "stop_from_attention": lambda: SyntacticAttentionSeq2Seq(
        SOURCE_VOCAB, TARGET_VOCAB, end_marker=True, stop_from_attention=True, **SMALL
    ),
    "stop_from_attention_context": lambda: SyntacticAttentionSeq2Seq(
        SOURCE_VOCAB,
        TARGET_VOCAB,
        end_marker=True,
        stop_from_attention=True,
        translate_from_context=True,
        translation_encoder="rnn",
        **SMALL,
    ),
    "alignment_word_dropout": lambda: SyntacticAttentionSeq2Seq(
        SOURCE_VOCAB, TARGET_VOCAB, alignment_word_dropout=0.1, end_marker=True, **SMALL
    ),
    "decoder_init_learned": lambda: SyntacticAttentionSeq2Seq(
        SOURCE_VOCAB, TARGET_VOCAB, end_marker=True, stop_from_attention=True, decoder_init="learned", **SMALL
    ),
    "gru_attention": lambda: GRUAttentionSeq2Seq(SOURCE_VOCAB, TARGET_VOCAB, **SMALL),
    "gru_attention_nodep": lambda: GRUAttentionSeq2Seq(
        SOURCE_VOCAB, TARGET_VOCAB, previous_output=False, **SMALL
    ),
    "gru_shift": lambda: GRUAttentionSeq2Seq(SOURCE_VOCAB, TARGET_VOCAB, attender="shift", **SMALL),
    "gru_end_marker": lambda: GRUAttentionSeq2Seq(SOURCE_VOCAB, TARGET_VOCAB, end_marker=True, **SMALL),
    "gru_shift_stop_from_attention": lambda: GRUAttentionSeq2Seq(
        SOURCE_VOCAB, TARGET_VOCAB, attender="shift", end_marker=True, stop_from_attention=True, **SMALL
    ),
    "lstm_shift_stop_from_attention": lambda: GRUAttentionSeq2Seq(
        SOURCE_VOCAB,
        TARGET_VOCAB,
        attender="shift",
        end_marker=True,
        stop_from_attention=True,
        decoder_cell="lstm",
        **SMALL,
    ),
}


def build(name: str, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return VARIANTS[name]().eval()


def padded_batch(sequences: list[list[int]], pad: int = PAD) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(map(len, sequences))
    tokens = torch.tensor([seq + [pad] * (width - len(seq)) for seq in sequences])
    return tokens, tokens == pad


def appended_columns(model: nn.Module) -> int:
    """1 for a model with an end marker (one more attention column per source), else 0."""
    return int(getattr(model, "end_marker_id", None) is not None)


SOURCES = [[3, 4, 5, 6, 7], [8, 3], [5, 9, 10, 11], [4]]
TARGETS = [[3, 4, 5, 6, 7, 8], [4, 4], [5, 6, 7], [8, 8, 8, 8]]


# ----------------------------------------------------------------------- shifted encoder


def test_shifted_vector_of_a_word_never_depends_on_the_word_itself():
    torch.manual_seed(0)
    encoder = ShiftedBidirectionalEncoder(input_dim=5, hidden_dim=4, num_layers=2).eval()
    inputs = torch.randn(1, 6, 5)
    mask = torch.zeros(1, 6, dtype=torch.bool)
    keys = encoder(inputs, mask).keys
    for j in range(6):
        changed = inputs.clone()
        changed[0, j] = torch.randn(5) * 3
        new_keys = encoder(changed, mask).keys
        torch.testing.assert_close(new_keys[0, j], keys[0, j], rtol=0, atol=0)
        others = [k for k in range(6) if k != j]
        assert not torch.allclose(new_keys[0, others], keys[0, others])  # the neighbours do see it


def test_shifted_vectors_are_neighbour_states_with_learned_boundaries():
    torch.manual_seed(0)
    encoder = ShiftedBidirectionalEncoder(input_dim=3, hidden_dim=4, num_layers=1).eval()
    inputs = torch.randn(1, 5, 3)
    encoding = encoder(inputs, torch.zeros(1, 5, dtype=torch.bool))
    forward, _ = encoder.forward_rnn(inputs)
    backward = encoder.backward_rnn(inputs.flip(1))[0].flip(1)
    torch.testing.assert_close(encoding.keys[0, 0, :4], encoder.start.detach())
    torch.testing.assert_close(encoding.keys[0, 1:, :4], forward[0, :-1])
    torch.testing.assert_close(encoding.keys[0, :-1, 4:], backward[0, 1:])
    torch.testing.assert_close(encoding.keys[0, -1, 4:], encoder.end.detach())
    torch.testing.assert_close(encoding.summary[0], torch.cat([forward[0, -1], backward[0, 0]]))


def test_shifted_encoder_ignores_padding():
    torch.manual_seed(0)
    encoder = ShiftedBidirectionalEncoder(input_dim=3, hidden_dim=4, num_layers=2).eval()
    lengths = [5, 2, 3]
    inputs = torch.randn(3, 5, 3)
    mask = torch.arange(5).unsqueeze(0) >= torch.tensor(lengths).unsqueeze(1)
    batched = encoder(inputs, mask)
    for row, length in enumerate(lengths):
        alone = encoder(inputs[row : row + 1, :length], torch.zeros(1, length, dtype=torch.bool))
        torch.testing.assert_close(batched.keys[row, :length], alone.keys[0], atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(batched.summary[row], alone.summary[0], atol=1e-6, rtol=1e-5)


def test_reverse_padded_reverses_within_each_length_and_is_its_own_inverse():
    values = torch.arange(8.0).view(2, 4, 1)
    reversed_ = reverse_padded(values, torch.tensor([4, 2]))
    assert reversed_.squeeze(-1).tolist() == [[3, 2, 1, 0], [5, 4, 6, 7]]
    torch.testing.assert_close(reverse_padded(reversed_, torch.tensor([4, 2])), values)


# --------------------------------------------------------------------------- attention


def test_dot_product_attender_is_eq_2_with_zero_weight_on_padding():
    torch.manual_seed(0)
    attender = DotProductAttender(4, 4, 3)
    query, keys, values = torch.randn(2, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 3)
    mask = torch.tensor([[False] * 5, [False, False, True, True, True]])
    output = attender(query, keys, values, mask)
    scores = torch.einsum("bd,bsd->bs", query, keys).masked_fill(mask, float("-inf"))
    expected = torch.softmax(scores, dim=-1)
    torch.testing.assert_close(output.weights, expected)
    torch.testing.assert_close(output.glimpse, torch.einsum("bs,bsd->bd", expected, values))
    assert bool((output.weights[1, 2:] == 0).all())
    with pytest.raises(ValueError, match="query_dim == key_dim"):
        DotProductAttender(4, 5)


# ---------------------------------------------------------------------- the full model


def test_decoder_step_is_an_lstm_update_with_the_attended_context():
    """eq. 3: s_{i+1} = LSTM(c_i, s_i) with c_i = Σ α_ij h_j (the projection is attended exactly)."""
    model = build("syntactic_attention")
    source, mask = padded_batch(SOURCES)
    state = model.start(source, mask)
    weights, following = model.align(state)
    context = torch.bmm(weights.unsqueeze(1), state.keys).squeeze(1)
    hidden, cell = model.decoder_cell(context, (state.hidden, state.cell))
    torch.testing.assert_close(following.hidden, hidden, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(following.cell, cell, atol=1e-6, rtol=1e-5)
    expected = torch.softmax(
        torch.einsum("bd,bsd->bs", state.hidden, state.keys).masked_fill(mask, float("-inf")), dim=-1
    )
    torch.testing.assert_close(weights, expected)


def test_prediction_comes_from_the_attended_translation_vectors_only():
    """eq. 1: p(y_i) = softmax(W d_i + b), d_i = Σ α_ij m_j."""
    model = build("syntactic_attention")
    source, mask = padded_batch(SOURCES)
    target_input, _ = padded_batch([[SOS, *t] for t in TARGETS])
    output = model(source, mask, target_input)
    translations = model.translation_embedding(source)
    expected = model.output(torch.bmm(output.attention, translations))
    torch.testing.assert_close(output.logits, expected, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_batched_outputs_equal_unbatched_outputs(name):
    model = build(name)
    source, mask = padded_batch(SOURCES)
    target_input, _ = padded_batch([[SOS, *t] for t in TARGETS])
    batched = model(source, mask, target_input)
    decoded = model.greedy_decode(source, mask, max_length=7)
    for row, (src, tgt) in enumerate(zip(SOURCES, TARGETS)):
        alone_source, alone_mask = padded_batch([src])
        alone = model(alone_source, alone_mask, torch.tensor([[SOS, *tgt]]))
        steps, length = len(tgt) + 1, len(src) + appended_columns(model)
        torch.testing.assert_close(batched.logits[row, :steps], alone.logits[0], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(
            batched.attention[row, :steps, :length], alone.attention[0], atol=1e-6, rtol=1e-5
        )
        assert bool((batched.attention[row, :, length:] == 0).all())
        alone_decoded = model.greedy_decode(alone_source, alone_mask, max_length=7)
        width = alone_decoded.tokens.size(1)
        assert decoded.tokens[row, :width].tolist() == alone_decoded.tokens[0].tolist()
        assert bool((decoded.tokens[row, width:] == PAD).all())


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_attention_is_a_distribution_over_real_positions(name):
    model = build(name)
    source, mask = padded_batch(SOURCES)
    target_input, _ = padded_batch([[SOS, *t] for t in TARGETS])
    attention = model(source, mask, target_input).attention
    torch.testing.assert_close(attention.sum(-1), torch.ones(attention.shape[:2]))


def test_fused_teacher_forcing_equals_the_step_by_step_decoder():
    model = build("translate_from_context")
    source, mask = padded_batch(SOURCES)
    target_input, _ = padded_batch([[SOS, *t] for t in TARGETS])
    fused = model(source, mask, target_input)
    stepwise = super(SyntacticAttentionSeq2Seq, model).forward(source, mask, target_input)
    torch.testing.assert_close(fused.logits, stepwise.logits, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(fused.attention, stepwise.attention)


@pytest.mark.parametrize(
    ("name", "reads_previous"),
    [("syntactic_attention", False), ("gru_attention_nodep", False), ("gru_attention", True)],
)
def test_only_the_dep_baseline_reads_the_previous_output(name, reads_previous):
    model = build(name)
    source, mask = padded_batch(SOURCES)
    first, _ = padded_batch([[SOS, *t] for t in TARGETS])
    second = first.clone()
    second[:, 1] = 7
    changed = not torch.allclose(model(source, mask, first).logits, model(source, mask, second).logits)
    assert changed == reads_previous


@pytest.mark.parametrize("name", ["syntactic_attention", "stop_from_attention", "gru_attention"])
def test_decoding_with_the_length_given_emits_exactly_that_many_tokens(name):
    model = build(name)
    source, mask = padded_batch(SOURCES)
    lengths = torch.tensor([len(t) for t in TARGETS])
    decoded = model.decode_with_lengths(source, mask, lengths)
    for row, length in enumerate(lengths.tolist()):
        tokens = decoded.tokens[row].tolist()
        assert tokens[length] == EOS and EOS not in tokens[:length]
        assert all(token not in (PAD, SOS) for token in tokens[:length])
        assert all(token == PAD for token in tokens[length + 1 :])
        assert bool((decoded.attention[row, length:] == 0).all())
    with pytest.raises(ValueError, match="positive"):
        model.decode_with_lengths(source, mask, torch.tensor([1, 0, 2, 3]))


def test_greedy_decoding_stops_at_eos_and_pads_after_it():
    model = build("syntactic_attention")
    with torch.no_grad():
        model.output.bias.zero_()
        model.output.bias[EOS] = 100.0  # every sequence ends at once
    source, mask = padded_batch(SOURCES)
    decoded = model.greedy_decode(source, mask, max_length=10)
    assert decoded.tokens.tolist() == [[EOS]] * len(SOURCES)


def test_ablation_flags_change_the_translation_stream():
    plain, rnn, context = (
        build("syntactic_attention"),
        build("translation_rnn"),
        build("translate_from_context"),
    )
    assert plain.translation_rnn is None and isinstance(rnn.translation_rnn, nn.LSTM)
    assert plain.output.in_features == 8 and context.output.in_features == 8 + 12
    with pytest.raises(ValueError, match="2 \\* encoder_hidden_dim"):
        SyntacticAttentionSeq2Seq(SOURCE_VOCAB, TARGET_VOCAB, encoder_hidden_dim=6, decoder_hidden_dim=10)
    with pytest.raises(ValueError, match="translation_encoder"):
        SyntacticAttentionSeq2Seq(SOURCE_VOCAB, TARGET_VOCAB, translation_encoder="cnn")


@pytest.mark.parametrize(("decoder_init", "shared"), [("summary", False), ("learned", True)])
def test_the_decoder_starts_from_the_command_or_from_one_learned_state(decoder_init, shared):
    """``decoder_init="summary"`` (the paper's model) starts each command from its final encoder
    states; ``"learned"`` starts every command from the same trained state, so two commands that
    end alike ("… turn left" and "turn left") cannot share a start the other commands lack."""
    torch.manual_seed(0)
    model = SyntacticAttentionSeq2Seq(SOURCE_VOCAB, TARGET_VOCAB, decoder_init=decoder_init, **SMALL)
    source, mask = padded_batch(SOURCES)
    starts = model.start(source, mask).hidden
    assert starts.shape == (len(SOURCES), SMALL["decoder_hidden_dim"])
    assert torch.equal(starts, starts[:1].expand_as(starts)) == shared
    target_input, _ = padded_batch([[SOS, *t] for t in TARGETS])
    model(source, mask, target_input).logits.sum().backward()
    trained = model.initial_hidden if shared else model.initial_state.weight
    assert trained is not None and trained.grad is not None and trained.grad.abs().sum() > 0
    assert (model.initial_state is None) == shared  # no unused parameters


def test_decoder_init_must_be_a_known_start():
    with pytest.raises(ValueError, match="decoder_init must be one of"):
        SyntacticAttentionSeq2Seq(SOURCE_VOCAB, TARGET_VOCAB, decoder_init="zeros", **SMALL)


def test_paper_sizes_by_default():
    model = SyntacticAttentionSeq2Seq(SOURCE_VOCAB, TARGET_VOCAB)
    assert model.translation_embedding.embedding_dim == 120
    assert model.alignment_encoder.forward_rnn.hidden_size == 200
    assert model.alignment_encoder.forward_rnn.num_layers == 2
    assert model.decoder_cell.hidden_size == 400
    assert model.dropout.p == 0.5


def test_uniform_alignment_spreads_attention_evenly_and_leaves_the_alignment_stream_untrained():
    model = build("syntactic_attention").train()
    source, mask = padded_batch(SOURCES)
    target_input, _ = padded_batch([[SOS, *t] for t in TARGETS])
    model.uniform_alignment = True
    output = model(source, mask, target_input)
    lengths = (~mask).sum(1, keepdim=True).float()
    expected = (~mask).float() / lengths
    torch.testing.assert_close(output.attention, expected.unsqueeze(1).expand_as(output.attention))
    output.logits.sum().backward()
    assert model.translation_embedding.weight.grad.abs().sum() > 0
    for name, parameter in model.named_parameters():
        if name.startswith(("alignment", "initial_state", "decoder_cell")):
            assert parameter.grad is None or not parameter.grad.any(), name
    model.uniform_alignment = False
    attention = model.eval()(source, mask, target_input).attention
    assert not torch.allclose(attention, expected.unsqueeze(1).expand_as(attention))


# ----------------------------------------------------------------------- stopping by itself


def test_end_marker_is_appended_after_the_last_word_before_the_padding():
    source, mask = padded_batch(SOURCES)
    marked, marked_mask, ends = append_end_marker(source, mask, end_id=99, pad_id=PAD)
    expected, expected_mask = padded_batch([[*src, 99] for src in SOURCES])
    assert marked.tolist() == expected.tolist() and marked_mask.tolist() == expected_mask.tolist()
    assert ends.tolist() == [len(src) for src in SOURCES]
    with pytest.raises(ValueError, match="right-padded"):
        append_end_marker(source.flip(1), mask.flip(1), end_id=99, pad_id=PAD)


def test_end_marker_is_a_word_of_its_own_attended_and_read_out_like_any_word():
    """With ``end_marker``, eq. 1 holds over the marked source: the marker's translation gives
    the ``<eos>`` logit when the alignment reaches it; padding still gets no attention."""
    model = build("end_marker")
    assert model.end_marker_id == SOURCE_VOCAB
    assert model.translation_embedding.num_embeddings == model.alignment_embedding.num_embeddings == 13
    source, mask = padded_batch(SOURCES)
    target_input, _ = padded_batch([[SOS, *t] for t in TARGETS])
    output = model(source, mask, target_input)
    marked, marked_mask, ends = append_end_marker(source, mask, SOURCE_VOCAB, PAD)
    assert output.attention.shape[-1] == source.size(1) + 1
    assert bool((output.attention.masked_select(marked_mask.unsqueeze(1)) == 0).all())
    assert bool((output.attention[torch.arange(len(SOURCES)), :, ends] > 0).all())
    expected = model.output(torch.bmm(output.attention, model.translation_embedding(marked)))
    torch.testing.assert_close(output.logits, expected, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize(
    "name", ["stop_from_attention", "stop_from_attention_context", "gru_shift_stop_from_attention"]
)
def test_stop_from_attention_eos_probability_is_the_attention_on_the_end_marker(name):
    model = build(name)
    source, mask = padded_batch(SOURCES)
    target_input, _ = padded_batch([[SOS, *t] for t in TARGETS])
    output = model(source, mask, target_input)
    ends = torch.tensor([len(src) for src in SOURCES])
    on_end = output.attention[torch.arange(len(SOURCES)), :, ends]
    torch.testing.assert_close(output.logits[..., EOS].exp(), on_end)
    torch.testing.assert_close(output.logits.exp().sum(-1), torch.ones(on_end.shape))


def test_stop_from_attention_eos_does_not_move_with_the_readout_or_the_words_translations():
    """Only the alignment decides when to stop: the output layer (its ``<eos>`` row included) and
    the real words' translations change the other logits, never ``p(<eos>)``; without the flag
    they do change it."""
    source, mask = padded_batch(SOURCES)
    target_input, _ = padded_batch([[SOS, *t] for t in TARGETS])
    for name, eos_moves in (("stop_from_attention", False), ("end_marker", True)):
        model = build(name)
        before = model(source, mask, target_input)
        with torch.no_grad():
            model.output.weight.normal_()
            model.output.bias.normal_()
            model.translation_embedding.weight[1:SOURCE_VOCAB].normal_()  # real words, not the marker
        after = model(source, mask, target_input)
        torch.testing.assert_close(after.attention, before.attention)  # the alignment stream is untouched
        eos_same = torch.allclose(after.logits[..., EOS], before.logits[..., EOS], atol=1e-6)
        assert eos_same != eos_moves, name
        others = [t for t in range(TARGET_VOCAB) if t != EOS]
        assert not torch.allclose(after.logits[..., others], before.logits[..., others])


def test_stop_from_attention_decoder_state_reaches_eos_only_through_the_alignment():
    """The readout never reads ``s_i``: with the attention fixed, any decoder state gives the same
    logits; greedy decoding stops at the latest where the end marker holds most of the attention."""
    model = build("stop_from_attention")
    source, mask = padded_batch(SOURCES)
    state = model.start(source, mask)
    weights, _ = model.align(state)
    logits = model.readout(weights.unsqueeze(1), state)
    state.hidden, state.cell = torch.randn_like(state.hidden), torch.randn_like(state.cell)
    torch.testing.assert_close(model.readout(weights.unsqueeze(1), state), logits)
    decoded = model.greedy_decode(source, mask, max_length=8)
    ends = torch.tensor([len(src) for src in SOURCES])
    on_end = decoded.attention[torch.arange(len(SOURCES)), :, ends]
    for row, tokens in enumerate(decoded.tokens.tolist()):
        stop = tokens.index(EOS) if EOS in tokens else len(tokens)
        assert bool((on_end[row, :stop] <= 0.5).all())  # more than half on the marker: <eos> wins


# tokens: pad, sos, <eos>, a (3), b (4); p(<eos>) by step: 0.3, 0.6, 0.2, 0.95, 0.99
SCRIPT = torch.tensor(
    [
        [0.0, 0.0, 0.3, 0.7, 0.0],
        [0.0, 0.0, 0.6, 0.0, 0.4],
        [0.0, 0.0, 0.2, 0.8, 0.0],
        [0.0, 0.0, 0.95, 0.0, 0.05],
        [0.0, 0.0, 0.99, 0.01, 0.0],
    ]
)


@pytest.mark.parametrize(
    ("stop_threshold", "expected"),
    [
        (None, [3, EOS]),  # plain greedy: <eos> as soon as it is the most probable token
        (0.6, [3, EOS]),  # p(<eos>) = 0.6 reaches 0.6
        (0.61, [3, 4, 3, EOS]),  # 0.6 does not; 0.95 does
        (0.9, [3, 4, 3, EOS]),
        (0.999, [3, 4, 3, 4, 3]),  # never reached: the budget ends it, the best other token each step
    ],
)
def test_stop_threshold_emits_eos_exactly_when_its_probability_reaches_it(
    stop_threshold, expected, scripted_decoder
):
    decoded = scripted_decoder(SCRIPT).greedy_decode(
        torch.tensor([[3], [4]]), torch.zeros(2, 1, dtype=torch.bool), 5, stop_threshold
    )
    assert decoded.tokens.tolist() == [expected, expected]


def test_stop_threshold_with_stop_from_attention_stops_once_the_end_marker_holds_that_much_attention():
    """The alignment does not depend on what was emitted, so the teacher-forced attention is the
    decoding's: the first step with ``α_end ≥ τ`` emits ``<eos>``, every step before it the best
    action read from the real words."""
    model = build("stop_from_attention", seed=3)
    source, mask = padded_batch(SOURCES)
    steps = 8
    with torch.no_grad():
        forced = model(source, mask, torch.full((len(SOURCES), steps), SOS))
    on_end = forced.attention[torch.arange(len(SOURCES)), :, torch.tensor([len(s) for s in SOURCES])]
    threshold = float(on_end.flatten().quantile(0.8))
    decoded = model.greedy_decode(source, mask, steps, stop_threshold=threshold)
    plain = model.greedy_decode(source, mask, steps)
    stops = []
    for row, tokens in enumerate(decoded.tokens.tolist()):
        reached = (on_end[row] >= threshold).nonzero().flatten().tolist()
        stop = reached[0] if reached else steps
        stops.append(stop)
        best_action = forced.logits[row, :stop].index_fill(-1, torch.tensor([PAD, SOS, EOS]), float("-inf"))
        assert tokens[:stop] == best_action.argmax(-1).tolist()
        assert tokens[stop:] == ([EOS] + [PAD] * (len(tokens) - stop - 1) if reached else [])
    assert len(set(stops)) > 1  # the rows stop at different steps: the rule is exercised
    assert decoded.tokens.tolist() != plain.tokens.tolist()  # and it is not plain greedy here


@pytest.mark.parametrize(
    ("stop_lookahead", "stop_threshold", "expected"),
    [
        (0.6, None, [3, EOS]),  # 0.6 >= 0.6 * 0.99, the largest p(<eos>) from step 1 on
        (0.7, None, [3, 4, 3, EOS]),  # 0.6 < 0.7 * 0.99: skipped; 0.95 >= 0.7 * 0.99
        (1.0, None, [3, 4, 3, 4, EOS]),  # only the surest end of the budget
        (0.7, 0.96, [3, 4, 3, 4, EOS]),  # and p(<eos>) >= 0.96: step 4 (0.99)
    ],
)
def test_stop_lookahead_skips_an_end_the_model_is_much_surer_of_later(
    stop_lookahead, stop_threshold, expected, scripted_decoder
):
    decoded = scripted_decoder(SCRIPT).greedy_decode(
        torch.tensor([[3], [4]]), torch.zeros(2, 1, dtype=torch.bool), 5, stop_threshold, stop_lookahead
    )
    assert decoded.tokens.tolist() == [expected, expected]
    assert bool((decoded.attention[:, len(expected) :] == 0).all())


def test_stop_lookahead_with_stop_from_attention_compares_the_end_marker_attention_with_its_later_maximum():
    """The alignment does not depend on what was emitted, so the steps taken one by one are the
    decoding's; a random model's attention on the end marker creeps up over the steps here."""
    model = build("stop_from_attention", seed=2)
    source, mask = padded_batch(SOURCES)
    steps, lookahead = 8, 1.0
    state, logits, on_end = model.start(source, mask), [], []
    with torch.no_grad():
        for _ in range(steps):
            step_logits, weights, state = model.step(state, torch.full((len(SOURCES),), SOS))
            logits.append(step_logits)
            on_end.append(weights[torch.arange(len(SOURCES)), torch.tensor([len(s) for s in SOURCES])])
    logits, on_end = torch.stack(logits, dim=1), torch.stack(on_end, dim=1)
    decoded = model.greedy_decode(source, mask, steps, stop_lookahead=lookahead)
    plain = model.greedy_decode(source, mask, steps)
    for row, tokens in enumerate(decoded.tokens.tolist()):
        wins = logits[row].index_fill(-1, torch.tensor([PAD, SOS]), float("-inf")).argmax(-1) == EOS
        later_max = [float(on_end[row, i:].max()) for i in range(steps)]
        reached = [i for i in range(steps) if wins[i] and on_end[row, i] >= lookahead * later_max[i]]
        stop = reached[0] if reached else steps
        best_action = logits[row, :stop].index_fill(-1, torch.tensor([PAD, SOS, EOS]), float("-inf"))
        assert tokens[:stop] == best_action.argmax(-1).tolist()
        assert tokens[stop : stop + 1] == ([EOS] if reached else [])
    assert decoded.tokens.tolist() != plain.tokens.tolist()  # some tentative end is skipped here


@pytest.mark.parametrize("name", ["stop_from_attention", "gru_attention"])
def test_a_lookahead_that_accepts_any_end_is_plain_greedy_decoding(name):
    """With ``ρ`` near 0 every end passes, and the tokens fed before it are greedy's (also for a
    decoder that reads its previous output)."""
    model = build(name)
    source, mask = padded_batch(SOURCES)
    plain = model.greedy_decode(source, mask, 12)
    anyway = model.greedy_decode(source, mask, 12, stop_lookahead=1e-9)
    assert anyway.tokens.tolist() == plain.tokens.tolist()
    torch.testing.assert_close(anyway.attention, plain.attention)


@pytest.mark.parametrize("bad", [0.0, -0.1, 1.5, float("nan"), True, "0.5"])
def test_stop_threshold_must_be_a_probability(bad):
    model = build("stop_from_attention")
    source, mask = padded_batch(SOURCES)
    with pytest.raises(ValueError, match=r"stop_threshold must be a probability in \(0, 1\]"):
        model.greedy_decode(source, mask, 4, stop_threshold=bad)


def test_stop_from_attention_needs_the_end_marker():
    with pytest.raises(ValueError, match="stop_from_attention needs end_marker"):
        SyntacticAttentionSeq2Seq(SOURCE_VOCAB, TARGET_VOCAB, stop_from_attention=True, **SMALL)


def test_word_translations_are_the_readout_when_a_word_is_attended_alone():
    """A one-word source puts all attention on that word, so the first step's prediction is that
    word's row of ``word_translations`` (eq. 1 with a one-hot ``α``)."""
    model = build("syntactic_attention")
    table = model.word_translations()
    assert table.shape == (SOURCE_VOCAB, TARGET_VOCAB)
    torch.testing.assert_close(table.sum(-1), torch.ones(SOURCE_VOCAB))
    for word in (3, 7, 11):
        source, mask = padded_batch([[word]])
        output = model(source, mask, torch.tensor([[SOS]]))
        torch.testing.assert_close(output.logits[0, 0].softmax(-1), table[word])


def test_word_translations_with_the_stop_from_attention_never_read_out_eos():
    table = build("stop_from_attention").word_translations()
    assert table.shape == (SOURCE_VOCAB + 1, TARGET_VOCAB)  # the end marker has a row too
    assert bool((table[:, EOS] == 0).all())
    torch.testing.assert_close(table.sum(-1), torch.ones(SOURCE_VOCAB + 1))


@pytest.mark.parametrize("name", ["translation_rnn", "translate_from_context"])
def test_word_translations_refuse_a_translation_that_depends_on_context(name):
    with pytest.raises(ValueError, match="depends on its context"):
        build(name).word_translations()


# ----------------------------------------------------------------------- composed-word embedding


def test_composed_word_embedding_records_only_words_seen_with_others_and_never_padding():
    embedding = ComposedWordEmbedding(10, 4, dropout=0.5, padding_idx=PAD).train()
    words, mask = padded_batch([[3, 4, 5], [6], [7, 3]])
    embedding(words, mask, (~mask).sum(1))
    assert sorted(embedding.composed.nonzero().flatten().tolist()) == [3, 4, 5, 7]  # not 6, not PAD


def test_composed_word_embedding_reads_a_never_composed_word_as_the_unknown_word_at_evaluation():
    torch.manual_seed(0)
    embedding = ComposedWordEmbedding(10, 4, dropout=0.2, padding_idx=PAD)
    with torch.no_grad():
        embedding.unknown.fill_(7.0)
    embedding.train()(*_with_counts([[3, 4], [5]]))
    out = embedding.eval()(*_with_counts([[3, 5, 4]]))
    torch.testing.assert_close(out[0, 1], torch.full((4,), 7.0))  # 5 was only ever alone
    torch.testing.assert_close(out[0, [0, 2]], embedding.embedding.weight[[3, 4]])


def test_composed_word_embedding_drops_real_words_with_its_probability_in_training():
    torch.manual_seed(0)
    embedding = ComposedWordEmbedding(10, 4, dropout=0.3, padding_idx=PAD).train()
    with torch.no_grad():
        embedding.unknown.fill_(float("nan"))  # marks the replaced positions
    words, mask = padded_batch([[3, 4, 5, 6, 7, 8, 9]] * 2000 + [[3]])
    dropped = embedding(words, mask, (~mask).sum(1)).isnan().all(-1)
    assert 0.28 < dropped[:-1].float().mean() < 0.32
    assert not bool(dropped[-1, 1:].any())  # padding is never replaced


def _with_counts(sequences: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    words, mask = padded_batch(sequences)
    return words, mask, (~mask).sum(1)


def test_alignment_word_dropout_makes_never_composed_words_align_alike_and_is_saved():
    """Two words seen only alone in training are the same word to the alignment stream at test,
    while their translations stay their own; the record is part of the state dict."""
    torch.manual_seed(0)
    model = SyntacticAttentionSeq2Seq(SOURCE_VOCAB, TARGET_VOCAB, alignment_word_dropout=0.1, **SMALL)
    model.train()
    source, mask = padded_batch([[3, 4, 5], [10], [11]])
    model(source, mask, torch.tensor([[SOS, 3], [SOS, 4], [SOS, 5]]))
    model.eval()
    with_10 = model.start(*padded_batch([[3, 10, 4]]))
    with_11 = model.start(*padded_batch([[3, 11, 4]]))
    torch.testing.assert_close(with_10.keys, with_11.keys)
    assert not torch.allclose(with_10.translations, with_11.translations)
    state = model.state_dict()
    assert state["alignment_embedding.composed"][[3, 4, 5]].all()
    assert not state["alignment_embedding.composed"][[10, 11]].any()
    fresh = SyntacticAttentionSeq2Seq(SOURCE_VOCAB, TARGET_VOCAB, alignment_word_dropout=0.1, **SMALL)
    fresh.load_state_dict(state)
    assert torch.equal(fresh.alignment_embedding.composed, model.alignment_embedding.composed)


def test_composed_word_embedding_with_peers_reads_an_alone_only_word_as_the_mean_of_its_peers():
    """Words 3 and 4 occur alone and composed (peers), 5 only composed, 6 only alone, 9 never:
    at evaluation 6 is read as the mean of 3 and 4, 9 as the unknown word, the others as themselves."""
    torch.manual_seed(0)
    embedding = ComposedWordEmbedding(10, 4, dropout=0.0, padding_idx=PAD, peers=True)
    with torch.no_grad():
        embedding.unknown.fill_(7.0)
    embedding.train()(*_with_counts([[3, 5], [4, 5], [3], [4], [6]]))
    assert embedding.peer_words().tolist() == [3, 4]
    out = embedding.eval()(*_with_counts([[6, 5, 9, 3]]))
    table = embedding.embedding.weight
    torch.testing.assert_close(out[0, 0], table[[3, 4]].mean(dim=0))
    torch.testing.assert_close(out[0, 1], table[5])
    torch.testing.assert_close(out[0, 2], torch.full((4,), 7.0))
    torch.testing.assert_close(out[0, 3], table[3])


def test_composed_word_embedding_with_peers_falls_back_to_the_unknown_word_when_no_word_is_a_peer():
    embedding = ComposedWordEmbedding(10, 4, dropout=0.0, padding_idx=PAD, peers=True)
    with torch.no_grad():
        embedding.unknown.fill_(7.0)
    embedding.train()(*_with_counts([[3, 5], [6]]))  # nothing is both alone and composed
    assert embedding.peer_words().numel() == 0
    out = embedding.eval()(*_with_counts([[6, 3]]))
    torch.testing.assert_close(out[0, 0], torch.full((4,), 7.0))


def test_composed_word_embedding_can_drop_words_to_the_peers_mean():
    """With ``dropout_to_peers`` the word dropout reads a dropped word as the peers' mean (the
    unknown word while no word is a peer yet); every position is either itself or that vector."""
    torch.manual_seed(0)
    embedding = ComposedWordEmbedding(10, 4, dropout=0.5, padding_idx=PAD, peers=True, dropout_to_peers=True)
    with torch.no_grad():
        embedding.unknown.fill_(7.0)
    first = embedding.train()(*_with_counts([[3, 5, 4, 5, 3, 5]]))  # no peer yet: 3 and 4 never alone
    table = embedding.embedding.weight
    dropped = (first == 7.0).all(dim=-1)
    assert dropped.any() and (~dropped).any()
    torch.testing.assert_close(first[~dropped], table[torch.tensor([3, 5, 4, 5, 3, 5])][~dropped[0]])
    embedding(*_with_counts([[3], [4]]))  # now 3 and 4 are peers
    words = torch.tensor([[3, 5, 4, 5, 3, 5, 4, 5]])
    out = embedding(*_with_counts(words.tolist()))
    peers = table[[3, 4]].mean(dim=0)
    as_peers = torch.isclose(out, peers.expand_as(out)).all(dim=-1)
    assert as_peers.any() and (~as_peers).any()
    torch.testing.assert_close(out[~as_peers], table[words][~as_peers])
    with pytest.raises(ValueError, match="it needs peers=True"):
        ComposedWordEmbedding(10, 4, dropout=0.5, padding_idx=PAD, dropout_to_peers=True)


def test_composed_word_embedding_can_drop_each_peer_word_at_all_its_positions():
    """With ``dropout_unit="peer"`` a sequence's peer word is the peers' mean at every one of its
    positions or at none, and no other word (5: only composed) is ever dropped; over many sequences
    both happen for each peer."""
    torch.manual_seed(0)
    embedding = ComposedWordEmbedding(
        10, 4, dropout=0.5, padding_idx=PAD, peers=True, dropout_to_peers=True, dropout_unit="peer"
    )
    embedding.train()(*_with_counts([[3, 5], [4, 5], [3], [4], [6]]))
    table = embedding.embedding.weight
    peers = table[[3, 4]].mean(dim=0)
    words = torch.tensor([[3, 5, 4, 3, 5, 4, 3, 5]] * 40)
    out = embedding(*_with_counts(words.tolist()))
    as_peers = torch.isclose(out, peers.expand_as(out)).all(dim=-1)
    for word in (3, 4):
        at_word = as_peers[:, words[0] == word]
        assert (at_word.all(dim=1) | ~at_word.any(dim=1)).all()  # all of its positions or none
        assert at_word.all(dim=1).any() and (~at_word.any(dim=1)).any()
    assert not as_peers[:, words[0] == 5].any()
    torch.testing.assert_close(out[~as_peers], table[words][~as_peers])
    with pytest.raises(ValueError, match="dropout_unit must be one of"):
        ComposedWordEmbedding(10, 4, dropout=0.5, padding_idx=PAD, peers=True, dropout_unit="word")
    with pytest.raises(ValueError, match="it needs dropout_to_peers=True"):
        ComposedWordEmbedding(10, 4, dropout=0.5, padding_idx=PAD, peers=True, dropout_unit="peer")


@pytest.mark.parametrize(("dropout", "peers"), [(0.0, False), (1.0, True), (-0.1, True)])
def test_composed_word_embedding_rejects_a_dropout_it_cannot_use(dropout, peers):
    with pytest.raises(ValueError, match="word dropout must be in"):
        ComposedWordEmbedding(10, 4, dropout=dropout, padding_idx=PAD, peers=peers)


@pytest.mark.parametrize("end_marker", [False, True])
def test_alignment_peers_aligns_an_alone_only_word_like_its_peers_and_is_saved(end_marker):
    """ "jump" (10) occurs only alone, "walk" (3) alone and composed: with ``alignment_peers`` the
    alignment keys of a command with 10 equal those with 3 in its place; the translations differ.
    An appended end marker (composed with every word) is never a peer."""
    torch.manual_seed(0)
    model = SyntacticAttentionSeq2Seq(
        SOURCE_VOCAB, TARGET_VOCAB, alignment_peers=True, end_marker=end_marker, **SMALL
    )
    model.train()
    source, mask = padded_batch([[3, 4, 5], [3], [10]])
    model(source, mask, torch.tensor([[SOS, 3], [SOS, 4], [SOS, 5]]))
    model.eval()
    with_10 = model.start(*padded_batch([[10, 4, 5]]))
    with_3 = model.start(*padded_batch([[3, 4, 5]]))
    torch.testing.assert_close(with_10.keys, with_3.keys)
    assert not torch.allclose(with_10.translations, with_3.translations)
    fresh = SyntacticAttentionSeq2Seq(
        SOURCE_VOCAB, TARGET_VOCAB, alignment_peers=True, end_marker=end_marker, **SMALL
    )
    fresh.load_state_dict(model.state_dict())
    assert fresh.alignment_embedding.peer_words().tolist() == [3]
    without = SyntacticAttentionSeq2Seq(SOURCE_VOCAB, TARGET_VOCAB, alignment_word_dropout=0.1, **SMALL)
    assert "alignment_embedding.alone" not in without.state_dict()  # older checkpoints still load


@pytest.mark.parametrize("bad", [0.0, 1.5, float("nan")])
def test_stop_lookahead_must_be_a_probability(bad):
    model = build("stop_from_attention")
    source, mask = padded_batch(SOURCES)
    with pytest.raises(ValueError, match=r"stop_lookahead must be a probability in \(0, 1\]"):
        model.greedy_decode(source, mask, 4, stop_lookahead=bad)


def test_gru_attention_takes_any_attender_and_its_options():
    """``attender`` replaces the additive attention (here the Shift Attender, whose attention moves
    from step to step); its options reach it, and an unknown one is refused by name."""
    additive, shift = build("gru_attention"), build("gru_shift")
    assert type(additive.attender).__name__ == "AdditiveAttender"
    assert type(shift.attender).__name__ == "ShiftAttender"
    torch.manual_seed(0)
    only_forward = GRUAttentionSeq2Seq(
        SOURCE_VOCAB, TARGET_VOCAB, attender="shift", attender_options={"moves": ["forward"]}, **SMALL
    ).eval()
    source, mask = padded_batch([[3, 4, 5, 6, 7]])
    decoded = only_forward.greedy_decode(source, mask, max_length=5)
    # every step moves one word on from the start (the first step's attention is on the first word)
    peaks = decoded.attention[0].argmax(-1).tolist()
    assert peaks == sorted(peaks) and peaks[-1] > peaks[0]
    with pytest.raises(ValueError, match="moves"):
        GRUAttentionSeq2Seq(
            SOURCE_VOCAB, TARGET_VOCAB, attender="shift", attender_options={"moves": []}, **SMALL
        )
    with pytest.raises(ValueError, match="stop_from_attention needs end_marker"):
        GRUAttentionSeq2Seq(SOURCE_VOCAB, TARGET_VOCAB, stop_from_attention=True, **SMALL)


def test_an_lstm_decoder_carries_its_cell_state_from_step_to_step():
    """``decoder_cell="lstm"``: the cell state starts at zero and is carried, so the logits of a
    step depend on it: the same step from a changed cell state gives other logits; the GRU model
    has no cell state. An unknown cell is refused by name."""
    lstm, gru = build("lstm_shift_stop_from_attention"), build("gru_shift_stop_from_attention")
    assert isinstance(lstm.decoder_cell, nn.LSTMCell) and isinstance(gru.decoder_cell, nn.GRUCell)
    source, mask = padded_batch(SOURCES)
    state = lstm.start(source, mask)
    assert state.memory is not None and not state.memory.any()
    assert gru.start(source, mask).memory is None
    previous = torch.full((len(SOURCES),), SOS)
    _, _, after_one = lstm.step(state, previous)
    assert after_one.memory is not None and after_one.memory.abs().sum() > 0
    logits, _, _ = lstm.step(after_one, previous)
    after_one.memory = after_one.memory + 1.0
    changed, _, _ = lstm.step(after_one, previous)
    assert not torch.allclose(logits, changed)
    with pytest.raises(ValueError, match=r"decoder_cell must be one of \['gru', 'lstm'\], got 'rnn'"):
        GRUAttentionSeq2Seq(SOURCE_VOCAB, TARGET_VOCAB, decoder_cell="rnn", **SMALL)


def test_gru_end_marker_is_a_word_of_its_own_that_the_attention_can_reach():
    model = build("gru_end_marker")
    assert model.end_marker_id == SOURCE_VOCAB and model.source_embedding.num_embeddings == SOURCE_VOCAB + 1
    source, mask = padded_batch(SOURCES)
    target_input, _ = padded_batch([[SOS, *t] for t in TARGETS])
    output = model(source, mask, target_input)
    ends = torch.tensor([len(src) for src in SOURCES])
    assert output.attention.shape[-1] == source.size(1) + 1
    assert bool((output.attention[torch.arange(len(SOURCES)), :, ends] > 0).all())
