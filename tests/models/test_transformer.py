"""The Transformer encoder–decoder and its positional schemes: each scheme's defining property,
exact causal masking and padding, cached decoding, location attenders as cross-attention heads."""

import math

import pytest
import torch

from attnlab.attention.positional import sinusoidal_encoding
from attnlab.attention.positions import (
    POSITIONAL_SCHEMES,
    AbsolutePositions,
    SelfAttentionPositions,
    alibi_slopes,
    apply_rope,
)
from attnlab.models.stepwise import append_end_marker
from attnlab.models.transformer import (
    COUNTING_BIAS,
    DECODER_RECURRENCES,
    NORMS,
    STOP_FLOOR,
    CrossAttention,
    SelfAttention,
    TransformerSeq2Seq,
    cross_attention_heads,
)

SOURCE_VOCAB, TARGET_VOCAB = 12, 9
PAD, SOS, EOS = 0, 1, 2
TINY = {"d_model": 16, "heads": 2, "encoder_layers": 2, "decoder_layers": 2, "ff_dim": 32, "dropout": 0.0}


def build(positional: str = "sinusoidal", seed: int = 0, **options) -> TransformerSeq2Seq:
    torch.manual_seed(seed)
    return TransformerSeq2Seq(SOURCE_VOCAB, TARGET_VOCAB, positional=positional, **{**TINY, **options}).eval()


def padded_batch(sequences: list[list[int]], width: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    width = width or max(map(len, sequences))
    tokens = torch.tensor([seq + [PAD] * (width - len(seq)) for seq in sequences])
    return tokens, tokens == PAD


SOURCES = [[3, 4, 5, 6, 7], [8, 3], [5, 9, 10, 11]]
TARGET_INPUT = torch.tensor([[SOS, 3, 4, 5, 6], [SOS, 4, 4, 8, 3], [SOS, 5, 6, 7, 7]])


def assert_cached_decoding_matches(model, source, mask, full) -> None:
    """Step-by-step decoding of ``TARGET_INPUT`` gives the teacher-forced ``full`` output's logits
    and attention at every step."""
    state = model.start(source, mask)
    for t in range(TARGET_INPUT.size(1)):
        logits, weights, state = model.step(state, TARGET_INPUT[:, t])
        torch.testing.assert_close(logits, full.logits[:, t], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(weights, full.attention[:, t], rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------ the schemes


def test_rope_scores_depend_only_on_the_relative_offset():
    torch.manual_seed(0)
    q, k = torch.randn(1, 2, 1, 8), torch.randn(1, 2, 1, 8)

    def score(m: float, n: float) -> torch.Tensor:
        return (apply_rope(q, torch.tensor([[m]])) * apply_rope(k, torch.tensor([[n]]))).sum(-1)

    for shift in (1.0, 7.0, 100.0):
        torch.testing.assert_close(score(3.0 + shift, 1.0 + shift), score(3.0, 1.0), rtol=1e-4, atol=1e-5)
    assert not torch.allclose(score(3.0, 1.0), score(4.0, 1.0))  # but it does depend on the offset
    torch.testing.assert_close(apply_rope(q, torch.zeros(1, 1)), q)  # position 0 is the identity
    torch.testing.assert_close(apply_rope(q, torch.tensor([[5.0]])).norm(dim=-1), q.norm(dim=-1))


def test_alibi_slopes_are_press_et_al_geometric_sequence():
    torch.testing.assert_close(alibi_slopes(8), torch.tensor([2.0 ** -(i + 1) for i in range(8)]))
    torch.testing.assert_close(alibi_slopes(4), torch.tensor([2.0 ** (-2 * (i + 1)) for i in range(4)]))
    # not a power of two: the slopes of 4 heads then every other slope of 8 heads
    six = [2.0 ** (-2 * (i + 1)) for i in range(4)] + [2.0**-1, 2.0**-3]
    torch.testing.assert_close(alibi_slopes(6), torch.tensor(six))


def test_alibi_bias_is_linear_in_distance():
    scheme = SelfAttentionPositions("alibi", heads=4, head_dim=8)
    positions = torch.arange(7.0).unsqueeze(0)
    bias = scheme.score_bias(torch.zeros(1, 4, 7, 8), positions, positions)[0]  # [H, Q, K]
    slopes = alibi_slopes(4)
    for h in range(4):
        distance = (positions[0, :, None] - positions[0, None, :]).abs()
        torch.testing.assert_close(bias[h], -slopes[h] * distance)
    # equal steps in distance give equal steps in bias
    differences = bias[:, 6, :6] - bias[:, 6, 1:7]
    torch.testing.assert_close(differences, -slopes[:, None].expand(4, 6))


def test_relative_scores_are_translation_invariant_and_clipped():
    torch.manual_seed(0)
    scheme = SelfAttentionPositions("relative", heads=2, head_dim=8, max_relative_distance=3)
    query = torch.randn(1, 2, 4, 8)
    positions = torch.arange(4.0).unsqueeze(0)
    keys_at = torch.arange(6.0).unsqueeze(0)
    bias = scheme.score_bias(query, positions, keys_at)
    shifted = scheme.score_bias(query, positions + 10, keys_at + 10)
    torch.testing.assert_close(shifted, bias)
    far = scheme.score_bias(query, positions, keys_at + 50)  # every offset beyond k: one embedding
    torch.testing.assert_close(far, scheme.score_bias(query, positions, keys_at + 60))


def test_relative_scores_are_shaws_formula_for_every_pair():
    """Each pair's bias is q_i . a_clip(j - i) / sqrt(d) (Shaw et al. 2018, eq. 4's second term),
    and the distance embeddings get that formula's gradient, with padding-like gaps in the
    positions and offsets beyond the clip on both sides."""
    torch.manual_seed(0)
    scheme = SelfAttentionPositions("relative", heads=3, head_dim=8, max_relative_distance=4).double()
    query = torch.randn(2, 3, 5, 8, dtype=torch.float64, requires_grad=True)
    query_positions = torch.tensor([[0.0, 1, 2, 3, 4], [2, 3, 9, 10, 11]])
    key_positions = torch.tensor([[0.0, 1, 2, 3, 4, 5, 6], [0, 1, 2, 3, 12, 13, 20]])
    bias = scheme.score_bias(query, query_positions, key_positions)
    table = scheme.relative.weight
    expected = torch.empty_like(bias)
    for b in range(2):
        for i in range(5):
            for j in range(7):
                offset = int(key_positions[b, j] - query_positions[b, i])
                embedding = table[max(-4, min(4, offset)) + 4]
                expected[b, :, i, j] = query[b, :, i] @ embedding / math.sqrt(8)
    torch.testing.assert_close(bias, expected, rtol=0, atol=1e-12)
    weights = torch.randn(bias.shape, dtype=torch.float64)
    grads = torch.autograd.grad((bias * weights).sum(), (query, table))
    expected_grads = torch.autograd.grad((expected * weights).sum(), (query, table))
    for grad, want in zip(grads, expected_grads, strict=True):
        torch.testing.assert_close(grad, want, rtol=0, atol=1e-12)


def test_relative_model_is_translation_invariant_in_positions():
    """Shifting every position of a relative / Transformer-XL / RoPE / ALiBi / NoPE encoder layer
    changes nothing (Transformer-XL with non-zero biases u, v)."""
    torch.manual_seed(0)
    for scheme in ("relative", "transformer_xl", "rope", "alibi", "none"):
        model = build(scheme)
        layer = model.encoder[0].attention
        with torch.no_grad():
            for parameter in layer.positions.parameters():
                parameter.normal_()
        x = torch.randn(2, 5, 16)
        positions = torch.arange(5.0).expand(2, 5)
        out, _ = layer(x, positions)
        moved, _ = layer(x, positions + 13)
        torch.testing.assert_close(moved, out, rtol=1e-4, atol=1e-5, msg=scheme)
        if scheme != "none":  # and the positions do matter
            spread, _ = layer(x, positions * 2)
            assert not torch.allclose(spread, out, atol=1e-4), scheme


@pytest.mark.parametrize("decoder_clip", [0, 2])
def test_a_relative_clip_of_0_leaves_the_decoder_no_order_to_read(decoder_clip):
    """At ``max_relative_distance=(k, 0)`` every pair's relative term is ``q_i . a_0``, which the
    softmax cancels: a one-layer decoder's last step reads its earlier inputs as a set, so swapping
    two of them changes nothing. At clip 2 the two inputs swapped (distances 1 and 2 from the last
    step) have embeddings of their own, and the swap matters."""
    model = build("relative", decoder_layers=1, max_relative_distance=(3, decoder_clip))
    with torch.no_grad():
        model.decoder[0].self_attention.positions.relative.weight.normal_(std=3.0)
    source, mask = padded_batch(SOURCES)
    swapped = TARGET_INPUT.clone()
    swapped[:, [2, 3]] = TARGET_INPUT[:, [3, 2]]
    last = model(source, mask, TARGET_INPUT).logits[:, -1]
    last_swapped = model(source, mask, swapped).logits[:, -1]
    rows_that_differ = (TARGET_INPUT[:, 2] != TARGET_INPUT[:, 3]).nonzero().flatten()
    assert len(rows_that_differ) == 3
    if decoder_clip == 0:
        torch.testing.assert_close(last_swapped, last, rtol=1e-5, atol=1e-6)
    else:
        assert not torch.allclose(last_swapped[rows_that_differ], last[rows_that_differ], atol=1e-4)


@pytest.mark.parametrize(
    "query_positions, key_positions",
    [
        ([[2.0, 3.0, 4.0], [0.0, 1.0, 7.0]], [[0.0, 1.0, 2.0, 3.0, 4.0], [9.0, 1.0, 0.0, 3.0, 4.0]]),
        ([[0.5, 3.0, 4.25], [0.0, 1.5, 2.0]], [[0.0, 1.0, 2.0, 3.0, 4.0], [0.5, 1.0, 2.5, 3.0, 4.0]]),
    ],
    ids=["integer positions, rows apart", "fractional positions"],
)
def test_transformer_xl_terms_follow_dai_et_al(query_positions, key_positions):
    """``u^T k_j + (q_i + v)^T W_R R_{i-j}``, scaled by 1 / sqrt(d), computed naively for every
    row, head and pair (the layer encodes each distinct offset once and gathers)."""
    torch.manual_seed(0)
    scheme = SelfAttentionPositions("transformer_xl", heads=2, head_dim=4)
    with torch.no_grad():
        for parameter in scheme.parameters():
            parameter.normal_()
    query, keys = torch.randn(2, 2, 3, 4), torch.randn(2, 2, 5, 4)
    query_positions, key_positions = torch.tensor(query_positions), torch.tensor(key_positions)
    bias = scheme.score_bias(query, query_positions, key_positions, keys)
    weight = scheme.position_layer.weight.view(2, 4, scheme.encoding_dim)
    for b in range(2):
        for h in range(2):
            for i in range(3):
                for j in range(5):
                    offset = query_positions[b, i] - key_positions[b, j]
                    r = sinusoidal_encoding(offset, scheme.encoding_dim)
                    expected = scheme.content_bias[h] @ keys[b, h, j] + (
                        query[b, h, i] + scheme.position_bias[h]
                    ) @ (weight[h] @ r)
                    torch.testing.assert_close(bias[b, h, i, j], expected / 2.0, rtol=1e-4, atol=1e-5)


def test_scaled_embeddings_have_unit_scale_like_the_positional_encodings():
    """Embeddings times sqrt(d_model) have standard deviation about 1 (Vaswani et al.'s
    initialisation): PyTorch's default N(0, 1) made them sqrt(d_model) = 11x the sinusoidal
    encodings at d_model 128, and SCAN learned slowly."""
    torch.manual_seed(0)
    d_model = 128
    model = TransformerSeq2Seq(40, 40, d_model=d_model, heads=4, pad_id=PAD)
    for embedding in (model.source_embedding, model.target_embedding):
        scaled = embedding.weight.detach()[PAD + 1 :] * math.sqrt(d_model)
        assert 0.9 < float(scaled.std()) < 1.1
        assert torch.equal(embedding.weight[PAD], torch.zeros(d_model))


def test_xavier_embeddings_are_read_unscaled():
    """Csordás et al.'s relative Transformer: Xavier-uniform token embeddings, not multiplied by
    sqrt(d_model); the padding row stays 0; an unknown initialisation is an error."""
    torch.manual_seed(0)
    d_model, vocab = 128, 40
    model = TransformerSeq2Seq(vocab, vocab, d_model=d_model, heads=4, pad_id=PAD, embedding_init="xavier")
    bound = math.sqrt(6 / (vocab + d_model))
    for embedding in (model.source_embedding, model.target_embedding):
        weights = embedding.weight.detach()[PAD + 1 :]
        assert float(weights.abs().max()) <= bound and float(weights.std()) == pytest.approx(
            bound / math.sqrt(3), rel=0.1
        )
        assert torch.equal(embedding.weight[PAD], torch.zeros(d_model))
    tokens = torch.tensor([[3, 4, 5]])
    torch.testing.assert_close(model._embed_source(tokens), model.source_embedding(tokens))
    with pytest.raises(ValueError, match="embedding_init must be one of"):
        TransformerSeq2Seq(vocab, vocab, embedding_init="kaiming")


def test_a_tied_output_layer_reads_the_target_embeddings_and_trains_them_once():
    """``tied_output``: one weight for the target embeddings and the output layer (its own bias);
    a gradient step through both changes both, and a checkpoint's state dict restores the tie."""
    model = build("relative", tied_output=True)
    assert model.output.weight is model.target_embedding.weight
    assert model.output.bias.shape == (TARGET_VOCAB,)
    assert (
        sum(p.numel() for p in model.parameters())
        == sum(p.numel() for p in build("relative").parameters()) - TARGET_VOCAB * TINY["d_model"]
    )
    source, mask = padded_batch(SOURCES)
    model.train()
    model(source, mask, TARGET_INPUT).logits.sum().backward()
    assert model.target_embedding.weight.grad is not None and model.output.weight.grad is not None
    copy = build("relative", seed=1, tied_output=True)
    copy.load_state_dict(model.state_dict())
    assert copy.output.weight is copy.target_embedding.weight
    torch.testing.assert_close(copy.output.weight, model.target_embedding.weight)


def test_learned_positions_refuse_lengths_beyond_the_table():
    """A bad input, not a bug: a PositionTableError, which the command line reports in one line."""
    from attnlab.attention.positions import PositionTableError
    from attnlab.errors import USER_ERRORS

    assert PositionTableError in USER_ERRORS
    model = build("learned", max_positions=4)
    source, mask = padded_batch([[3, 4, 5, 6, 7]])
    with pytest.raises(PositionTableError, match="max_positions=4"):
        model(source, mask, TARGET_INPUT[:1, :2])
    table = AbsolutePositions("learned", 8, max_positions=3)
    with pytest.raises(ValueError, match="needs position 3"):
        table(torch.zeros(1, 4, 8), torch.arange(4.0).unsqueeze(0))


def _encoder_layer_outputs(model: TransformerSeq2Seq, source: torch.Tensor, mask: torch.Tensor) -> list:
    outputs: list[torch.Tensor] = []
    hooks = [layer.register_forward_hook(lambda _m, _i, out: outputs.append(out)) for layer in model.encoder]
    model.encode(source, mask)
    for hook in hooks:
        hook.remove()
    return outputs


def test_post_norm_normalises_after_every_residual_sum_and_adds_no_final_norm():
    """Post-norm: every layer's output is a layer normalisation's (zero mean, unit variance per
    position at initialisation) and the stacks end there; pre-norm layers pass the residual stream
    on unnormalised and each stack ends in its own normalisation."""
    source, mask = padded_batch(SOURCES)
    for norm, normalised in (("post", True), ("pre", False)):
        model = build(norm=norm)
        for out in _encoder_layer_outputs(model, source, mask):
            real = out[~mask]
            zero_mean = torch.allclose(real.mean(-1), torch.zeros(len(real)), atol=1e-5)
            unit_variance = torch.allclose(real.var(-1, unbiased=False), torch.ones(len(real)), atol=1e-3)
            assert (zero_mean and unit_variance) == normalised
        final = (model.encoder_norm, model.decoder_norm)
        assert all(isinstance(module, torch.nn.Identity) for module in final) == normalised
    with pytest.raises(ValueError, match="norm must be one of"):
        build(norm="sandwich")


@pytest.mark.parametrize(
    ("dropout", "embedding_dropout", "dropped"),
    [(0.5, 0.0, False), (0.0, 0.5, True), (0.5, None, True), (0.0, None, False)],
)
def test_embedding_dropout_sets_the_input_embeddings_rate_apart_from_the_layers(
    dropout, embedding_dropout, dropped
):
    """In training the first encoder layer reads the embeddings (with positions) dropped at
    ``embedding_dropout``'s rate, or at ``dropout``'s when it is ``None``: about half of them zero
    at 0.5, none at 0."""
    model = build(dropout=dropout, embedding_dropout=embedding_dropout).train()
    inputs: list[torch.Tensor] = []
    model.encoder[0].register_forward_hook(lambda _m, args, _out: inputs.append(args[0]))
    source, mask = padded_batch(SOURCES)
    model.encode(source, mask)
    zero_share = (inputs[0][~mask] == 0).float().mean().item()
    assert (zero_share > 0.3) == dropped, zero_share
    assert zero_share < 0.7


def test_embedding_dropout_outside_its_range_is_an_error():
    with pytest.raises(ValueError, match=r"embedding_dropout must be in \[0, 1\) or None"):
        build(embedding_dropout=1.0)


def test_xavier_linear_init_draws_each_projection_part_from_its_own_xavier_bound():
    """``linear_init="xavier"``: every query / key / value part, attention output, Transformer-XL
    position projection and feed-forward layer is uniform within ``gain * sqrt(6 / (fan_in +
    fan_out))`` of its own shape (reaching near it), with zero biases; the default keeps
    ``nn.Linear``'s bound ``1 / sqrt(fan_in)`` and its random biases."""
    xavier = build("transformer_xl", linear_init="xavier", d_model=32, ff_dim=64)
    default = build("transformer_xl", d_model=32, ff_dim=64)
    relu = torch.nn.init.calculate_gain("relu")

    def bound(weight: torch.Tensor, gain: float = 1.0) -> float:
        fan_out, fan_in = weight.shape
        return gain * math.sqrt(6 / (fan_in + fan_out))

    for model, is_xavier in ((xavier, True), (default, False)):
        layer = model.encoder[0]
        cross = model.decoder[0].cross_attention
        parts = [
            *layer.attention.qkv.weight.chunk(3),
            layer.attention.out.weight,
            layer.attention.positions.position_layer.weight,
            cross.query.weight,
            *cross.key_value.weight.chunk(2),
            cross.out.weight,
        ]
        for weight in parts:
            assert (0.9 * bound(weight) < weight.abs().max() <= bound(weight)) == is_xavier
        first, second = layer.ff[0].weight, layer.ff[3].weight
        assert (0.9 * bound(first, relu) < first.abs().max() <= bound(first, relu)) == is_xavier
        assert (0.9 * bound(second) < second.abs().max() <= bound(second)) == is_xavier
        biases = [layer.attention.qkv.bias, cross.key_value.bias, layer.ff[0].bias]
        assert all(bool((bias == 0).all()) for bias in biases) == is_xavier
    with pytest.raises(ValueError, match="linear_init must be one of"):
        build(linear_init="orthogonal")


@pytest.mark.parametrize(("positional", "tied_output"), [("transformer_xl", True), ("sinusoidal", False)])
def test_csordas2021_linear_init_leaves_each_layer_as_their_released_code_does(positional, tied_output):
    """``linear_init="csordas2021"``: cross-attention and feed-forward weights Xavier-uniform (each
    part within its own bound, reaching near it), their biases as ``nn.Linear`` drew them (not
    zero); the self-attention Xavier too, but under Transformer-XL positions ``nn.Linear``'s own
    (bound ``1 / sqrt(fan_in)``, well under Xavier's at these shapes); the output layer's bias zero
    when tied, its weights Xavier when not."""
    model = build(positional, linear_init="csordas2021", d_model=32, ff_dim=64, tied_output=tied_output)
    relu = torch.nn.init.calculate_gain("relu")

    def xavier(weight: torch.Tensor, gain: float = 1.0) -> bool:
        fan_out, fan_in = weight.shape
        bound = gain * math.sqrt(6 / (fan_in + fan_out))
        return bool(0.9 * bound < weight.abs().max() <= bound)

    layer, cross = model.encoder[0], model.decoder[0].cross_attention
    assert all(xavier(w) for w in (cross.query.weight, *cross.key_value.weight.chunk(2), cross.out.weight))
    assert xavier(layer.ff[0].weight, relu) and xavier(layer.ff[3].weight)
    assert not any(bool((bias == 0).all()) for bias in (cross.key_value.bias, layer.ff[0].bias))
    self_parts = [*layer.attention.qkv.weight.chunk(3), layer.attention.out.weight]
    relative = positional == "transformer_xl"
    if relative:
        self_parts.append(layer.attention.positions.position_layer.weight)
        assert all(part.abs().max() <= 1 / math.sqrt(32) for part in self_parts)
    assert all(xavier(part) for part in self_parts) == (not relative)
    if tied_output:
        assert bool((model.output.bias == 0).all())
    else:
        assert xavier(model.output.weight) and not bool((model.output.bias == 0).all())


def test_attention_without_biases_drops_exactly_the_projections_biases():
    """``attention_bias=False``: no bias on the self- and cross-attention's query, key, value and
    output projections, 8·d_model fewer parameters a layer in the encoder and 16·d_model in the
    decoder; the model still decodes step by step as it does teacher-forced."""
    model, biased = build("transformer_xl", attention_bias=False), build("transformer_xl")
    d_model, layers = TINY["d_model"], TINY["encoder_layers"]
    projections = [model.encoder[0].attention.qkv, model.encoder[0].attention.out]
    cross = model.decoder[0].cross_attention
    projections += [model.decoder[0].self_attention.qkv, cross.query, cross.key_value, cross.out]
    assert all(linear.bias is None for linear in projections)
    count = sum(p.numel() for p in model.parameters())
    assert count == sum(p.numel() for p in biased.parameters()) - layers * (4 + 8) * d_model
    source, mask = padded_batch(SOURCES)
    assert_cached_decoding_matches(model, source, mask, model(source, mask, TARGET_INPUT))


def test_start_is_end_reads_the_start_token_as_the_end_tokens_embedding():
    """``start_is_end``: what the ``<sos>`` row of the target embeddings holds changes no output,
    what the ``<eos>`` row holds changes the first step's; without it the reverse."""
    source, mask = padded_batch(SOURCES)
    for start_is_end in (True, False):
        model = build("relative", start_is_end=start_is_end)
        before = model(source, mask, TARGET_INPUT[:, :1]).logits
        for row, reads_it in ((SOS, not start_is_end), (EOS, start_is_end)):
            changed = build("relative", start_is_end=start_is_end)
            with torch.no_grad():
                changed.target_embedding.weight[row] = torch.randn(TINY["d_model"])
            after = changed(source, mask, TARGET_INPUT[:, :1]).logits
            assert (not torch.allclose(before, after)) == reads_it, (start_is_end, row)


def test_unknown_scheme_and_bad_cross_attention_specs_are_errors():
    with pytest.raises(ValueError, match="positional must be one of"):
        build("wavelet")
    with pytest.raises(ValueError, match="cross_attention: unknown head 'telepathy'; expected 'dot' or an"):
        build(cross_attention="telepathy")
    with pytest.raises(ValueError, match=r"cross_attention\[1\]\[0\]: unknown head 'dott'"):
        cross_attention_heads(["dot", ["dott", "shift"]], layers=2, heads=2)
    with pytest.raises(ValueError, match=r"cross_attention\[0\]: unknown head 'telepathy'"):
        cross_attention_heads(["telepathy", "dot"], layers=2, heads=2)
    with pytest.raises(ValueError, match="lists 3 layers"):
        cross_attention_heads(["dot"] * 3, layers=2, heads=2)
    with pytest.raises(ValueError, match="list of 2 names"):
        cross_attention_heads(["dot", ["dot"]], layers=2, heads=2)
    assert cross_attention_heads(["dot", ["location", "dot"]], 2, 2) == [["dot", "dot"], ["location", "dot"]]


# ------------------------------------------------------------------- masking and decoding


@pytest.mark.parametrize("decoder_recurrence", DECODER_RECURRENCES)
@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("positional", POSITIONAL_SCHEMES)
def test_causal_masking_is_exact(positional, norm, decoder_recurrence):
    model = build(positional, norm=norm, decoder_recurrence=decoder_recurrence)
    source, mask = padded_batch(SOURCES)
    logits = model(source, mask, TARGET_INPUT).logits
    changed = TARGET_INPUT.clone()
    changed[:, 3] = 8
    new_logits = model(source, mask, changed).logits
    torch.testing.assert_close(new_logits[:, :3], logits[:, :3], rtol=0, atol=0)
    assert not torch.allclose(new_logits[:, 3:], logits[:, 3:])


@pytest.mark.parametrize("decoder_recurrence", DECODER_RECURRENCES)
@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("positional", POSITIONAL_SCHEMES)
def test_padding_is_exact(positional, norm, decoder_recurrence):
    model = build(positional, norm=norm, decoder_recurrence=decoder_recurrence)
    source, mask = padded_batch(SOURCES, width=7)
    output = model(source, mask, TARGET_INPUT)
    other = source.masked_fill(mask, 5)  # different tokens under the padding
    output_other = model(other, mask, TARGET_INPUT)
    torch.testing.assert_close(output_other.logits, output.logits, rtol=0, atol=0)
    # padding gets no attention, and a batch of one unpadded sequence gives the same outputs
    assert bool((output.attention.masked_select(mask.unsqueeze(1).expand_as(output.attention)) == 0).all())
    alone = model(torch.tensor([SOURCES[1]]), torch.zeros(1, 2, dtype=torch.bool), TARGET_INPUT[1:2])
    torch.testing.assert_close(alone.logits, output.logits[1:2], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("decoder_recurrence", DECODER_RECURRENCES)
@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("positional", POSITIONAL_SCHEMES)
def test_cached_decoding_equals_teacher_forcing(positional, norm, decoder_recurrence):
    model = build(
        positional,
        cross_attention=["dot", ["location", "dot"]],
        norm=norm,
        decoder_recurrence=decoder_recurrence,
    )
    source, mask = padded_batch(SOURCES)
    full = model(source, mask, TARGET_INPUT)
    assert_cached_decoding_matches(model, source, mask, full)


@pytest.mark.parametrize("positional", ["relative", "transformer_xl", "none"])
def test_a_source_start_token_is_read_by_the_encoder_and_left_out_of_the_attention(positional):
    """``source_start``: one more embedding row, a first source position the encoder reads (so the
    outputs change), attention returned over the source's own tokens only (rows sum to
    ``1 − α_start``), and padding and cached decoding still exact."""
    plain = build(positional, norm="post")
    model = build(positional, norm="post", source_start=True)
    assert model.source_embedding.num_embeddings == plain.source_embedding.num_embeddings + 1
    source, mask = padded_batch(SOURCES, width=7)
    output = model(source, mask, TARGET_INPUT)
    assert output.attention.shape == plain(source, mask, TARGET_INPUT).attention.shape
    on_start = 1 - output.attention.sum(dim=-1)
    assert bool((on_start > 1e-4).all()) and bool((on_start < 1).all())
    maps = model.cross_attention_maps(source, mask, TARGET_INPUT)
    torch.testing.assert_close(maps[:, -1].mean(dim=1), output.attention)
    other = source.masked_fill(mask, 5)
    torch.testing.assert_close(model(other, mask, TARGET_INPUT).logits, output.logits, rtol=0, atol=0)
    assert_cached_decoding_matches(model, source, mask, output)
    # the encoder reads it: another start embedding gives other outputs
    assert model.start_marker_id == SOURCE_VOCAB
    with torch.no_grad():
        model.source_embedding.weight[model.start_marker_id] += 1.0
    assert not torch.allclose(model(source, mask, TARGET_INPUT).logits, output.logits)


@pytest.mark.parametrize("attender", ["location", "mix", "shift"])
def test_location_attenders_as_cross_attention(attender):
    options = {"location": {"resize_dim": 8}} if attender == "location" else {}
    model = build("rope", cross_attention=attender, cross_attention_options=options)
    source, mask = padded_batch(SOURCES)
    output = model(source, mask, TARGET_INPUT)
    assert output.attention.shape == (3, 5, 5)
    torch.testing.assert_close(output.attention.sum(-1), torch.ones(3, 5))
    assert bool((output.attention[mask.unsqueeze(1).expand_as(output.attention)] == 0).all())
    layer = model.decoder[-1].cross_attention
    assert [type(a).__name__ for a in layer.attenders.values()] == [type(layer.attenders["0"]).__name__] * 2
    decoded = model.greedy_decode(source, mask, max_length=6)
    assert decoded.tokens is not None and decoded.tokens.shape[0] == 3
    output.logits.sum().backward()  # gradients flow through the attender heads
    head = model.decoder[0].cross_attention.attenders["0"]
    assert any(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in head.parameters())


@pytest.mark.parametrize(
    ("cross_attention", "together"),
    [
        ("shift", [[0, 1], [0, 1]]),
        ([["shift", "shift"], ["shift", "location"]], [[0, 1], []]),
        (["dot", ["shift", "dot"]], [[], []]),
    ],
)
def test_shift_heads_run_together_with_each_heads_numbers(cross_attention, together):
    """A layer's Shift Attender heads run as one batch (attention.shift.attend_heads): the same
    logits, gradients, Gumbel draws and step-by-step decoding as one call per head."""
    options = {"location": {"resize_dim": 8}} if "location" in str(cross_attention) else {}
    source, mask = padded_batch(SOURCES)
    results = []
    for grouped in (True, False):
        model = build("rope", cross_attention=cross_attention, cross_attention_options=options).train()
        layers = [layer.cross_attention for layer in model.decoder]
        assert [layer.shift_heads for layer in layers] == together
        if not grouped:  # the reference: every attender head on its own
            for layer in layers:
                layer.call_heads_one_by_one()
        torch.manual_seed(3)
        logits = model(source, mask, TARGET_INPUT).logits
        (logits * torch.linspace(-1, 1, logits.numel()).view_as(logits)).sum().backward()
        model.eval()
        state, steps = model.start(source, mask), []
        for t in range(TARGET_INPUT.size(1)):
            step_logits, _, state = model.step(state, TARGET_INPUT[:, t])
            steps.append(step_logits)
        results.append((logits, [p.grad for p in model.parameters()], torch.stack(steps, 1)))
    (logits, grads, steps), (own_logits, own_grads, own_steps) = results
    torch.testing.assert_close(logits, own_logits, rtol=0, atol=1e-6)
    for grad, own in zip(grads, own_grads, strict=True):
        assert (grad is None) == (own is None)
        if grad is not None:
            torch.testing.assert_close(grad, own, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(steps, own_steps, rtol=0, atol=1e-6)


Batch = tuple[torch.Tensor, torch.Tensor, torch.Tensor]
"""``(source, target_input, target_output)`` of a toy task."""


def _sequence_task(source: torch.Tensor, target: torch.Tensor) -> Batch:
    size = source.size(0)
    target_input = torch.cat([torch.full((size, 1), SOS), target], dim=1)
    target_output = torch.cat([target, torch.full((size, 1), EOS)], dim=1)
    return source, target_input, target_output


def _train_tiny(batches, updates: int, **options) -> tuple[TransformerSeq2Seq, float]:
    """A one-layer RoPE model (d_model 32, 2 heads) trained by Adam on ``batches(update)``;
    returns it in eval mode with its last training loss."""
    torch.manual_seed(0)
    model = TransformerSeq2Seq(
        8,
        8,
        d_model=32,
        heads=2,
        encoder_layers=1,
        decoder_layers=1,
        ff_dim=64,
        dropout=0.0,
        positional="rope",
        **options,
    )
    optimiser = torch.optim.Adam(model.parameters(), lr=3e-3)
    for update in range(updates):
        source, target_input, target_output = batches(update)
        logits = model(source, source == PAD, target_input).logits
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), target_output.flatten())
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    return model.eval(), loss.item()


def _sequence_accuracy(model: TransformerSeq2Seq, batch: Batch, max_length: int) -> float:
    source, _, target_output = batch
    decoded = model.greedy_decode(source, source == PAD, max_length=max_length).tokens
    assert decoded is not None
    width = target_output.size(1)
    if decoded.size(1) < width:
        return 0.0
    return (decoded[:, :width] == target_output).all(dim=1).float().mean().item()


@pytest.mark.parametrize("norm", NORMS)
def test_learns_to_reverse_a_short_sequence(norm):
    """A few hundred updates of a tiny RoPE model reverse 3-token sequences, pre- or post-norm."""
    generator = torch.Generator().manual_seed(0)

    def batch(size: int) -> Batch:
        source = torch.randint(3, 8, (size, 3), generator=generator)
        return _sequence_task(source, source.flip(1))

    model, loss = _train_tiny(lambda update: batch(32), 250, norm=norm)
    accuracy = _sequence_accuracy(model, batch(64), max_length=5)
    chance = math.log(5)
    assert accuracy > 0.9, f"sequence accuracy {accuracy:.2f} (loss {loss:.3f}, chance {chance:.2f})"


# ------------------------------------------------------------------------------ every layer and head


@pytest.mark.parametrize(
    "cross_attention", ["dot", ["dot", ["dot", "shift"]], [["location", "dot"], ["dot", "mix"]]]
)
def test_cross_attention_maps_hold_every_layer_and_head(cross_attention):
    """``[B, layers, heads, T, S]``; the last layer's mean over heads is the returned attention."""
    model = build("rope", cross_attention=cross_attention, heads=2, decoder_layers=2)
    source, mask = padded_batch(SOURCES)
    with torch.no_grad():
        maps = model.cross_attention_maps(source, mask, TARGET_INPUT)
        output = model(source, mask, TARGET_INPUT)
    assert maps.shape == (3, 2, 2, 5, 5)
    torch.testing.assert_close(maps[:, -1].mean(dim=1), output.attention, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(maps.sum(-1), torch.ones(3, 2, 2, 5), rtol=1e-5, atol=1e-5)
    assert bool((maps[mask[:, None, None, None, :].expand_as(maps)] == 0).all())
    assert not torch.allclose(maps[:, 0], maps[:, 1])  # the layers differ


def test_cross_attention_maps_of_a_greedy_decoding_are_the_decoded_steps():
    model = build("sinusoidal", cross_attention=["dot", ["dot", "shift"]], decoder_layers=2)
    source, mask = padded_batch(SOURCES)
    decoded = model.greedy_decode(source, mask, max_length=6)
    assert decoded.tokens is not None
    target_input = model.decoded_input(decoded.tokens)
    assert target_input[:, 0].eq(SOS).all() and torch.equal(target_input[:, 1:], decoded.tokens[:, :-1])
    with torch.no_grad():
        maps = model.cross_attention_maps(source, mask, target_input)
    assert maps.shape == (3, 2, 2, decoded.tokens.size(1), 5)
    for row, tokens in enumerate(decoded.tokens):
        steps = int((tokens != PAD).sum())  # up to and including <eos>
        torch.testing.assert_close(
            maps[row, -1, :, :steps].mean(dim=0), decoded.attention[row, :steps], rtol=1e-5, atol=1e-6
        )


# ------------------------------------------------------------------------------ stopping from the attention


@pytest.mark.parametrize(
    ("stop_layers", "gate_weights"), [("last", [0.3, -0.4]), ("all", [0.3, -0.4, 0.1, 0.5])]
)
@pytest.mark.parametrize("cross_attention", ["dot", "shift"])
def test_stop_from_attention_is_the_gated_attention_on_the_start_and_the_last_source_token(
    cross_attention, stop_layers, gate_weights
):
    """The gate is over the last decoder layer's heads, or with ``stop_layers="all"`` over every
    layer's (2 layers x 2 heads here)."""
    model = build(
        "sinusoidal", cross_attention=cross_attention, stop_from_attention=True, stop_layers=stop_layers
    )
    assert model.stop_gate is not None and model.stop_gate.shape == (len(gate_weights),)
    with torch.no_grad():
        model.stop_gate.copy_(torch.tensor(gate_weights))
    source, mask = padded_batch(SOURCES)
    output = model(source, mask, TARGET_INPUT)
    log_probs = output.logits
    torch.testing.assert_close(log_probs.exp().sum(-1), torch.ones(3, 5))  # a distribution per step
    maps = model.cross_attention_maps(source, mask, TARGET_INPUT)  # [B, L, H, T, S]
    maps = maps[:, -1] if stop_layers == "last" else maps.flatten(1, 2)  # [B, stop heads, T, S]
    last = torch.tensor([len(seq) - 1 for seq in SOURCES])
    on_start = 1 - maps.sum(dim=-1)  # the maps cover the source's tokens, not the start position
    assert maps.shape[-1] == 5 and bool((on_start > 1e-4).any())
    on_last = maps[torch.arange(3), :, :, last] + on_start  # [B, H, T]
    gate = torch.softmax(torch.tensor(gate_weights), dim=0)
    expected = STOP_FLOOR + (1 - 2 * STOP_FLOOR) * (gate[None, :, None] * on_last).sum(dim=1)
    torch.testing.assert_close(log_probs[..., EOS].exp(), expected, rtol=1e-5, atol=1e-6)
    # cached decoding gives the same stop as teacher forcing
    state = model.start(source, mask)
    for t in range(TARGET_INPUT.size(1)):
        step_log_probs, _, state = model.step(state, TARGET_INPUT[:, t])
        torch.testing.assert_close(step_log_probs, log_probs[:, t], rtol=1e-5, atol=1e-5)
    # the gate and the attention learn from the <eos> targets
    model.train()
    loss = -model(source, mask, TARGET_INPUT).logits[..., EOS].mean()
    loss.backward()
    assert model.stop_gate.grad is not None and bool(model.stop_gate.grad.abs().sum() > 0)


@pytest.mark.parametrize("stop_layers", ["last", "all"])
def test_a_gated_stop_weighs_each_head_on_each_end(stop_layers):
    """``stop_ends="gated"``: ``p(<eos>) = Σ_h g_h,start α_h,start + g_h,end α_h,end``, ``g`` one
    softmax over all (head, end) pairs; cached decoding gives the same stop, and the gate learns."""
    model = build("sinusoidal", stop_from_attention=True, stop_layers=stop_layers, stop_ends="gated")
    stop_heads = 2 if stop_layers == "last" else 4
    assert model.stop_gate is not None and model.stop_gate.shape == (stop_heads, 2)
    weights = torch.linspace(-1.0, 1.5, 2 * stop_heads).view(stop_heads, 2)
    with torch.no_grad():
        model.stop_gate.copy_(weights)
    gate = model.stop_gate_weights()
    torch.testing.assert_close(gate, torch.softmax(weights.flatten(), dim=0).view(stop_heads, 2))
    source, mask = padded_batch(SOURCES)
    output = model(source, mask, TARGET_INPUT)
    maps = model.cross_attention_maps(source, mask, TARGET_INPUT)  # [B, L, H, T, S]
    maps = maps[:, -1] if stop_layers == "last" else maps.flatten(1, 2)
    last = torch.tensor([len(seq) - 1 for seq in SOURCES])
    on_start, on_end = 1 - maps.sum(dim=-1), maps[torch.arange(3), :, :, last]  # [B, H, T] each
    stop = (gate[None, :, 0, None] * on_start + gate[None, :, 1, None] * on_end).sum(dim=1)
    expected = STOP_FLOOR + (1 - 2 * STOP_FLOOR) * stop
    torch.testing.assert_close(output.logits[..., EOS].exp(), expected.detach(), rtol=1e-5, atol=1e-6)
    either = build("sinusoidal", stop_from_attention=True, stop_layers=stop_layers)  # same seed, same heads
    assert not torch.allclose(either(source, mask, TARGET_INPUT).logits, output.logits)
    state = model.start(source, mask)
    for t in range(TARGET_INPUT.size(1)):
        step_log_probs, _, state = model.step(state, TARGET_INPUT[:, t])
        torch.testing.assert_close(step_log_probs, output.logits[:, t], rtol=1e-5, atol=1e-5)
    output.logits[..., EOS].sum().backward()
    assert model.stop_gate.grad is not None and bool((model.stop_gate.grad != 0).all())


def test_separate_stop_heads_are_read_by_the_stop_alone():
    """``stop_layers="separate"``: ``p(<eos>)`` is the gate over the :class:`StopHeads`' attention on
    the start position and the source's last token; cached decoding gives the same stop; the gate
    and the stop heads learn from it."""
    model = build("sinusoidal", stop_from_attention=True, stop_layers="separate")
    assert model.stop_attention is not None and model.stop_gate is not None
    assert model.stop_gate.shape == (2,)  # one gate weight per stop head (TINY: 2 heads)
    with torch.no_grad():
        model.stop_gate.copy_(torch.tensor([0.3, -0.4]))
    captured: list[torch.Tensor] = []
    hook = model.stop_attention.register_forward_hook(lambda module, inputs, output: captured.append(output))
    source, mask = padded_batch(SOURCES)
    output = model(source, mask, TARGET_INPUT)
    hook.remove()
    weights = captured[0]  # [B, H, T, 1 + S]: the start position, then the source
    assert weights.shape == (3, 2, 5, 6)
    torch.testing.assert_close(weights.sum(dim=-1), torch.ones(3, 2, 5))
    assert float(weights[1, :, :, 3:].detach().abs().sum()) == 0.0  # padding of the 2-token source
    last = torch.tensor([len(seq) for seq in SOURCES])  # the source's last token, after the start
    ends = weights[..., 0] + weights[torch.arange(3), :, :, last]  # [B, H, T]
    gate = torch.softmax(torch.tensor([0.3, -0.4]), dim=0)
    expected = STOP_FLOOR + (1 - 2 * STOP_FLOOR) * (gate[None, :, None] * ends).sum(dim=1)
    torch.testing.assert_close(output.logits[..., EOS].exp(), expected, rtol=1e-5, atol=1e-6)
    # the content heads' attention is not the stop's: the stop is not the last layer's gated ends
    last_layer = build("sinusoidal", stop_from_attention=True)
    assert not torch.allclose(
        last_layer(source, mask, TARGET_INPUT).logits[..., EOS], output.logits[..., EOS]
    )
    state = model.start(source, mask)
    for t in range(TARGET_INPUT.size(1)):
        step_log_probs, _, state = model.step(state, TARGET_INPUT[:, t])
        torch.testing.assert_close(step_log_probs, output.logits[:, t], rtol=1e-5, atol=1e-5)
    output.logits[..., EOS].sum().backward()
    for name, parameter in model.named_parameters():
        if name == "stop_gate" or name.startswith("stop_attention."):
            assert parameter.grad is not None and bool(parameter.grad.abs().sum() > 0), name


@pytest.mark.parametrize("options", [{"stop_detached": True}, {"stop_head_gradient": 0.25}])
def test_separate_stop_heads_learn_from_all_of_the_stop_and_scale_what_reaches_the_rest(options):
    """With ``stop_layers="separate"``, ``stop_head_gradient`` λ (``stop_detached``: 0) scales the
    stop's gradient where it leaves the stop heads (the decoder's output and the memory they read):
    the gate's and the stop heads' gradients are those of λ = 1, every other parameter's λ times."""
    share = 0.0 if options.get("stop_detached") else options["stop_head_gradient"]
    source, mask = padded_batch(SOURCES)
    grads, stops = [], []
    for extra in ({}, options):
        model = build("sinusoidal", stop_from_attention=True, stop_layers="separate", **extra)
        log_stop = model(source, mask, TARGET_INPUT).logits[..., EOS].sum()
        log_stop.backward()
        stops.append(log_stop.detach())
        grads.append({name: p.grad for name, p in model.named_parameters()})
    torch.testing.assert_close(stops[0], stops[1])
    own = [name for name in grads[0] if name == "stop_gate" or name.startswith("stop_attention.")]
    rest = [name for name in grads[0] if name not in own and grads[0][name] is not None]
    assert len(own) == 5 and any(".cross_attention." in name for name in rest)
    for name in own:
        torch.testing.assert_close(grads[1][name], grads[0][name], rtol=1e-4, atol=1e-7)
    for name in rest:
        scaled = grads[1][name] if grads[1][name] is not None else torch.zeros_like(grads[0][name])
        torch.testing.assert_close(scaled, share * grads[0][name], rtol=1e-4, atol=1e-7)


def test_stop_layers_must_be_known():
    with pytest.raises(ValueError, match="stop_layers must be one of"):
        build("sinusoidal", stop_from_attention=True, stop_layers="first")
    with pytest.raises(ValueError, match="stop_ends must be one of"):
        build("sinusoidal", stop_from_attention=True, stop_ends="start")
    with pytest.raises(ValueError, match="stop_gate_scale must be > 0"):
        build("sinusoidal", stop_from_attention=True, stop_gate_scale=0.0)


def test_the_stop_gate_scale_multiplies_the_gate_logits():
    """``stop_gate_scale`` k with gate weights w gives the stop that weights k·w give at scale 1."""
    source, mask = padded_batch(SOURCES)
    scaled = build("sinusoidal", stop_from_attention=True, stop_gate_scale=10.0)  # dot heads: soft maps
    plain = build("sinusoidal", stop_from_attention=True)
    assert scaled.stop_gate is not None and plain.stop_gate is not None
    with torch.no_grad():
        scaled.stop_gate.copy_(torch.tensor([0.3, -0.4]))
        plain.stop_gate.copy_(torch.tensor([3.0, -4.0]))
        torch.testing.assert_close(
            scaled(source, mask, TARGET_INPUT).logits, plain(source, mask, TARGET_INPUT).logits
        )
        plain.stop_gate.copy_(torch.tensor([0.3, -0.4]))
        assert not torch.allclose(
            scaled(source, mask, TARGET_INPUT).logits, plain(source, mask, TARGET_INPUT).logits
        )


@pytest.mark.parametrize("stop_layers", ["last", "all"])
def test_a_detached_stop_trains_the_gate_and_not_the_heads(stop_layers):
    """``stop_detached``: the same stop, but its log-probability's gradient reaches the gate alone;
    attached, it reaches the heads (and what feeds them) too."""
    source, mask = padded_batch(SOURCES)
    options = {"stop_from_attention": True, "stop_layers": stop_layers}
    detached, attached = build(**options, stop_detached=True), build(**options)
    stops = []
    for model in (detached, attached):
        model.train(False)
        log_stop = model(source, mask, TARGET_INPUT).logits[..., EOS].sum()  # log p(<eos>): the stop
        log_stop.backward()
        stops.append(log_stop.detach())
    torch.testing.assert_close(stops[0], stops[1])

    def moved(model):
        return {name for name, p in model.named_parameters() if p.grad is not None and p.grad.abs().sum() > 0}

    assert moved(detached) == {"stop_gate"}
    assert "stop_gate" in moved(attached) and any(".cross_attention." in name for name in moved(attached))


def test_stop_head_gradient_scales_what_the_stop_teaches_the_heads():
    """``stop_head_gradient`` λ: the same stop; the gate's gradient unchanged, the heads' (and what
    feeds them) λ times the attached stop's."""
    source, mask = padded_batch(SOURCES)
    options = {"stop_from_attention": True, "stop_layers": "all"}
    grads, stops = [], []
    for model in (build(**options), build(**options, stop_head_gradient=0.25)):
        model.train(False)
        log_stop = model(source, mask, TARGET_INPUT).logits[..., EOS].sum()
        log_stop.backward()
        stops.append(log_stop.detach())
        grads.append({name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None})
    torch.testing.assert_close(stops[0], stops[1])
    torch.testing.assert_close(grads[1]["stop_gate"], grads[0]["stop_gate"])
    heads = [name for name in grads[0] if ".cross_attention." in name and grads[0][name].abs().sum() > 0]
    assert heads
    for name in heads:
        torch.testing.assert_close(grads[1][name], 0.25 * grads[0][name], rtol=1e-4, atol=1e-7)
    with pytest.raises(ValueError, match="stop_head_gradient must be in"):
        build(**options, stop_head_gradient=1.5)
    with pytest.raises(ValueError, match="stop_detached already sends none"):
        build(**options, stop_detached=True, stop_head_gradient=0.5)


def test_without_stop_from_attention_eos_is_an_output_layer_token():
    model = build("sinusoidal")
    assert model.stop_gate is None and not any("stop_gate" in name for name, _ in model.named_parameters())
    with pytest.raises(ValueError, match="no stop gate"):
        model.stop_gate_weights()
    source, mask = padded_batch(SOURCES)
    with torch.no_grad():
        maps = model.cross_attention_maps(source, mask, TARGET_INPUT)
        hidden = model.decoder_norm  # the logits are the output layer's: not log-probabilities
        logits = model(source, mask, TARGET_INPUT).logits
    assert maps.shape[-1] == 5 and hidden is not None
    assert not torch.allclose(logits.exp().sum(-1), torch.ones(3, 5))


@pytest.mark.parametrize(
    ("attender_keys", "stop_layers"), [("memory", "last"), ("local", "last"), ("memory", "separate")]
)
def test_stop_from_attention_learns_to_stop_at_lengths_beyond_training(attender_keys, stop_layers):
    """Copy tasks ending in an end token (id 7): trained on 2–4 tokens with shift heads, the model
    copies 6 tokens and stops, the stop read from where the attention is (with the heads' keys from
    the encoder's output or from a window of three token embeddings; or from heads of the stop's
    own, which read the decoder's output)."""
    generator = torch.Generator().manual_seed(0)

    def batch(size: int, length: int) -> Batch:
        words = torch.randint(3, 7, (size, length), generator=generator)
        return _sequence_task(torch.cat([words, torch.full((size, 1), 7)], dim=1), words)

    model, loss = _train_tiny(
        lambda update: batch(32, 2 + update % 3),
        300,
        cross_attention="shift",
        stop_from_attention=True,
        attender_keys=attender_keys,
        stop_layers=stop_layers,
    )
    accuracy = _sequence_accuracy(model, batch(64, 6), max_length=10)
    assert accuracy > 0.9, f"sequence accuracy at length 6: {accuracy:.2f} (last loss {loss:.3f})"


@pytest.mark.parametrize("cross_attention", ["dot", "shift"])
def test_end_marker_is_a_learned_last_token_that_the_stop_reads(cross_attention):
    """``end_marker`` appends a learned end position after each source's real tokens (before its
    padding): the attention gets a column more, each row's end marker at its length, and the stop
    from the attention reads that column as the source's end."""
    model = build("sinusoidal", cross_attention=cross_attention, stop_from_attention=True, end_marker=True)
    assert model.source_embedding.num_embeddings == SOURCE_VOCAB + 2  # the start and the end marker
    source, mask = padded_batch(SOURCES)
    output = model(source, mask, TARGET_INPUT)
    maps = model.cross_attention_maps(source, mask, TARGET_INPUT)[:, -1]  # [B, H, T, S + 1]
    assert output.attention.shape == (3, 5, 6) and maps.shape[-1] == 6
    lengths = torch.tensor([len(seq) for seq in SOURCES])
    on_marker = maps[torch.arange(3), :, :, lengths]
    assert bool((on_marker > 1e-4).any())
    after = torch.arange(6) > lengths.unsqueeze(1)  # the padding after the end marker
    assert bool((output.attention.masked_select(after.unsqueeze(1).expand_as(output.attention)) == 0).all())
    gate = torch.softmax(model.stop_gate.detach(), dim=0)
    expected = STOP_FLOOR + (1 - 2 * STOP_FLOOR) * (gate[None, :, None] * (on_marker + 1 - maps.sum(-1))).sum(
        1
    )
    torch.testing.assert_close(output.logits[..., EOS].exp(), expected, rtol=1e-5, atol=1e-6)
    # a padded row equals the row alone, and cached decoding equals teacher forcing
    alone = model(torch.tensor([SOURCES[1]]), torch.zeros(1, 2, dtype=torch.bool), TARGET_INPUT[1:2])
    torch.testing.assert_close(alone.logits, output.logits[1:2], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(alone.attention, output.attention[1:2, :, :3], rtol=1e-5, atol=1e-6)
    assert_cached_decoding_matches(model, source, mask, output)


def test_end_marker_needs_right_padded_sources():
    model = build("sinusoidal", end_marker=True)
    source = torch.tensor([[PAD, 3, 4]])
    with pytest.raises(ValueError, match="right-padded"):
        model(source, source == PAD, TARGET_INPUT[:1])


# ------------------------------------------------------------------------------ keys without position


@pytest.mark.parametrize("positional", ["sinusoidal", "learned"])
def test_attender_keys_from_the_embeddings_hold_no_position(positional):
    """With ``attender_keys="embeddings"`` (or ``"local"``: with the neighbours) a word's key for the
    attender heads is the same wherever it stands among the same neighbours (its value, and the dot
    heads' keys, still carry the position); by default it is not."""
    source = torch.tensor([[6, 3, 4, 5, 3, 4, 5, 6]])  # "3 4 5" at positions 1-3 and 4-6
    mask = torch.zeros_like(source, dtype=torch.bool)
    for attender_keys, same in (("embeddings", True), ("local", True), ("memory", False)):
        model = build(positional, cross_attention=["dot", ["shift", "dot"]], attender_keys=attender_keys)
        state = model.start(source, mask).cross[1]
        keys = state.attender_keys[0, 0]  # head 0 (the shift head), [S, D]
        assert torch.allclose(keys[2], keys[5], atol=1e-6) is same, attender_keys
        assert not torch.allclose(state.keys[0, 1, 2], state.keys[0, 1, 5], atol=1e-6)  # the dot head
    # "local" keys read the neighbours: the same word after another word has another key
    model = build(positional, cross_attention="shift", attender_keys="local")
    keys = model.start(source, mask).cross[0].attender_keys[0, 0]
    assert not torch.allclose(keys[1], keys[4], atol=1e-6)  # 3 after 6, 3 after 5


def assert_padding_is_never_read_and_decoding_is_teacher_forcing(model: TransformerSeq2Seq) -> None:
    """Other tokens at the sources' padding change no logit, and step-by-step decoding gives the
    teacher-forced logits."""
    source, mask = padded_batch(SOURCES, width=7)
    output = model(source, mask, TARGET_INPUT)
    other = model(source.masked_fill(mask, 5), mask, TARGET_INPUT)
    torch.testing.assert_close(other.logits, output.logits, rtol=0, atol=0)
    state = model.start(source, mask)
    for t in range(TARGET_INPUT.size(1)):
        logits, _, state = model.step(state, TARGET_INPUT[:, t])
        torch.testing.assert_close(logits, output.logits[:, t], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("attender_keys", ["embeddings", "local"])
def test_attender_keys_from_the_embeddings_keep_padding_and_cached_decoding_exact(attender_keys):
    model = build(
        "sinusoidal", cross_attention="shift", attender_keys=attender_keys, stop_from_attention=True
    )
    assert_padding_is_never_read_and_decoding_is_teacher_forcing(model)


def test_bad_attender_keys_are_errors():
    with pytest.raises(ValueError, match="attender_keys must be one of"):
        build("sinusoidal", cross_attention="shift", attender_keys="positions")
    with pytest.raises(ValueError, match="needs attender heads; every cross-attention head is dot"):
        build("sinusoidal", attender_keys="embeddings")


def test_options_for_an_attender_no_head_is_are_errors():
    """Options that would be ignored: ``cross_attention_options`` names an attender that none of the
    heads is; options for a head that is used are taken."""
    with pytest.raises(
        ValueError, match="names location, which no cross-attention head is .heads: dot, shift"
    ):
        build(
            "sinusoidal",
            cross_attention=["dot", "shift"],
            cross_attention_options={"location": {}, "shift": {}},
        )
    build("sinusoidal", cross_attention=["dot", "shift"], cross_attention_options={"shift": {}})


# ------------------------------------------------------------------------- a random start for the decoder


def _with_extra_sos(target_input: torch.Tensor, extra: int) -> torch.Tensor:
    return torch.cat([torch.full((target_input.size(0), extra), SOS), target_input], dim=1)


@pytest.mark.parametrize("positional", POSITIONAL_SCHEMES)
def test_a_decoder_offset_puts_random_extra_sos_tokens_before_each_target_in_training(positional):
    """In training each row's logits are those of its target after ``r`` extra ``<sos>`` (some ``r``
    in ``0..R`` per row, several over the batches); in evaluation there are none."""
    offset = 3
    model = build(positional, decoder_offset=offset)
    plain = build(positional)
    source, mask = padded_batch(SOURCES)
    with torch.no_grad():
        torch.testing.assert_close(
            model(source, mask, TARGET_INPUT).logits, plain(source, mask, TARGET_INPUT).logits
        )
        shifted = [model(source, mask, _with_extra_sos(TARGET_INPUT, r)) for r in range(offset + 1)]
        seen = set()
        model.train()
        for _ in range(8):
            output = model(source, mask, TARGET_INPUT)
            assert output.logits.shape == (3, 5, TARGET_VOCAB) and output.attention.shape == (3, 5, 5)
            for row in range(3):
                matches = [
                    r
                    for r, expected in enumerate(shifted)
                    if torch.allclose(output.logits[row], expected.logits[row, r:], atol=1e-5)
                    and torch.allclose(output.attention[row], expected.attention[row, r:], atol=1e-6)
                ]
                assert len(matches) == 1, f"row {row} matches no single offset: {matches}"
                seen.add(matches[0])
    assert len(seen) > 1


def test_a_decoder_offset_needs_dot_heads_and_is_not_negative():
    with pytest.raises(ValueError, match="decoder_offset must be >= 0"):
        build(decoder_offset=-1)
    with pytest.raises(
        ValueError, match="decoder_offset needs dot-product cross-attention heads; shift would"
    ):
        build(cross_attention=["dot", "shift"], decoder_offset=4)


# ------------------------------------------------------------------------- hiding the decoder's start


@pytest.mark.parametrize("positional", POSITIONAL_SCHEMES)
def test_a_decoder_that_hides_its_start_reads_sos_at_the_first_step_only(positional):
    """With ``decoder_hides_start`` the logits of every step after the first are the same whatever
    token stands at position 0, in every layer's self-attention; without it they change; cached
    decoding equals teacher forcing."""
    source, mask = padded_batch(SOURCES)
    other_start = TARGET_INPUT.clone()
    other_start[:, 0] = 7
    hiding, plain = build(positional, decoder_hides_start=True), build(positional)
    with torch.no_grad():
        hidden = hiding(source, mask, TARGET_INPUT).logits
        moved = hiding(source, mask, other_start).logits
        torch.testing.assert_close(hidden[:, 1:], moved[:, 1:], rtol=0, atol=0)
        assert not torch.allclose(hidden[:, 0], moved[:, 0])
        seen = plain(source, mask, TARGET_INPUT).logits
        assert not torch.allclose(seen[:, 1:], plain(source, mask, other_start).logits[:, 1:])
        # the same weights as the plain model: only the mask differs, so step 0 is the same
        torch.testing.assert_close(hidden[:, 0], seen[:, 0])
        state = hiding.start(source, mask)
        for t in range(TARGET_INPUT.size(1)):
            logits, _, state = hiding.step(state, TARGET_INPUT[:, t])
            torch.testing.assert_close(logits, hidden[:, t], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("recurrence", ["gru", "lstm"])
@pytest.mark.parametrize("positional", POSITIONAL_SCHEMES)
def test_a_decoder_recurrence_leaves_the_plain_models_initial_weights(positional, recurrence):
    """The weights a ``decoder_recurrence`` model shares with the plain one are the plain one's:
    the recurrence is built last (masking, padding and cached decoding: the tests above)."""
    model, plain = build(positional, decoder_recurrence=recurrence), build(positional)
    shared = plain.state_dict()
    recurrent = model.state_dict()
    assert set(recurrent) - set(shared) and all(
        name.startswith("decoder_recurrence.") for name in set(recurrent) - set(shared)
    )
    assert all(torch.equal(recurrent[name], value) for name, value in shared.items())


def test_a_decoder_recurrence_reads_the_order_of_the_outputs_so_far():
    """One decoder layer, no positions: a step's self-attention reads the earlier outputs as a set,
    so swapping two of them leaves the step's logits as they are; the GRU and the LSTM read them in
    order."""
    source, mask = padded_batch(SOURCES)
    swapped = TARGET_INPUT.clone()
    swapped[:, [1, 2]] = TARGET_INPUT[:, [2, 1]]
    options = {"decoder_layers": 1, "cross_attention": "dot"}
    with torch.no_grad():
        for recurrence, changes in (("none", False), ("gru", True), ("lstm", True)):
            model = build("none", decoder_recurrence=recurrence, **options)
            logits = model(source, mask, TARGET_INPUT).logits[:, 3:]
            other = model(source, mask, swapped).logits[:, 3:]
            assert (not torch.allclose(logits, other, atol=1e-6)) == changes, recurrence
    refused = "decoder_recurrence must be one of \\['none', 'gru', 'lstm'\\], got 'rnn'"
    with pytest.raises(ValueError, match=refused):
        build(decoder_recurrence="rnn")


@pytest.mark.parametrize("recurrence_layer", [1, 2])
@pytest.mark.parametrize("positional", ["relative", "none"])
def test_a_recurrence_between_decoder_layers_keeps_masking_exact_and_decoding_cached(
    positional, recurrence_layer
):
    model = build(
        positional,
        cross_attention=["dot", ["shift", "dot"]],
        decoder_recurrence="gru",
        decoder_recurrence_layer=recurrence_layer,
    )
    source, mask = padded_batch(SOURCES)
    full = model(source, mask, TARGET_INPUT)
    assert_cached_decoding_matches(model, source, mask, full)
    changed = TARGET_INPUT.clone()
    changed[:, 3] = 8
    torch.testing.assert_close(model(source, mask, changed).logits[:, :3], full.logits[:, :3], rtol=0, atol=0)


@pytest.mark.parametrize("recurrence_layer", [0, 1])
def test_a_recurrence_after_the_first_decoder_layer_reads_what_its_cross_attention_read(recurrence_layer):
    """Over the inputs (layer 0) the GRU reads the same sequence whatever the source; placed before
    layer 1 it reads layer 0's output, which holds that layer's glimpses of the source."""
    model = build("relative", decoder_recurrence="gru", decoder_recurrence_layer=recurrence_layer)
    read = []
    model.decoder_recurrence.register_forward_hook(lambda module, inputs, output: read.append(inputs[0]))
    source, mask = padded_batch(SOURCES)
    other_source = source.masked_fill(~mask, 9)
    with torch.no_grad():
        model(source, mask, TARGET_INPUT)
        model(other_source, mask, TARGET_INPUT)
    assert torch.equal(read[0], read[1]) == (recurrence_layer == 0)


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"decoder_recurrence": "gru", "decoder_recurrence_layer": 3}, "decoder_layers \\(2\\), got 3"),
        ({"decoder_recurrence": "gru", "decoder_recurrence_layer": -1}, "decoder_layers \\(2\\), got -1"),
        ({"decoder_recurrence_layer": 1}, "places decoder_recurrence, which is 'none'"),
    ],
)
def test_a_recurrence_layer_must_be_a_place_in_the_decoder_and_have_a_recurrence(options, error):
    with pytest.raises(ValueError, match=error):
        build(**options)


def test_hiding_the_decoder_start_and_a_decoder_offset_exclude_each_other():
    with pytest.raises(ValueError, match="decoder_offset adds <sos> tokens and decoder_hides_start hides"):
        build(decoder_offset=2, decoder_hides_start=True)


# ---------------------------------------------------------------------- output from the attended words


@pytest.mark.parametrize("cross_attention", ["dot", "shift"])
def test_semantic_output_logits_are_linear_in_the_attended_words_embeddings(cross_attention):
    """Russin et al. 2019's ``y_t = W Σ_j α_tj m_j``: the logits are the output layer applied to the
    last layer's cross-attention output, each head's glimpse its attention over the values projected
    from the source's token embeddings (with the end marker's)."""
    model = build("sinusoidal", cross_attention=cross_attention, end_marker=True, semantic_output=True)
    source, mask = padded_batch(SOURCES)
    logits = model(source, mask, TARGET_INPUT).logits
    attention = model.cross_attention_maps(source, mask, TARGET_INPUT)[:, -1]  # [B, H, T, S + 1]
    marked, _, _ = append_end_marker(source, mask, model.end_marker_id, PAD)
    cross = model.decoder[-1].cross_attention
    heads = TINY["heads"]
    values = cross.embedding_value(model._embed_source(marked))  # [B, S + 1, D]
    values = values.view(*values.shape[:2], heads, -1).transpose(1, 2)  # [B, H, S + 1, D / H]
    glimpses = (attention @ values).transpose(1, 2).flatten(2)  # [B, T, D]
    torch.testing.assert_close(logits, model.output(cross.out(glimpses)), rtol=1e-5, atol=1e-5)


def test_semantic_output_reads_no_context_in_its_values_and_keeps_padding_and_decoding_exact():
    """The same word gives the same value wherever it stands; padding is never read, and decoding
    step by step gives the teacher-forced logits."""
    model = build("sinusoidal", cross_attention="shift", end_marker=True, semantic_output=True)
    source, mask = padded_batch([[3, 4, 5, 3, 6]])
    values = model.start(source, mask).cross[-1].values[0]  # [H, S + 1, D / H]
    torch.testing.assert_close(values[:, 0], values[:, 3], rtol=0, atol=0)
    keys = model.start(source, mask).cross[-1].keys[0]
    assert not torch.allclose(keys[:, 0], keys[:, 3], atol=1e-4)  # the keys keep the context
    assert_padding_is_never_read_and_decoding_is_teacher_forcing(model)


def test_separate_semantic_embeddings_are_read_by_the_values_alone():
    """With ``semantic_embeddings="separate"`` the values read a table of their own: the logits
    still follow ``y_t = W Σ_j α_tj m_j`` with ``m_j`` from that table; changing it changes the
    logits and leaves the encoder's memory (and so the keys) unchanged, and changing the encoder's
    embeddings leaves the values unchanged."""
    model = build(
        "relative",
        cross_attention="dot",
        end_marker=True,
        semantic_output=True,
        semantic_embeddings="separate",
    )
    assert model.semantic_embedding is not None
    source, mask = padded_batch(SOURCES)
    logits = model(source, mask, TARGET_INPUT).logits
    attention = model.cross_attention_maps(source, mask, TARGET_INPUT)[:, -1]
    marked, _, _ = append_end_marker(source, mask, model.end_marker_id, PAD)
    cross = model.decoder[-1].cross_attention
    values = cross.embedding_value(model.semantic_embedding(marked) * model.embedding_scale)
    values = values.view(*values.shape[:2], TINY["heads"], -1).transpose(1, 2)
    glimpses = (attention @ values).transpose(1, 2).flatten(2)
    torch.testing.assert_close(logits, model.output(cross.out(glimpses)), rtol=1e-5, atol=1e-5)

    start = model.start(source, mask)
    with torch.no_grad():
        model.semantic_embedding.weight.add_(1.0)
    moved = model.start(source, mask)
    torch.testing.assert_close(moved.cross[-1].keys, start.cross[-1].keys, rtol=0, atol=0)
    assert not torch.allclose(moved.cross[-1].values, start.cross[-1].values)
    assert not torch.allclose(model(source, mask, TARGET_INPUT).logits, logits)
    with torch.no_grad():
        model.source_embedding.weight.add_(1.0)
    torch.testing.assert_close(
        model.start(source, mask).cross[-1].values, moved.cross[-1].values, rtol=0, atol=0
    )
    assert_padding_is_never_read_and_decoding_is_teacher_forcing(model)


def test_semantic_embeddings_are_checked():
    with pytest.raises(ValueError, match="semantic_embeddings must be one of"):
        build(end_marker=True, semantic_output=True, semantic_embeddings="own")
    with pytest.raises(ValueError, match="it needs semantic_output: true"):
        build(semantic_embeddings="separate")
    assert build(end_marker=True, semantic_output=True).semantic_embedding is None  # shared by default


@pytest.mark.parametrize("cross_attention", ["dot", "shift"])
def test_shared_semantic_heads_read_one_value_a_word_under_the_heads_mean_attention(cross_attention):
    """With ``semantic_heads="shared"`` every head reads the same value of a word and the output
    projection reads the heads' mean glimpse, so the logits are ``W Σ_j ᾱ_tj m_j`` with ``ᾱ`` the
    heads' mean attention: two models whose heads split the same mean differently give the same
    logits; padding is never read and decoding step by step gives the teacher-forced logits."""
    model = build(
        "relative",
        cross_attention=cross_attention,
        end_marker=True,
        semantic_output=True,
        semantic_heads="shared",
    )
    source, mask = padded_batch(SOURCES)
    logits = model(source, mask, TARGET_INPUT).logits
    attention = model.cross_attention_maps(source, mask, TARGET_INPUT)[:, -1]  # [B, H, T, S + 1]
    marked, _, _ = append_end_marker(source, mask, model.end_marker_id, PAD)
    cross = model.decoder[-1].cross_attention
    values = cross.embedding_value(model._embed_source(marked))  # [B, S + 1, D / H]: one per word
    assert values.size(-1) == TINY["d_model"] // TINY["heads"]
    mean_glimpse = attention.mean(dim=1) @ values  # [B, T, D / H]
    torch.testing.assert_close(logits, model.output(cross.out(mean_glimpse)), rtol=1e-5, atol=1e-5)
    state = model.start(source, mask).cross[-1]
    torch.testing.assert_close(state.values[:, 0], state.values[:, -1], rtol=0, atol=0)  # heads alike
    assert_padding_is_never_read_and_decoding_is_teacher_forcing(model)
    separate = build("relative", cross_attention=cross_attention, end_marker=True, semantic_output=True)
    assert separate.decoder[-1].cross_attention.embedding_value.out_features == TINY["d_model"]


@pytest.mark.parametrize("cross_attention", ["dot", "shift"])
def test_gated_semantic_heads_say_the_word_of_the_head_their_gate_chooses(cross_attention):
    """With ``semantic_heads="gated"`` the output reads the heads' glimpses of the shared values
    weighted by a softmax over the heads: a uniform gate gives the ``"shared"`` model's logits, a
    gate that picks one head gives ``W Σ_j α_htj m_j`` with that head's attention alone; padding is
    never read and decoding step by step gives the teacher-forced logits."""
    options = dict(cross_attention=cross_attention, end_marker=True, semantic_output=True)
    gated = build("relative", semantic_heads="gated", **options)
    shared = build("relative", semantic_heads="shared", **options)
    gate = gated.decoder[-1].cross_attention.head_gate
    assert gate.out_features == TINY["heads"]
    assert_padding_is_never_read_and_decoding_is_teacher_forcing(gated)
    with torch.no_grad():
        gate.weight.zero_()
        gate.bias.zero_()
    missing = shared.load_state_dict(gated.state_dict(), strict=False)
    assert [name.split(".")[-2] for name in missing.unexpected_keys] == ["head_gate", "head_gate"]
    assert not missing.missing_keys
    source, mask = padded_batch(SOURCES)
    torch.testing.assert_close(
        gated(source, mask, TARGET_INPUT).logits, shared(source, mask, TARGET_INPUT).logits
    )
    chosen = TINY["heads"] - 1
    with torch.no_grad():
        gate.bias[chosen] = 100.0
    logits = gated(source, mask, TARGET_INPUT).logits
    attention = gated.cross_attention_maps(source, mask, TARGET_INPUT)[:, -1, chosen]  # [B, T, S + 1]
    marked, _, _ = append_end_marker(source, mask, gated.end_marker_id, PAD)
    cross = gated.decoder[-1].cross_attention
    glimpse = attention @ cross.embedding_value(gated._embed_source(marked))
    torch.testing.assert_close(logits, gated.output(cross.out(glimpse)), rtol=1e-5, atol=1e-5)


def test_semantic_heads_are_checked():
    with pytest.raises(ValueError, match="semantic_heads must be one of"):
        build(end_marker=True, semantic_output=True, semantic_heads="pooled")
    with pytest.raises(ValueError, match="semantic_heads: 'shared' .* it needs semantic_output: true"):
        build(semantic_heads="shared")
    with pytest.raises(ValueError, match="shared_values .* need embedding_values"):
        CrossAttention(16, ["dot", "dot"], {}, 0.0, shared_values=True)
    with pytest.raises(ValueError, match="gated_heads .* needs shared_values"):
        CrossAttention(16, ["dot", "dot"], {}, 0.0, embedding_values=True, gated_heads=True)
    with pytest.raises(ValueError, match="semantic_heads: 'gated' .* it needs semantic_output: true"):
        build(semantic_heads="gated")


PEERED = {"end_marker": True, "semantic_output": True, "semantic_embeddings": "separate"}


def record_words_seen(model: TransformerSeq2Seq) -> None:
    """One training pass in which source words 3 and 4 occur alone and with others, 5 only with
    others and 6 only alone; target tokens 3 and 4 alone and in longer outputs, 5 only in longer
    ones and 6 only alone (add-jump's "jump" and ``I_JUMP``)."""
    source, mask = padded_batch([[3], [4], [6], [3, 5, 4]])
    target = torch.tensor([[SOS, 3, PAD, PAD], [SOS, 4, PAD, PAD], [SOS, 6, PAD, PAD], [SOS, 3, 5, 4]])
    model.train()
    model(source, mask, target)
    model.eval()


@pytest.mark.parametrize("positional", ["sinusoidal", "relative"])
def test_peer_words_read_a_word_seen_only_alone_as_its_peers_and_keep_its_meaning(positional):
    """After training saw word 6 only alone, the encoder reads it as the mean of 3 and 4 (seen alone
    and with others): the memory equals that of a source whose 6 has that embedding; the markers
    keep theirs; the values still read 6's own semantic embedding."""
    model = build(
        positional, cross_attention="shift", stop_from_attention=True, peer_words="source", **PEERED
    )
    record_words_seen(model)
    source, mask = padded_batch([[6, 5, 3], [3, 5, 4]])
    state = model.start(source, mask)
    table = model.source_embedding.weight
    peers = model.source_peers
    assert peers is not None and peers.peer_words().tolist() == [3, 4]
    plain = build(positional, cross_attention="shift", stop_from_attention=True, **PEERED)
    plain.load_state_dict(model.state_dict(), strict=False)
    with torch.no_grad():
        plain.source_embedding.weight[6] = table[[3, 4]].mean(dim=0)
    torch.testing.assert_close(
        state.cross[0].keys, plain.start(source, mask).cross[0].keys, rtol=1e-5, atol=1e-6
    )
    embedded = model._embed_source(torch.tensor([[model.start_marker_id, 5, model.end_marker_id]]))
    torch.testing.assert_close(
        embedded[0], table[[model.start_marker_id, 5, model.end_marker_id]] * model.embedding_scale
    )
    values = state.cross[-1].values  # [B, H, S', D / H], after the start marker
    assert not torch.allclose(values[0, :, 1], values[1, :, 1])  # 6's meaning is not 3's
    assert_padding_is_never_read_and_decoding_is_teacher_forcing(model)


@pytest.mark.parametrize(("peer_words", "encoder_alike"), [("target", "none"), ("both", "source")])
def test_peer_words_read_an_output_token_seen_only_alone_as_its_peers_and_survive_a_checkpoint(
    peer_words, encoder_alike
):
    """With ``"target"`` or ``"both"`` the decoder reads target token 6 (only ever a whole output)
    as the mean of 3 and 4; the record of what was seen is in the state dict, so a loaded model
    reads the same."""
    model = build("relative", cross_attention="dot", peer_words=peer_words, **PEERED)
    record_words_seen(model)
    assert model.target_peers is not None and model.target_peers.peer_words().tolist() == [3, 4]
    source, mask = padded_batch(SOURCES)
    jumps = torch.tensor([[SOS, 3, 6, 4, 5], [SOS, 6, 4, 3, 3], [SOS, 5, 6, 4, 3]])  # words seen in training
    logits = model(source, mask, jumps).logits
    plain = build("relative", cross_attention="dot", peer_words=encoder_alike, **PEERED)
    plain.load_state_dict(model.state_dict(), strict=False)
    with torch.no_grad():
        plain.target_embedding.weight[6] = model.target_embedding.weight[[3, 4]].mean(dim=0)
    torch.testing.assert_close(plain(source, mask, jumps).logits, logits, rtol=1e-5, atol=1e-6)
    loaded = build("relative", cross_attention="dot", peer_words=peer_words, **PEERED, seed=1)
    loaded.load_state_dict(model.state_dict())
    torch.testing.assert_close(loaded(source, mask, jumps).logits, logits, rtol=0, atol=0)
    assert_padding_is_never_read_and_decoding_is_teacher_forcing(model)


@pytest.mark.parametrize("unit", ["token", "peer"])
def test_peer_dropout_reads_decoder_inputs_as_their_peers_in_training_only(unit):
    """In training, ``peer_dropout`` reads some of the decoder's input tokens (or peer tokens) as
    the peers' mean (the logits change from pass to pass); in evaluation the model is the one
    without it."""
    model = build(
        "relative",
        cross_attention="dot",
        peer_words="both",
        peer_dropout=0.5,
        peer_dropout_unit=unit,
        **PEERED,
    )
    record_words_seen(model)
    plain = build("relative", cross_attention="dot", peer_words="both", **PEERED)
    plain.load_state_dict(model.state_dict())
    source, mask = padded_batch(SOURCES)
    jumps = torch.tensor([[SOS, 3, 6, 4, 5], [SOS, 6, 4, 3, 3], [SOS, 5, 6, 4, 3]])
    torch.testing.assert_close(
        model(source, mask, jumps).logits, plain(source, mask, jumps).logits, rtol=0, atol=0
    )
    model.train()
    torch.manual_seed(1)
    first = model(source, mask, jumps).logits
    second = model(source, mask, jumps).logits
    assert not torch.allclose(first, second)
    assert_padding_is_never_read_and_decoding_is_teacher_forcing(model.eval())


@pytest.mark.parametrize(("target_alone", "peers"), [("output", [3, 4]), ("command", [3])])
def test_target_alone_says_which_whole_outputs_count_as_seen_alone(target_alone, peers):
    """Target token 4 is the whole output of a two-word command (as ``I_TURN_LEFT`` of "turn left")
    and part of a longer output: with ``"output"`` it is a peer of 6 (only ever the whole output of
    a one-word command, as ``I_JUMP``), with ``"command"`` it is not; the decoder then reads 6 as
    the mean of the peers left."""
    model = build("relative", cross_attention="dot", peer_words="target", target_alone=target_alone, **PEERED)
    source, mask = padded_batch([[3], [4, 5], [6], [3, 5, 4]])
    target = torch.tensor([[SOS, 3, PAD, PAD], [SOS, 4, PAD, PAD], [SOS, 6, PAD, PAD], [SOS, 3, 5, 4]])
    model.train()
    model(source, mask, target)
    model.eval()
    assert model.target_peers is not None and model.target_peers.peer_words().tolist() == peers
    jumps = torch.tensor([[SOS, 3, 6, 4, 5], [SOS, 6, 4, 3, 3], [SOS, 5, 6, 4, 3]])
    source, mask = padded_batch(SOURCES)
    plain = build("relative", cross_attention="dot", **PEERED)
    plain.load_state_dict(model.state_dict(), strict=False)
    with torch.no_grad():
        plain.target_embedding.weight[6] = model.target_embedding.weight[peers].mean(dim=0)
    torch.testing.assert_close(plain(source, mask, jumps).logits, model(source, mask, jumps).logits)
    assert_padding_is_never_read_and_decoding_is_teacher_forcing(model)


@pytest.mark.parametrize("peers_as_one", [False, True])
def test_peers_as_one_reads_every_peer_word_as_the_peers_mean_in_training_and_at_test(peers_as_one):
    """With ``peers_as_one`` a source whose alone-only word 6 stands where its twin has peer 3 gives
    the encoder the same keys, and decoder inputs with 6 or 4 where the twin has 3 give the same
    logits, in evaluation and in training; the values still tell 6 from 3. Without it a peer word
    reads as itself (6, alone-only, as the peers' mean either way)."""
    options = dict(cross_attention="dot", peer_words="both", peers_as_one=peers_as_one, dropout=0.0)
    model = build("relative", **options, **PEERED)
    record_words_seen(model)
    source, mask = padded_batch([[6, 5, 4], [3, 5, 4]])
    state = model.start(source, mask)
    assert torch.allclose(state.cross[0].keys[0], state.cross[0].keys[1]) == peers_as_one
    assert not torch.allclose(state.cross[-1].values[0, :, 0], state.cross[-1].values[1, :, 0])
    twins = padded_batch([[3, 5, 4]] * 3)
    inputs = torch.tensor([[SOS, 3, 5, 3], [SOS, 6, 5, 3], [SOS, 3, 5, 4]])
    logits = model(*twins, inputs).logits
    assert [torch.allclose(logits[0], logits[row], atol=1e-6) for row in (1, 2)] == [peers_as_one] * 2
    assert_padding_is_never_read_and_decoding_is_teacher_forcing(model)
    model.train()  # rows 0 and 2 only: a target with 6 in it would make 6 a peer
    logits = model(twins[0][[0, 2]], twins[1][[0, 2]], inputs[[0, 2]]).logits
    assert torch.allclose(logits[0], logits[1], atol=1e-6) == peers_as_one


def test_peer_words_are_checked():
    with pytest.raises(ValueError, match="peer_words must be one of"):
        build(peer_words="words", **PEERED)
    with pytest.raises(ValueError, match="it needs semantic_output: true and semantic_embeddings: separate"):
        build(end_marker=True, semantic_output=True, peer_words="source")
    for decoder_reads_peers in ("target", "both"):
        with pytest.raises(ValueError, match="tied_output makes the output layer"):
            build(peer_words=decoder_reads_peers, tied_output=True, **PEERED)
    with pytest.raises(ValueError, match="peer_dropout reads the decoder's input tokens .* got 'source'"):
        build(peer_words="source", peer_dropout=0.1, **PEERED)
    with pytest.raises(ValueError, match="peer_dropout must be in"):
        build(peer_words="both", peer_dropout=1.0, **PEERED)
    with pytest.raises(ValueError, match="peer_dropout_unit must be one of"):
        build(peer_words="both", peer_dropout=0.1, peer_dropout_unit="word", **PEERED)
    with pytest.raises(ValueError, match="peer_dropout_unit: 'peer' .* needs peer_dropout > 0"):
        build(peer_words="both", peer_dropout_unit="peer", **PEERED)
    with pytest.raises(ValueError, match="target_alone must be one of"):
        build(peer_words="target", target_alone="word", **PEERED)
    with pytest.raises(ValueError, match="target_alone: 'command' .* needs peer_words: target or both"):
        build(peer_words="source", target_alone="command", **PEERED)
    with pytest.raises(ValueError, match="peers_as_one .* needs peer_words: source, target or both"):
        build(peers_as_one=True, **PEERED)
    shared = build(peer_words="target", end_marker=True, semantic_output=True)  # no separate embeddings
    assert shared.source_peers is None and shared.target_peers is not None


def test_semantic_output_needs_a_source_position_for_eos():
    with pytest.raises(ValueError, match="semantic_output .* needs end_marker"):
        build("sinusoidal", semantic_output=True)
    build("sinusoidal", semantic_output=True, stop_from_attention=True)  # the stop reads the attention


@pytest.mark.parametrize("cross_attention", ["dot", "shift"])
def test_a_decoder_without_previous_outputs_reads_sos_at_every_step(cross_attention):
    """With ``previous_outputs=False`` the logits do not depend on the decoder's input tokens (each
    step reads ``<sos>``): any other tokens give the same logits, and step-by-step decoding the
    teacher-forced ones; with them (the default) they do."""
    source, mask = padded_batch(SOURCES)
    options = {"cross_attention": cross_attention, "end_marker": True, "semantic_output": True}
    blind = build("relative", previous_outputs=False, **options)
    other = TARGET_INPUT.flip(1)
    output = blind(source, mask, TARGET_INPUT).logits
    torch.testing.assert_close(blind(source, mask, other).logits, output, rtol=0, atol=0)
    state = blind.start(source, mask)
    for t in range(TARGET_INPUT.size(1)):
        logits, _, state = blind.step(state, other[:, t])
        torch.testing.assert_close(logits, output[:, t], rtol=1e-5, atol=1e-5)
    reading = build("relative", **options)
    assert not torch.allclose(reading(source, mask, other).logits, reading(source, mask, TARGET_INPUT).logits)


# ------------------------------------------------------------------------ counting heads


def counting_layer(heads: int, counting: int) -> SelfAttention:
    """One self-attention layer (no positions, ``head_dim`` 1) whose queries and keys are 0, so every
    score is 0, and whose values are the input, read out unchanged."""
    layer = SelfAttention(heads, heads, "none", 0.0, 16, counting_heads=counting).double()
    with torch.no_grad():
        layer.qkv.weight.zero_()
        layer.qkv.bias.zero_()
        layer.qkv.weight[2 * heads :] = torch.eye(heads)  # values = x
        layer.out.weight.copy_(torch.eye(heads))
        layer.out.bias.zero_()
    return layer


def test_a_counting_head_sums_its_keys_where_a_softmax_head_averages_them():
    """Causal steps over inputs that are 1 at the marked positions (both heads see the same
    input): the softmax head reads the share of marked inputs so far, the counting head
    ``sigmoid(b)`` times their number, which keeps growing past any length."""
    layer = counting_layer(heads=2, counting=1)
    marked = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0], dtype=torch.float64)
    x = marked[None, :, None].expand(1, -1, 2).clone()
    output, _ = layer(x, torch.arange(8.0)[None], causal=True)
    so_far = marked.cumsum(0)
    steps = torch.arange(1, 9, dtype=torch.float64)
    torch.testing.assert_close(output[0, :, 0], so_far / steps)  # the softmax head: a mean
    torch.testing.assert_close(output[0, :, 1], torch.sigmoid(torch.tensor(COUNTING_BIAS)).double() * so_far)
    # the counting head's bias is learnt: a large one counts exactly
    with torch.no_grad():
        layer.counting_bias.fill_(40.0)
    torch.testing.assert_close(layer(x, torch.arange(8.0)[None], causal=True)[0][0, :, 1], so_far)


def test_a_counting_head_gives_masked_keys_no_weight():
    layer = counting_layer(heads=1, counting=1)
    with torch.no_grad():
        layer.counting_bias.fill_(40.0)
    x = torch.ones(2, 5, 1, dtype=torch.float64)
    padding = torch.tensor([[False] * 5, [False, False, False, True, True]])
    output, _ = layer(x, torch.arange(5.0)[None].expand(2, -1), key_padding_mask=padding)
    torch.testing.assert_close(output[:, :, 0], torch.tensor([[5.0] * 5, [3.0] * 5], dtype=torch.float64))


@pytest.mark.parametrize("positional", POSITIONAL_SCHEMES)
def test_decoder_counting_heads_keep_masking_padding_and_cached_decoding_exact(positional):
    model = build(positional, decoder_counting_heads=1, cross_attention=["dot", ["location", "dot"]])
    source, mask = padded_batch(SOURCES, width=7)
    full = model(source, mask, TARGET_INPUT)
    changed = TARGET_INPUT.clone()
    changed[:, 3] = 8
    new_logits = model(source, mask, changed).logits
    torch.testing.assert_close(new_logits[:, :3], full.logits[:, :3], rtol=0, atol=0)
    assert not torch.allclose(new_logits[:, 3:], full.logits[:, 3:])
    other = source.masked_fill(mask, 5)
    torch.testing.assert_close(model(other, mask, TARGET_INPUT).logits, full.logits, rtol=0, atol=0)
    assert_cached_decoding_matches(model, source, mask, full)


def test_decoder_counting_heads_add_a_bias_to_the_plain_models_initial_weights():
    """Only the decoder's self-attention gets counting heads (the encoder's heads average), and the
    weights the model shares with the plain one are the plain one's."""
    model, plain = build("relative", decoder_counting_heads=2), build("relative")
    shared, counting = plain.state_dict(), model.state_dict()
    added = set(counting) - set(shared)
    assert added == {f"decoder.{layer}.self_attention.counting_bias" for layer in range(2)}
    assert all(torch.equal(counting[name], value) for name, value in shared.items())
    source, mask = padded_batch(SOURCES)
    logits = model(source, mask, TARGET_INPUT).logits
    assert not torch.allclose(logits, plain(source, mask, TARGET_INPUT).logits)
    for heads in (-1, 3):
        refused = f"decoder_counting_heads must be between 0 and heads \\(2\\), got {heads}"
        with pytest.raises(ValueError, match=refused):
            build(decoder_counting_heads=heads)


# ------------------------------------------------------------------------------ universal stacks


def _parameter_count(model: torch.nn.Module) -> int:
    return sum(parameter.numel() for parameter in model.parameters())


@pytest.mark.parametrize("positional", POSITIONAL_SCHEMES)
def test_a_universal_transformer_applies_one_layers_weights_at_every_depth(positional):
    """``universal``: the two-layer stacks hold one layer's parameters each, compute what the
    two-layer model computes with the first layer's weights copied to the second, and not what a
    one-layer model with those weights computes; step-by-step decoding stays exact (shift heads,
    whose state each depth carries on its own)."""
    universal = build(positional, universal=True, cross_attention="shift")
    one_layer = build(positional, encoder_layers=1, decoder_layers=1, cross_attention="shift")
    assert _parameter_count(universal) == _parameter_count(one_layer)
    layered = build(positional, cross_attention="shift")
    layered.load_state_dict(universal.state_dict())  # it names the shared layer at both depths
    one_layer.load_state_dict(universal.state_dict(), strict=False)  # depth 0 only
    source, mask = padded_batch(SOURCES)
    full = universal(source, mask, TARGET_INPUT)
    torch.testing.assert_close(full.logits, layered(source, mask, TARGET_INPUT).logits, rtol=0, atol=0)
    assert not torch.allclose(full.logits, one_layer(source, mask, TARGET_INPUT).logits)
    assert_cached_decoding_matches(universal, source, mask, full)


def test_a_universal_layers_gradient_is_the_sum_of_its_depths_gradients():
    universal = build("relative", universal=True)
    layered = build("relative")
    layered.load_state_dict(universal.state_dict())
    source, mask = padded_batch(SOURCES)
    for model in (universal, layered):
        model(source, mask, TARGET_INPUT).logits.square().sum().backward()
    for stack in ("encoder", "decoder"):
        shared = dict(getattr(universal, stack)[0].named_parameters())
        first, second = (dict(layer.named_parameters()) for layer in getattr(layered, stack))
        assert shared.keys() == first.keys()
        for name, parameter in shared.items():
            assert first[name].grad is not None and second[name].grad is not None
            torch.testing.assert_close(parameter.grad, first[name].grad + second[name].grad)


def test_a_universal_decoder_refuses_what_one_shared_layer_cannot_be():
    with pytest.raises(ValueError, match="every layer needs the same cross-attention heads"):
        build(universal=True, cross_attention=["dot", "shift"])
    with pytest.raises(ValueError, match="semantic_output changes the last"):
        build(universal=True, semantic_output=True, end_marker=True)
