"""A small Transformer encoder–decoder whose positional scheme is a constructor flag.

Architecture (Vaswani et al. 2017 with pre-layer normalisation, Xiong et al. 2020): token
embeddings initialised with standard deviation ``d_model ** -0.5`` and scaled by ``sqrt(d_model)``
(unit scale, like the positional encodings); ``encoder_layers`` blocks of ``x + SelfAttn(LN(x))``,
``x + FF(LN(x))``; ``decoder_layers`` blocks of causal ``x + SelfAttn(LN(x))``,
``x + CrossAttn(LN(x), memory)``, ``x + FF(LN(x))``; a final ``LN`` after each stack; a linear
output layer. ``FF(x) = W_2 dropout(ReLU(W_1 x))``; dropout on every residual branch.
``norm="post"`` puts each layer normalisation after its residual sum instead, ``LN(x +
SubLayer(x))``, with no final ``LN`` (Vaswani et al. 2017's original order, and that of Csordás et
al. 2021's code, whose SCAN length cut-offs ``scan_transformer_csordas2021`` repeats).

``positional`` picks the scheme (:mod:`attnlab.attention.positions`): ``sinusoidal`` (Vaswani et
al. 2017), ``learned`` (absolute table), ``relative`` (Shaw et al. 2018), ``transformer_xl`` (Dai
et al. 2019), ``rope`` (Su et al. 2021), ``alibi`` (Press et al. 2022) or ``none`` (NoPE,
Kazemnejad et al. 2023). It applies to the
encoder's and the decoder's self-attention; cross-attention has no positional term of its own
(the standard Transformer), unless its heads are location attenders.

Location-based cross-attention. Each cross-attention head is ``"dot"`` (scaled dot product) or any
attnlab attender by name (:func:`attnlab.attention.build_attender`: ``location``, ``mix``,
``shift``, ``additive``, ``transformer_xl``, …) with ``query_dim = key_dim = value_dim =
d_model / heads``: the head's projected query, keys and values go through the attender unchanged,
so the mechanisms of the recurrent models (Dubois et al. 2020) plug in per layer or per head.
Stateful attenders (Location, Mix, Shift) carry their state from one target step to the next: a
teacher-forced call hands the attender all the steps at once (it loops over them internally) and
incremental decoding threads the state, which gives the same result because every decoder
representation of step ``t`` depends on steps ``<= t`` only.

Masking. Source padding (``True`` = padding) is masked in the encoder's self-attention and in every
cross-attention head, so padded tokens change nothing. Targets are right-padded: causal
self-attention already keeps padded target positions (after the real ones) out of every real
step. Positions are ranks among the real tokens.

Stopping from the attention (an attnlab option, issue 28; not in the papers). By default ``<eos>``
is a token of the output layer like any other, read from the decoder's residual stream, which
carries the step's position: on Lookup Tables such a model stops where training outputs ended,
with every token before the stop right (docs/results.md, issue 28). ``stop_from_attention=True``
makes the stop decision what the last decoder layer attends, as the recurrent Lookup model that
extrapolates does (``lookup_shift``) and as Syntactic Attention's option of the same name: the
model puts a learned *start* position before every source, and ``<eos>`` is the attention leaving
the words at either end, ``p(<eos>) = Σ_h g_h (α_h,start + α_h,end)``, with ``α_h,end`` head
``h``'s cross-attention on the source's last token — its end, such as Lookup Tables' final ``.``
— and ``g = softmax(w)`` a learned gate over the heads (initially uniform), so a head that walks
the source can carry the decision alone. A walk forward ends on the final token (Long, Noisy
start), a walk backward on the start position (Reversed: a Shift Attender's backward move from
the first word lands there). The heads are the last decoder layer's by default; with
``stop_layers="all"`` the gate is over every decoder layer's heads. Why: on Noisy-start Lookup
Tables two seeds trained a layer-0 head that stops right on every example (interpolation and long
1–5) while every last-layer head walked backward through the noise to the start position, so the
stop read from the last layer failed (docs/results.md, issue 28, session 32;
``scripts/transformer_stop_heads.py``). With ``stop_layers="separate"`` the gate is over heads of
the stop's own (:class:`StopHeads`: dot-product heads whose queries are the decoder's output and
whose keys are the memory's), which feed no output token: the stop's gradient reaches the heads
that read the input only through the decoder's output and the memory that the stop heads read
(``stop_head_gradient`` scales it there; the stop heads themselves learn from all of it). Why: on
SCAN at the output cut-off 26 the stop read from the content heads either spoils the content (all
of its gradient: 75.9% right with the length given) or, with a tenth of it, is read from one head
whose attention on the ends grows with the output's length, a clock that fires at the training
lengths (docs/results.md, issue 28, session 38). With ``stop_ends="gated"`` the gate is over (head, end)
pairs, ``p(<eos>) = Σ_h (g_h,start α_h,start + g_h,end α_h,end)``, ``g`` a softmax over all of
them: the model learns which end means done (the start on Reversed, the final token on Long and
Noisy-start), so the stop's gradient pulls a head towards that end only, not towards whichever end
it reaches first (on Reversed read from every layer, "either end" turned every head to a forward
walk). Measured (docs/results.md, issue 28, session 35): it fixes that on Reversed (two probes at
100% on long 1–5, the gate on the start), but the gate learns whichever end the heads reach on the
training lengths, and on Noisy-start a probe's gate chose the start, where a head walked back
through the noise, and stopped early from long 1 (0.0%). The other tokens get
``(1 − p(<eos>)) softmax_{y ≠ <eos>}(W x + b)``;
the logits returned are these log-probabilities. The attention returned (and
:meth:`TransformerSeq2Seq.cross_attention_maps`) covers the source's own tokens only, so it lines
up with the source; its rows sum to ``1 − α_start``. The source's last token must be an end token,
read by no other step. A SCAN command's last word is not: ``end_marker=True`` appends one, a learned
end-of-command position after each source's last real token (before the padding), as Syntactic
Attention's option of the same name does; the attention returned then has ``S + 1`` columns, the
last real one of each row the end marker. The SCAN experiment accepts ``stop_from_attention`` only
with it.

Keys without position (an attnlab option, issue 28). A content-type move of the Shift Attender
(``content``, ``last_match``) scores the words by their keys, and by default those are projected
from the encoder's output, which carries where a word is under absolute positional schemes. So the
content move can find a *position*: with sinusoidal positions, a trained Long Lookup Tables run
(seed 2 of ``lookup_transformer_stop``) jumped at its first step to "the last table", learnt as
the word at its index in the longest training inputs, and walked back to the start from there, so
on longer inputs it stopped after about the training length (docs/results.md, issue 28, session
23). ``attender_keys="embeddings"`` projects the attender heads' keys from the source's token
embeddings instead (scaled, before positions are added, no context), so a content move can find
a word only by what it is — the input bits, ``!``, ``.`` — and never by where it is; the values,
and the dot heads, still read the encoder's output. Measured (sinusoidal, one seed each): it fixes
that Long run (100% on long 1–5) and keeps Reversed at 100%, but Noisy start fails (0% from long
1, every output a right prefix stopped early): its jump is to the table *after* ``!``, which only
context tells from the noise tables before it. So it is an ablation, not the default.
``attender_keys="local"`` keeps that context and still no position: each key is read from a window
of three token embeddings (the word and its neighbours; :class:`~attnlab.models.seq2seq.
LocalEncoder`, the encoder of the recurrent ``lookup_shift_robust``), so "the table after ``!``"
and "the word before ``.``" are content at every length.

A random start for the decoder (an attnlab option, issue 28). The decoder's causal
self-attention can tell how far it is into the output under every positional scheme: from its
absolute positions, from its distance to ``<sos>`` under relative ones, and, with none, from how
much of a uniform attention the ``<sos>`` still gets (Kazemnejad et al. 2023). A stop learnt on
outputs of at most ``N`` tokens can then fire near ``N`` whatever the command: on SCAN at the output
cut-off 26 most early stops are at 24–26 actions (docs/results.md, issue 28, session 38).
``decoder_offset=R`` puts, in training only, ``r`` extra ``<sos>`` tokens before each target's
decoder input, ``r`` drawn uniformly from ``{0, …, R}`` for every example: the output starts at
position ``r`` and ``r + 1`` tokens of ``<sos>`` precede it, so every such reading of the step is off
by an unknown ``r`` and fits no stop; the loss and the attention returned cover the target's own
steps. Evaluation and decoding start at ``r = 0``, a start seen in training. This shifts absolute
positions as SHAPE does (Kiyono et al. 2021) and draws them at random as Ruoss et al. (2023) do;
the repeated ``<sos>`` extends it to relative positions and to none. Dot-product cross-attention
heads only: a stateful attender head would step through the extra tokens. Measured on SCAN at the
cut-off 26 (relative positions, one seed each; docs/results.md, issue 28, session 39): with the
clip at 16 it removes the early stops at 24–26 and puts nothing in their place (the outputs run on
or go wrong); with the clip at 64 it gives 74.6% against 71.8% without. So it is an option, not a
default.

Hiding the start (an attnlab option, issue 28). ``decoder_hides_start=True`` removes the token those
readings of the step share, instead of moving it: the decoder's self-attention never reads
``<sos>`` (position 0) from a later step, at any layer, so an output's steps from the first on see
only the outputs so far. Every step still knows where it is under absolute schemes; under relative
ones, RoPE, ALiBi and none it loses the one key whose distance (or share of a uniform attention)
is the step's position, and the causal mask gives the first step a single key, itself. The
outputs, not ``<sos>``, are then what a stop can read. Not with ``decoder_offset`` (whose extra
``<sos>`` it would partly hide). Measured on SCAN at the cut-off 26 (relative positions, clip 26, one
seed; docs/results.md, issue 28, session 42): the decoder then cannot count the output's first
sentence ("walk thrice" runs on as ``I_WALK`` past three), validation exact match stays near 47%
(99.5% with ``<sos>`` seen) and test exact match falls to 23.7% (76.5%). So ``<sos>`` is also where the first
sentence is counted from; an option, not a default.

A recurrent count in the decoder (an attnlab option, issue 28). ``decoder_recurrence="gru"`` runs a
one-layer GRU (Cho et al. 2014) over the decoder's inputs, the previous outputs' embeddings with their
positions, and adds its output to them before the first decoder layer: ``x_t ← x_t + GRU(x_{≤t})``.
Every layer, and so every cross-attention head's query, then reads a recurrent summary of the
outputs so far, which no positional scheme has to extrapolate. Why: on the SCAN length split the
recurrent Shift Attender lengthens sentences it never saw by counting its walk's alternations in its
GRU state (one draw of six; docs/results.md, issue 28, sessions 49–50), while the Transformer's Shift
heads walk too but count by their positions, none past the training lengths. The GRU's state is
carried from step to step in decoding; the choice to add it to the inputs rather than replace them
keeps the positional scheme's reading of the step (with relative positions,
``max_relative_distance=[N, 1]`` leaves the decoder's self-attention no distance past 1 to count
by). Measured on the SCAN length split (relative positions, shift heads, the stop from the
attention, seed 0; docs/results.md, issue 28, session 50): 7.7% exact match (12.1 ± 2.9% without
it), and still none of the commands with a sentence longer than any trained: the heads end the loop
of "around ... thrice" at 16 actions, as without it. An option, not a default.
``decoder_recurrence="lstm"`` runs a one-layer LSTM (Hochreiter & Schmidhuber 1997) instead, its
state ``(h, c)`` carried the same way: Weiss, Goldberg & Yahav (2018, "On the Practical
Computational Power of Finite Precision RNNs for Language Recognition") show that an LSTM's cell
can count without bound (``c_t = c_{t-1} + 1`` with its gates saturated), which a GRU, whose state
interpolates between its past and a squashed candidate, cannot. Measured as the GRU above
(docs/results.md, issue 28, session 51): 7.1%, the loop still ended at 16 actions.
``decoder_recurrence_layer=k`` runs the recurrence over the residual stream before decoder layer
``k`` instead of over the inputs (``0``, the default): ``x_t ← x_t + GRU(x_{≤t})`` between layers
``k − 1`` and ``k``, so the recurrence reads what the earlier layers' cross-attention read (their
glimpses are in that stream), as the recurrent Shift Attender's GRU reads each step's glimpse
(``[E y_{i−1} ; c_i]``, :mod:`attnlab.models.gru_attention`), and the later layers' heads (and the
stop, when read from them) read its count. Why: a decoder with no position to read and a GRU over
its inputs alone still ended the 24-action sentence after two passes (docs/results.md, issue 28,
session 54). ``k = decoder_layers`` puts it after the last layer, where only the readout reads it.

Counting heads in the decoder (an attnlab option, issue 28). A softmax head's glimpse is a mean
over the keys it selects, so a step can read the *share* of the outputs so far that are turns, not
their *number*; the number of keys a query selects is the "selector width" of Weiss, Goldberg &
Yahav (2021, "Thinking Like Transformers", RASP), which softmax attention gets only as a fraction
of the keys (a ratio that changes with the length). ``decoder_counting_heads=k`` makes the last
``k`` self-attention heads of every decoder layer sum instead: weights ``sigmoid(s_tj + b_h)``, not a
softmax over ``j``, so the glimpse of a head that selects the turns is their count times a vector,
at any length. Why on SCAN: "walk around left thrice" (24 actions, longer than every training
output of the length split) has 12 ``I_TURN_LEFT``, as "turn around left thrice" (12 actions, a
training command) has, so a stop that reads how many turns the sentence has written is the same for
both, while a stop read from the step's position is not. The counting heads read the same scores
as the others (the positional scheme's terms included); padding and later steps weigh 0.

Output from the attended words (an attnlab option, issue 28). On SCAN's add-jump split the
Transformer's outputs have the right structure and the wrong meaning for "jump": 39–71% of its
test outputs are right but at ``I_JUMP``'s places, where heads that attend "jump" still emit another
action (docs/results.md, issue 28, session 44). Russin et al. (2019, Syntactic Attention, §3)
separate the two: the attention (syntax) is computed from context, and the output is a linear
function of the attended word embeddings alone (semantics), ``y_t = W Σ_j α_tj m_j``.
``semantic_output=True`` does that in the Transformer: the last decoder layer's cross-attention
reads values projected from the source's token embeddings (scaled, before positions: no position,
no context), and the logits are the output layer applied to that cross-attention's output (its
heads' glimpses through its output projection), not to the residual stream. So the logits are
linear in the attended words' embeddings, as Russin et al.'s, while where the heads look depends on
everything before. Earlier decoder layers, the queries and the keys are unchanged; the last layer's
feed-forward block then feeds only a stop read from separate heads. ``<eos>`` is a word too: it
comes from attending a source position, so the model needs ``end_marker`` (or ``stop_from_attention``,
whose stop reads the attention; the end marker is then also a word the output layer reads).
``semantic_embeddings="separate"`` gives the values a token embedding table of their own, as Russin
et al. give every word two embeddings: one the syntax (here the encoder) reads and one the output
reads, so that what "jump" means (learnt from "jump" → ``I_JUMP``) does not move the vector the
encoder reads for it; by default (``"shared"``) both read the encoder's embeddings. With them
separate, ``peer_words`` takes the next step of attnlab's recurrent Syntactic Attention (issue 29,
:class:`~attnlab.attention.syntactic.ComposedWordEmbedding`): a word seen in training only alone,
never with other words (add-jump's "jump"), has a syntax nothing trained, so the encoder reads it
as its peers, the mean embedding of the words seen both alone and with others ("walk", "run",
"look"), while its values still say ``I_JUMP``. ``"target"`` does the same for the decoder's input
tokens (it needs no separate embeddings: the output layer, not the decoder's input, says what a
token is): ``I_JUMP`` was only ever the one token of an output, so as the previous output of a
longer one it is read as the mean of the output tokens seen alone and in longer outputs. ``"both"``
does both. The record of which words were seen how is kept in the model's buffers, from the
training batches. Measured on
add-jump (relative positions, shift heads, one seed, 20 epochs; docs/results.md, issue 28, session
45): test exact match 31.3% with shared embeddings, 4.4% separate, 2.5% separate with ``"source"``,
13.5% separate with ``"target"``, **52.9% separate with ``"both"``** (27.4% shared with
``"target"``): neither side's peers helps alone; together they do. ``peer_dropout`` reads, in
training, each of the decoder's input tokens as the peers' mean with that probability, so that
the decoder learns to count and stop over the vector ``I_JUMP`` becomes at test (the 52.9% model
loses the count of "thrice" after it): with 0.1, **75.7%** (90.0% with the length given) in the same
20-epoch pilot, 82.3% (90.3%) at the sweep's 50 epochs (session 46). ``target_alone`` says which
output tokens count as seen alone: ``"output"`` (default) every token that was a whole output, which
makes ``I_TURN_LEFT`` (the output of "turn left") a peer of ``I_JUMP`` beside ``I_WALK``, ``I_RUN``
and ``I_LOOK``; ``"command"`` only the whole output of a one-word command, the decoder's side of the
encoder's record, so that the output tokens' peers are the outputs of the source word's peers. Why
it was tried: most of the 82.3% model's outputs wrong at one word put ``I_JUMP`` where a turn
belongs, a turn too few in "jump opposite left twice". Measured (the same run with ``"command"``,
seed 0, 50 epochs): 73.5% (78.2% with the length given), with more of those errors, not fewer
(docs/results.md, issue 28, session 46); so the default stays ``"output"``. ``peer_dropout_unit``
says what ``peer_dropout`` drops: each input token on its own (``"token"``, default), or each peer
output token of a target, with that probability, at every one of its positions (``"peer"``), as
``I_JUMP`` is the peers' mean at every position at test: the 82.3% model (and one at 91.4%, seed 1)
loses most on "jump thrice" and "jump around left thrice", three repetitions after ``I_JUMP``, which
the token dropout shows the decoder as three peers' means in a row once in a thousand. Measured
(the 82.3% run with ``"peer"``, seed 0, 50 epochs): 31.2% (35.1% with the length given), 3,341
early stops, every clause with "opposite right" or "right twice/thrice" at 0% (docs/results.md,
issue 28, session 46); so the default stays ``"token"``.

Where the rest of add-jump's errors are (docs/results.md, issue 28, session 47;
``scripts/transformer_peers_read_as.py``): a run of the peers' dropout (relative, shift heads,
seed 0; 81.7% test exact match) evaluated with "jump" and ``I_JUMP`` read by the syntax as "walk"
and ``I_WALK`` — so that every command's attention is exactly that of its "walk" twin, which the
same model gets right 98.2% of the time — still gets 81.8%: the errors are in the values, not the
syntax. In "jump twice after walk" the last layer's heads split at the third step (one on "jump",
the others on "twice" and "after"); the same split over "walk" reads ``I_WALK``, over "jump" a turn.
"walk"'s values were trained in such splits, "jump"'s only under every head (a one-word command),
and its meaning sits mostly in one head's projection. ``semantic_heads="shared"`` gives every head
the same value of a word, ``m_j = W_v e_j`` (``head_dim`` wide), and reads the heads' mean glimpse,
``y_t = W_o Σ_j ᾱ_tj m_j`` with ``ᾱ`` the heads' mean attention, so that what a word means does not
depend on which head reads it; default ``"separate"`` (each head its own projection, concatenated).
The shared heads still mix: in "jump opposite left thrice after jump" (the ``"shared"`` run with the
stop from the attention, seed 0, session 48) the last layer's heads split at the seventh step, an
``I_TURN_LEFT``, two on "jump", one on "left" and one on "thrice", and it says ``I_JUMP``; its
"walk" twin is right. ``semantic_heads="gated"`` weighs the heads' glimpses by
``g_t = softmax(W_g x_t)`` (``x_t`` the step's input to the cross-attention) instead of averaging
them, ``y_t = W_o Σ_h g_th Σ_j α_htj m_j``: the decoder's state, which reads "jump" as its peers,
chooses which head's word is said, so that a head that attends "jump" only to keep its place need
not say it.

``peers_as_one=True`` (session 48) has the side(s) that read peers read every peer word as the peers'
mean, in training and at test, not only the alone-only word: with ``target_alone="command"`` the
encoder reads "walk", "run", "look" and "jump" as one word and the decoder ``I_WALK``, ``I_RUN``,
``I_LOOK`` and ``I_JUMP`` as one token (the turns stay themselves), so a command with "jump" is read
by the syntax exactly as its twins, and the count over its outputs is the count the decoder was
trained on; what each word means comes from the values' embeddings of their own alone. Why: the
shared heads' remaining add-jump errors were mostly "X around left/right thrice" (24 actions, 12
of them ``I_JUMP``), which the decoder had seen read as the peers' mean only one token in ten
(``peer_dropout``) and lost count over.

A decoder that does not read its outputs (an attnlab option, issue 28). Russin et al.'s decoder RNN
takes no previous output either: its state is ``s_i = g(s_{i−1}, c_i)``, ``c_i`` the attended
words' syntactic encoding (§3, eq. 3; Bastings et al. 2018 call this no dependency on the previous
action). On add-jump the model with ``semantic_output`` emits ``I_JUMP`` where it should and then
walks wrong after it (docs/results.md, issue 28, session 44): ``I_JUMP`` as a decoder input was only
ever the first step's. ``previous_outputs=False`` gives every decoder step the ``<sos>`` embedding as
its token (positions are added as before), so what the output was so far reaches a step only through
the decoder's own earlier states: what its heads attended and, for Shift Attender heads, where their
walks are. Measured with ``semantic_output`` on add-jump (relative positions, one seed, 20 epochs;
docs/results.md, issue 28, session 44): the decoder no longer fits the training commands (best
validation exact match 47% with shift heads, 0% with dot heads, against 85% and 96% reading its
outputs) and test exact match falls from 31% and 25% to 0.7% and 0%. So its outputs are how the
decoder keeps its place: an ablation, not a default.

Decoding. :class:`TransformerSeq2Seq` is a :class:`~attnlab.models.stepwise.StepwiseSeq2Seq`:
``forward`` runs all target steps in parallel; :meth:`start` / :meth:`step` decode one token at a
time with cached self-attention keys and values per layer, so greedy and given-length decoding are
the shared ones. The returned attention is the last decoder layer's
cross-attention, averaged over its heads (``[B, T, S]``: sums to 1, 0 on padding); every layer's
and head's cross-attention, ``[B, layers, heads, T, S]``, comes from
:meth:`TransformerSeq2Seq.cross_attention_maps` (for a greedy decoding: of its output fed back,
:meth:`TransformerSeq2Seq.decoded_input`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from attnlab.attention.base import check_padding_mask
from attnlab.attention.positional import source_positions
from attnlab.attention.positions import (
    ABSOLUTE_SCHEMES,
    AbsolutePositions,
    check_scheme,
)
from attnlab.attention.syntactic import ComposedWordEmbedding
from attnlab.checks import check_choice
from attnlab.models.dropout import Dropout
from attnlab.models.seq2seq import Seq2SeqOutput, check_target_input
from attnlab.models.stepwise import StepwiseSeq2Seq, append_end_marker, stop_log_probs
from attnlab.models.transformer.layers import (
    CrossAttention,
    CrossState,
    DecoderLayer,
    EncoderLayer,
    FeedForward,
    SelfAttention,
    SelfCache,
    StopHeads,
    scale_gradient,
)
from attnlab.models.transformer.options import (
    DECODER_RECURRENCES,
    DOT,
    EMBEDDING_INITS,
    LINEAR_INITS,
    NORMS,
    RECURRENCE_MODULES,
    STOP_ENDS,
    STOP_FLOOR,
    STOP_LAYERS,
    CrossAttentionSpec,
    added_source_positions,
    check_attender_keys,
    check_counting_heads,
    check_cross_attention_options,
    check_decoder_offset,
    check_peer_words,
    check_recurrence_layer,
    check_semantic_output,
    check_universal,
    cross_attention_heads,
    longest_relative_distances,
    relative_clips,
)

__all__ = ["TransformerSeq2Seq"]


@dataclass
class _DecoderState:
    """The incremental decoding state of :class:`TransformerSeq2Seq`."""

    cross: list[CrossState]
    caches: list[SelfCache | None]
    end_positions: torch.Tensor  # [B]: each source's last real token (in the memory's columns)
    step: int = 0
    stop_keys: torch.Tensor | None = None  # [B, H, S, D]: the keys of StopHeads, if any
    source_words: torch.Tensor | None = None  # [B]: each source's real tokens, no marker counted
    # the decoder_recurrence's state, if any: the GRU's h [1, B, D], the LSTM's (h, c)
    recurrent: torch.Tensor | tuple[torch.Tensor, torch.Tensor] | None = None


class TransformerSeq2Seq(StepwiseSeq2Seq):
    """Transformer encoder–decoder, pre-norm by default (see the module docstring).

    Args:
        dropout: the rate of every dropout: the attention weights, the feed-forward layer's hidden
            units, each residual branch and the input embeddings (with their positions).
        embedding_dropout: the input embeddings' rate instead, if given (default ``None``: the
            same as ``dropout``). Vaswani et al. 2017 drop the embeddings' sums with the
            positional encodings; Csordás et al. 2021's code adds no dropout there
            (``scan_transformer_csordas2021``: 0).
        positional: ``"sinusoidal"``, ``"learned"``, ``"relative"``, ``"transformer_xl"``,
            ``"rope"``, ``"alibi"`` or ``"none"`` (:data:`attnlab.attention.positions.POSITIONAL_SCHEMES`).
        cross_attention: ``"dot"`` or an attender name for every head, or per decoder layer a
            name or a list of one name per head (:func:`cross_attention_heads`).
        cross_attention_options: keyword options per attender name, e.g.
            ``{"location": {"fixed_sigma": True}}``.
        max_positions: rows of the ``learned`` table (longer sequences are an error).
        max_relative_distance: Shaw et al.'s clipping distance ``k`` for ``relative``: one for
            both stacks, or ``(encoder, decoder)``, each stack's self-attention its own (the
            paper has one ``k``; an encoder reading short commands and a decoder writing long
            outputs read different distances). Each distance up to ``k`` has an embedding of its
            own, trained only where training reads that distance: a ``k`` past the longest
            training sequence leaves embeddings at their initialisation that longer test sequences
            read (:meth:`relative_distances`; at SCAN's cut-off 26, clip 64, a test-time clip at
            24 took one run from 36.5% to 63.4% exact match; docs/results.md, issue 28, session
            40). The experiments warn of it, and their ``max_relative_distance: auto`` sets each
            stack's ``k`` to the longest distance its training reads. ``k = 0`` gives every pair
            the same term ``q_i^T a_0``, which the softmax cancels: that stack has no positions
            (as ``none``), e.g. ``(16, 0)`` for a decoder that only its recurrence can count in.
        stop_from_attention: ``p(<eos>)`` from the last layer's attention on a learned start
            position and on the source's last token (module docstring); default ``False``:
            ``<eos>`` from the output layer.
        stop_layers: ``"last"`` (default: the stop gate is over the last decoder layer's heads),
            ``"all"`` (over every decoder layer's heads) or ``"separate"`` (over ``heads`` heads of
            the stop's own, :class:`StopHeads`, which no output token reads); only with
            ``stop_from_attention``.
        stop_gate_scale: the gate is ``softmax(stop_gate_scale · w)`` (default 1). Adam moves ``w``
            by about the learning rate per update, so at lr 5e-4 a gate logit moves at most ±1.4 in
            2,800 updates and the gate cannot commit to one of 8 heads (docs/results.md, issue 28,
            session 32); a scale of 10 lets it move 10 times as far.
        stop_detached: the stop reads the heads' attention without training it: its loss trains the
            gate alone, and the heads are trained by the output tokens' loss only (default
            ``False``). Read from every layer, the stop's gradient can turn a head from the walk that
            reads the input to a walk that only reaches an end at the right step (Reversed Lookup
            Tables, docs/results.md, issue 28, session 34).
        stop_head_gradient: the share of the stop's gradient that reaches the heads (default 1:
            all of it; ``stop_detached=True`` is 0); the stop's value is the same. Between the
            two: the heads' walk still learns where the stop is, less strongly than from their
            output tokens (docs/results.md, issue 28, session 35). With ``stop_layers="separate"``
            it scales what reaches the decoder's output and the memory that the stop heads read;
            the stop heads and the gate learn from all of it (detached: from nothing else).
        stop_ends: ``"either"`` (default: the gate is over heads, each reading its attention on
            both ends) or ``"gated"`` (the gate is over (head, end) pairs, so the model learns
            which end stops it; module docstring); only with ``stop_from_attention``.
        end_marker: append a learned end-of-command position to every source (module docstring),
            which then is the source's last token; sources must be right-padded.
        attender_keys: what the attender heads' keys are projected from: ``"memory"`` (default,
            the encoder's output, as the dot heads'), ``"embeddings"`` (the source's token
            embeddings alone: no position, no context) or ``"local"`` (a window of three token
            embeddings: context, no position); module docstring.
        norm: ``"pre"`` (default: each layer normalisation before its sub-layer, and a final one
            after each stack) or ``"post"`` (after each residual sum, no final one; Vaswani et
            al. 2017, Csordás et al. 2021).
        source_start: put a learned start token before every source (Csordás et al. 2021's
            encoder ``<sos>``): with relative positions alone nothing else tells the encoder where
            a command begins. ``stop_from_attention`` puts one there anyway (its start position).
            The attention returned leaves it out (module docstring).
        embedding_init: ``"scaled"`` (default: normal with standard deviation
            ``d_model ** -0.5``, multiplied by ``sqrt(d_model)`` when read, so unit scale) or
            ``"xavier"`` (Xavier-uniform and read as they are: Csordás et al. 2021's relative
            Transformer, ``embedding_init="xavier"`` with ``scale_mode="none"`` in their code).
        linear_init: ``"pytorch"`` (default: ``nn.Linear``'s own) or ``"xavier"``: Xavier-uniform
            weights and zero biases for the self- and cross-attention projections (each of the
            query, key and value parts on its own), the attention outputs, Transformer-XL's
            position projection and the feed-forward layers (the first with ReLU's gain), as
            Csordás et al. 2021's code initialises them; other layers keep theirs.
            ``"csordas2021"``: each layer as Csordás et al. 2021's released code leaves it, which
            differs from ``"xavier"`` in three places: the self-attention under
            ``positional="transformer_xl"`` keeps ``nn.Linear``'s own weights (their
            ``FixedRelativeMultiheadAttention`` never calls its ``reset_parameters``; their other
            attention and feed-forward layers do), biases keep ``nn.Linear``'s own draw, and the
            output layer's bias starts at zero with ``tied_output`` (their ``TiedEmbedding``), its
            weights Xavier-uniform without.
        attention_bias: the query, key, value and output projections of the self- and
            cross-attention have biases (default ``True``); Csordás et al. 2021's have none.
        decoder_offset: in training, each target's decoder input gets ``r`` extra ``<sos>``
            tokens before it, ``r`` uniform in ``{0, …, decoder_offset}`` per example, so the
            decoder cannot learn where the output ends from how far it is into it (module
            docstring); default 0: none. Needs dot-product cross-attention heads.
        decoder_hides_start: the decoder's self-attention never reads ``<sos>`` from a later
            step (module docstring); default ``False``. Not with ``decoder_offset``.
        tied_output: the output layer's weights are the target embeddings (with a bias of its
            own; Press & Wolf 2017; Csordás et al. 2021's default); default ``False``.
        start_is_end: the decoder reads its start token ``<sos>`` with the end token's
            embedding, as Csordás et al. 2021's code, which has one token for both (its
            ``decoder_sos_eos``); with ``tied_output`` the decoder's first input is then the output
            layer's ``<eos>`` weights. Default ``False``: ``<sos>`` has an embedding of its own.
        semantic_output: the logits are the output layer applied to the last decoder layer's
            cross-attention output, whose values are projected from the source's token embeddings
            (Russin et al. 2019's separation of syntax and semantics; module docstring); default
            ``False``. Needs ``end_marker`` or ``stop_from_attention``.
        previous_outputs: the decoder reads each step's previous output token (default ``True``);
            ``False``: every step reads the ``<sos>`` embedding instead (module docstring).
        semantic_embeddings: with ``semantic_output``, the values' token embeddings are the
            encoder's (``"shared"``, default) or a table of their own (``"separate"``: Russin et
            al. 2019's two embeddings per word; module docstring).
        semantic_heads: with ``semantic_output``, each head reads its own projection of the values'
            embeddings (``"separate"``, default) or all heads read one projection and their glimpses
            are averaged (``"shared"``) or weighted by a softmax over the heads from the decoder's
            state (``"gated"``; module docstring).
        peer_words: ``"source"``: the encoder reads a source word seen only alone in training as
            its peers (the words seen alone and with others), which needs
            ``semantic_embeddings="separate"`` so that what the word means is kept; ``"target"``:
            the decoder reads such an output token among its inputs the same way; ``"both"``:
            both; default ``"none"`` (module docstring).
        peer_dropout: with the decoder reading peers (``peer_words`` ``"target"`` or ``"both"``), in
            training each output token among its inputs is read as the peers' mean with this
            probability, so that the decoder learns to go on over that input (module docstring);
            default 0.
        peer_dropout_unit: what ``peer_dropout`` drops: ``"token"`` (default) each input token on
            its own; ``"peer"`` each peer output token of a target at all of its positions
            (module docstring).
        target_alone: with the decoder reading peers, which output tokens count as seen alone:
            ``"output"`` (default) every token that was a whole output; ``"command"`` only the
            whole output of a one-word command (module docstring).
        peers_as_one: with ``peer_words``, the side(s) that read peers read every peer word as the
            peers' mean too, in training and at test, never which peer it is (module docstring);
            default ``False``.
        decoder_recurrence: ``"gru"`` or ``"lstm"``: a GRU or an LSTM over the decoder's inputs adds
            a recurrent count of the outputs so far to them (module docstring); default ``"none"``.
        decoder_recurrence_layer: the decoder layer before which ``decoder_recurrence`` runs over
            the residual stream, ``0 … decoder_layers`` (default 0: over the inputs; module
            docstring).
        decoder_counting_heads: this many of each decoder layer's self-attention heads (its last)
            sum their values under sigmoid weights instead of averaging them under a softmax, so
            that a step can read how many earlier outputs a head selects (module docstring);
            default 0.
        universal: each stack applies one layer's weights at every depth, ``encoder_layers`` and
            ``decoder_layers`` times (a Universal Transformer, Dehghani et al. 2019, without their
            adaptive computation time and depth embeddings, as Csordás et al. 2021's universal
            variants, whose relative one reports 100% at SCAN's output cut-off 26); default
            ``False``. Every decoder layer must then have the same cross-attention heads, and
            ``semantic_output`` (which changes the last layer alone) is refused.
    """

    def __init__(
        self,
        source_vocab_size: int,
        target_vocab_size: int,
        *,
        d_model: int = 128,
        heads: int = 4,
        encoder_layers: int = 2,
        decoder_layers: int = 2,
        ff_dim: int = 512,
        dropout: float = 0.1,
        embedding_dropout: float | None = None,
        positional: str = "sinusoidal",
        cross_attention: CrossAttentionSpec = DOT,
        cross_attention_options: dict[str, dict[str, Any]] | None = None,
        max_positions: int = 256,
        max_relative_distance: int | tuple[int, int] = 16,
        stop_from_attention: bool = False,
        stop_layers: str = "last",
        stop_gate_scale: float = 1.0,
        stop_detached: bool = False,
        stop_head_gradient: float = 1.0,
        stop_ends: str = "either",
        end_marker: bool = False,
        attender_keys: str = "memory",
        norm: str = "pre",
        source_start: bool = False,
        embedding_init: str = "scaled",
        linear_init: str = "pytorch",
        attention_bias: bool = True,
        tied_output: bool = False,
        start_is_end: bool = False,
        decoder_offset: int = 0,
        decoder_hides_start: bool = False,
        semantic_output: bool = False,
        previous_outputs: bool = True,
        semantic_embeddings: str = "shared",
        semantic_heads: str = "separate",
        peer_words: str = "none",
        peer_dropout: float = 0.0,
        peer_dropout_unit: str = "token",
        target_alone: str = "output",
        peers_as_one: bool = False,
        decoder_recurrence: str = "none",
        decoder_counting_heads: int = 0,
        decoder_recurrence_layer: int = 0,
        universal: bool = False,
        pad_id: int = 0,
        sos_id: int = 1,
        eos_id: int = 2,
    ) -> None:
        super().__init__(source_vocab_size, target_vocab_size, pad_id, sos_id, eos_id)
        check_scheme(positional)
        if min(d_model, heads, encoder_layers, decoder_layers, ff_dim, max_positions) < 1:
            raise ValueError(
                "d_model, heads, encoder_layers, decoder_layers, ff_dim and max_positions must be >= 1"
            )
        if d_model % heads:
            raise ValueError(f"d_model ({d_model}) must be a multiple of heads ({heads})")
        if not 0 <= dropout < 1:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        if embedding_dropout is not None and not 0 <= embedding_dropout < 1:
            raise ValueError(f"embedding_dropout must be in [0, 1) or None, got {embedding_dropout}")
        check_choice("norm", norm, NORMS)
        if not stop_gate_scale > 0:
            raise ValueError(f"stop_gate_scale must be > 0, got {stop_gate_scale}")
        check_choice("stop_layers", stop_layers, STOP_LAYERS)
        if not 0.0 <= stop_head_gradient <= 1.0:
            raise ValueError(f"stop_head_gradient must be in [0, 1], got {stop_head_gradient}")
        if stop_detached and stop_head_gradient != 1.0:
            raise ValueError(
                "stop_detached already sends none of the stop's gradient to the heads; "
                "drop stop_head_gradient"
            )
        check_choice("stop_ends", stop_ends, STOP_ENDS)
        check_choice("linear_init", linear_init, LINEAR_INITS)
        check_choice("embedding_init", embedding_init, EMBEDDING_INITS)
        check_choice("decoder_recurrence", decoder_recurrence, DECODER_RECURRENCES)
        check_counting_heads(decoder_counting_heads, heads)
        check_recurrence_layer(decoder_recurrence_layer, decoder_recurrence, decoder_layers)
        check_semantic_output(
            semantic_output,
            end_marker=end_marker,
            stop_from_attention=stop_from_attention,
            semantic_embeddings=semantic_embeddings,
            semantic_heads=semantic_heads,
        )
        check_peer_words(
            peer_words,
            semantic_embeddings=semantic_embeddings,
            tied_output=tied_output,
            peer_dropout=peer_dropout,
            peer_dropout_unit=peer_dropout_unit,
            target_alone=target_alone,
            peers_as_one=peers_as_one,
        )
        self.target_alone = target_alone
        self.semantic_output, self.previous_outputs = semantic_output, previous_outputs
        self.d_model, self.positional, self.norm = d_model, positional, norm
        self.max_relative_distance = relative_clips(max_relative_distance)
        encoder_clip, decoder_clip = self.max_relative_distance
        self.embedding_scale = math.sqrt(d_model) if embedding_init == "scaled" else 1.0
        self.head_names = cross_attention_heads(cross_attention, decoder_layers, heads)
        check_attender_keys(attender_keys, self.head_names)
        check_decoder_offset(decoder_offset, self.head_names, decoder_hides_start)
        check_universal(universal, self.head_names, semantic_output)
        self.decoder_offset = decoder_offset
        self.attender_keys = attender_keys
        options = dict(cross_attention_options or {})
        check_cross_attention_options(options, self.head_names)
        has_start = stop_from_attention or source_start
        self.added_source_positions = added_source_positions(
            end_marker=end_marker, stop_from_attention=stop_from_attention, source_start=source_start
        )
        self.start_marker_id = source_vocab_size if has_start else None
        self.end_marker_id = source_vocab_size + int(has_start) if end_marker else None
        self.source_embedding = nn.Embedding(
            source_vocab_size + int(has_start) + int(end_marker), d_model, padding_idx=pad_id
        )
        self.target_embedding = nn.Embedding(target_vocab_size, d_model, padding_idx=pad_id)
        self.semantic_embedding = (
            nn.Embedding(self.source_embedding.num_embeddings, d_model, padding_idx=pad_id)
            if semantic_embeddings == "separate"
            else None
        )
        for embedding in (self.source_embedding, self.target_embedding, self.semantic_embedding):
            if embedding is not None:
                _init_embedding(embedding, d_model, embedding_init)
        source_peers = peer_words in ("source", "both")
        self.source_peers = _peers(self.source_embedding, as_one=peers_as_one) if source_peers else None
        decoder_peers = peer_words in ("target", "both")
        self.target_peers = (
            _peers(self.target_embedding, peer_dropout, peer_dropout_unit, peers_as_one)
            if decoder_peers
            else None
        )
        absolute = positional if positional in ABSOLUTE_SCHEMES else "none"
        self.source_positions = AbsolutePositions(absolute, d_model, max_positions)
        self.max_source_length = (
            max_positions - self.added_source_positions if positional == "learned" else None
        )
        """The most source tokens the model reads (its learned table's rows, less the positions it
        adds to every source); ``None``: any length."""
        self.target_positions = AbsolutePositions(absolute, d_model, max_positions)
        self.encoder = _stack(
            lambda _: EncoderLayer(
                d_model, heads, ff_dim, dropout, positional, encoder_clip, norm, attention_bias
            ),
            encoder_layers,
            universal,
        )
        self.decoder = _stack(
            lambda layer: DecoderLayer(
                d_model,
                self.head_names[layer],
                ff_dim,
                dropout,
                positional,
                decoder_clip,
                options,
                attender_keys,
                norm,
                decoder_hides_start,
                embedding_values=semantic_output and layer == decoder_layers - 1,
                shared_values=semantic_output
                and layer == decoder_layers - 1
                and semantic_heads != "separate",
                gated_heads=semantic_output and layer == decoder_layers - 1 and semantic_heads == "gated",
                counting_heads=decoder_counting_heads,
                attention_bias=attention_bias,
            ),
            decoder_layers,
            universal,
        )
        self.encoder_norm: nn.Module = nn.LayerNorm(d_model) if norm == "pre" else nn.Identity()
        self.decoder_norm: nn.Module = nn.LayerNorm(d_model) if norm == "pre" else nn.Identity()
        self.embedding_dropout = Dropout(dropout if embedding_dropout is None else embedding_dropout)
        self.output = nn.Linear(d_model, target_vocab_size)
        if tied_output:
            self.output.weight = self.target_embedding.weight
        self.stop_from_attention, self.stop_layers = stop_from_attention, stop_layers
        self.stop_gate_scale, self.stop_ends = stop_gate_scale, stop_ends
        self.stop_head_gradient = 0.0 if stop_detached else stop_head_gradient
        stop_heads = heads * (decoder_layers if stop_layers == "all" else 1)
        separate = stop_from_attention and stop_layers == "separate"
        self.stop_attention = StopHeads(d_model, heads) if separate else None
        gate_shape = (stop_heads,) if stop_ends == "either" else (stop_heads, 2)
        self.stop_gate = nn.Parameter(torch.zeros(gate_shape)) if stop_from_attention else None
        # built last, so that a model without it draws the same initial weights as before it existed
        self.decoder_recurrence = (
            RECURRENCE_MODULES[decoder_recurrence](d_model, d_model, batch_first=True)
            if decoder_recurrence in RECURRENCE_MODULES
            else None
        )
        self.decoder_recurrence_layer = decoder_recurrence_layer
        self.start_is_end = start_is_end
        if linear_init != "pytorch":
            self._init_linear_layers(as_released=linear_init == "csordas2021")

    def _init_linear_layers(self, *, as_released: bool) -> None:
        """``linear_init`` ``"xavier"``, or ``"csordas2021"`` (``as_released``; see the class
        docstring)."""
        for module in self.modules():
            relative = isinstance(module, SelfAttention) and module.positions.scheme == "transformer_xl"
            if as_released and relative:  # their FixedRelativeMultiheadAttention keeps nn.Linear's
                continue
            if isinstance(module, SelfAttention | CrossAttention | FeedForward):
                module.xavier_init_(zero_bias=not as_released)
        if as_released:
            if self.output.weight is self.target_embedding.weight:  # tied_output
                nn.init.zeros_(self.output.bias)
            else:
                nn.init.xavier_uniform_(self.output.weight)

    def encode(self, source: torch.Tensor, source_padding_mask: torch.Tensor) -> torch.Tensor:
        """The memory ``[B, S, d_model]`` (garbage at padding, which is never attended)."""
        check_padding_mask(type(self).__name__, source_padding_mask, source.shape, "source_padding_mask")
        return self._encode_embedded(self._embed_source(source), source_padding_mask)

    def _embed_source(self, source: torch.Tensor) -> torch.Tensor:
        """The source's token embeddings (scaled by ``sqrt(d_model)`` with ``embedding_init="scaled"``),
        before positions are added; with ``peer_words``, the encoder's reading of them."""
        if self.source_peers is None:
            return self.source_embedding(source) * self.embedding_scale
        markers = [self.pad_id, self.start_marker_id, self.end_marker_id]
        return _read_with_peers(self.source_peers, source, markers) * self.embedding_scale

    def _encode_embedded(self, embedded: torch.Tensor, source_padding_mask: torch.Tensor) -> torch.Tensor:
        positions = source_positions(embedded, source_padding_mask)
        x = self.embedding_dropout(self.source_positions(embedded, positions))
        for layer in self.encoder:
            x = layer(x, positions, source_padding_mask)
        return self.encoder_norm(x)

    def start(self, source: torch.Tensor, source_padding_mask: torch.Tensor) -> _DecoderState:
        # right padding: the end positions below count a row's words from its first column
        check_padding_mask(
            type(self).__name__, source_padding_mask, source.shape, "source_padding_mask", right_padded=True
        )
        source_words = (~source_padding_mask).sum(dim=1)
        if self.end_marker_id is not None:
            source, source_padding_mask, _ = append_end_marker(
                source, source_padding_mask, self.end_marker_id, self.pad_id
            )
        end_positions = (~source_padding_mask).sum(dim=1) - 1
        if self.start_marker_id is not None:
            source = torch.cat([source.new_full((source.size(0), 1), self.start_marker_id), source], dim=1)
            source_padding_mask = torch.cat(
                [source_padding_mask.new_zeros(source.size(0), 1), source_padding_mask], dim=1
            )
            end_positions = end_positions + 1
        embedded = self._embed_source(source)
        memory = self._encode_embedded(embedded, source_padding_mask)
        meanings = (
            None
            if self.semantic_embedding is None
            else self.semantic_embedding(source) * self.embedding_scale
        )
        cross = [
            _cross_attention(layer).start(memory, source_padding_mask, embedded, meanings)
            for layer in self.decoder
        ]
        stop_keys = None
        if self.stop_attention is not None:
            stop_keys = self.stop_attention.keys(scale_gradient(memory, self.stop_head_gradient))
        return _DecoderState(
            cross, [None] * len(self.decoder), end_positions, stop_keys=stop_keys, source_words=source_words
        )

    def relative_distances(self, source_len: int, target_steps: int, *, training: bool) -> tuple[int, int]:
        """The longest offsets ``(encoder, decoder)`` that the self-attention reads on a source of
        ``source_len`` tokens and ``target_steps`` decoder steps (``<sos>`` and the target),
        counting what the model adds: the end marker and the source start on the encoder's side,
        and in training (``training``) ``decoder_offset``'s extra ``<sos>`` on the decoder's."""
        return longest_relative_distances(
            source_len + self.added_source_positions, target_steps + (self.decoder_offset if training else 0)
        )

    def _source_columns(self, weights: torch.Tensor) -> torch.Tensor:
        """Attention ``[..., S']`` over the memory → over the source's own tokens (without the start
        position of ``stop_from_attention``; with the end marker, if any)."""
        return weights if self.start_marker_id is None else weights[..., 1:]

    def _decode(
        self, state: _DecoderState, tokens: torch.Tensor
    ) -> tuple[torch.Tensor, list[torch.Tensor], _DecoderState]:
        """Logits ``[B, T, V]`` and each decoder layer's cross-attention ``[B, H, T, S]`` of
        ``tokens [B, T]``."""
        read = tokens if self.previous_outputs else torch.full_like(tokens, self.sos_id)
        if self.start_is_end:
            read = read.masked_fill(read == self.sos_id, self.eos_id)
        if self.target_peers is None:
            embedded = self.target_embedding(read) * self.embedding_scale
        else:
            markers = [self.pad_id, self.sos_id, self.eos_id]
            from_commands = state.source_words if self.target_alone == "command" else None
            embedded = (
                _read_with_peers(self.target_peers, read, markers, from_commands) * self.embedding_scale
            )
        steps = tokens.size(1)
        positions = torch.arange(state.step, state.step + steps, device=tokens.device, dtype=embedded.dtype)
        positions = positions.expand(tokens.size(0), steps)
        x = self.embedding_dropout(self.target_positions(embedded, positions))
        recurrent = None
        crosses, caches, layer_weights = [], [], []
        for index, (layer, cross, cache) in enumerate(zip(self.decoder, state.cross, state.caches)):
            if index == self.decoder_recurrence_layer:
                x, recurrent = self._add_recurrence(x, state)
            x, glimpse, weights, cross, cache = layer(x, positions, cross, cache)
            crosses.append(cross)
            caches.append(cache)
            layer_weights.append(weights)
        if self.decoder_recurrence_layer == len(self.decoder):
            x, recurrent = self._add_recurrence(x, state)
        x = self.decoder_norm(x)
        if self.stop_attention is not None:
            assert state.stop_keys is not None
            stop_query = scale_gradient(x, self.stop_head_gradient)
            stop_weights = self.stop_attention(stop_query, state.stop_keys, state.cross[-1].padding_mask)
        elif self.stop_layers == "all":
            stop_weights = torch.cat(layer_weights, dim=1)
        else:
            stop_weights = layer_weights[-1]
        logits = self._readout(glimpse if self.semantic_output else x, stop_weights, state.end_positions)
        next_state = _DecoderState(
            crosses,
            caches,
            state.end_positions,
            state.step + steps,
            state.stop_keys,
            state.source_words,
            recurrent,
        )
        return logits, layer_weights, next_state

    def _add_recurrence(self, x: torch.Tensor, state: _DecoderState) -> tuple[torch.Tensor, Any]:
        """``x + recurrence(x)`` from the state it had after the previous steps, and its new state
        (``x`` and no state without ``decoder_recurrence``)."""
        if self.decoder_recurrence is None:
            return x, None
        counted, recurrent = self.decoder_recurrence(x, state.recurrent)
        return x + counted, recurrent

    def stop_gate_weights(self) -> torch.Tensor:
        """The gate ``g = softmax(stop_gate_scale · w)`` of ``stop_from_attention`` over its heads
        (the last layer's, with ``stop_layers="all"`` every layer's, layer by layer, with
        ``"separate"`` the :class:`StopHeads`): ``[H']``,
        or with ``stop_ends="gated"`` ``[H', 2]`` over (head, end) pairs (column 0 the start,
        1 the end), the softmax over all of them."""
        if self.stop_gate is None:
            raise ValueError("the model has no stop gate: it was built without stop_from_attention")
        logits = self.stop_gate_scale * self.stop_gate
        return torch.softmax(logits.flatten(), dim=0).view_as(logits)

    def _readout(self, x: torch.Tensor, weights: torch.Tensor, end_positions: torch.Tensor) -> torch.Tensor:
        """Logits ``[B, T, V]`` of the decoder's output ``x`` (with ``semantic_output``, of the last
        layer's cross-attention output); with ``stop_from_attention`` the
        log-probabilities of the module docstring (``weights``: the stop heads' ``[B, H', T, S]``,
        the last layer's, every layer's with ``stop_layers="all"``, or the :class:`StopHeads`')."""
        logits = self.output(x)
        if self.stop_gate is None:
            return logits
        if self.stop_attention is None:  # the heads read the input: scale what reaches them
            weights = scale_gradient(weights, self.stop_head_gradient)
        index = end_positions.view(-1, 1, 1, 1).expand(-1, weights.size(1), weights.size(2), 1)
        ends = torch.stack([weights[..., 0], weights.gather(3, index).squeeze(3)], dim=-1)  # [B, H, T, 2]
        gate = self.stop_gate_weights()
        if self.stop_ends == "either":
            stop = torch.einsum("h,bht->bt", gate, ends.sum(dim=-1)).unsqueeze(-1)
        else:
            stop = torch.einsum("he,bhte->bt", gate, ends).unsqueeze(-1)
        stop = STOP_FLOOR + (1 - 2 * STOP_FLOOR) * stop
        return stop_log_probs(logits, self.eos_id, stop, 1 - stop)

    def step(
        self, state: _DecoderState, previous: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, _DecoderState]:
        logits, layer_weights, state = self._decode(state, previous.unsqueeze(1))
        return logits.squeeze(1), self._source_columns(layer_weights[-1].mean(dim=1).squeeze(1)), state

    def forward(
        self, source: torch.Tensor, source_padding_mask: torch.Tensor, target_input: torch.Tensor
    ) -> Seq2SeqOutput:
        """Teacher forcing: all ``target_input [B, T]`` steps at once (``<sos>`` + target); the
        attention is the last decoder layer's cross-attention averaged over its heads. In training
        with ``decoder_offset``, each row's steps follow its random number of extra ``<sos>``."""
        check_target_input(type(self).__name__, source, target_input)
        # the encoder (and its dropout) draws before the offsets do, as in the runs of session 39
        state = self.start(source, source_padding_mask)
        steps = None
        if self.training and self.decoder_offset:
            target_input, steps = self._random_start(target_input)
        logits, layer_weights, _ = self._decode(state, target_input)
        attention = layer_weights[-1].mean(dim=1)
        if steps is not None:  # the target's own steps, without the extra <sos>
            index = steps.unsqueeze(2)
            logits, attention = logits.take_along_dim(index, dim=1), attention.take_along_dim(index, dim=1)
        return Seq2SeqOutput(logits, self._source_columns(attention))

    def _random_start(self, target_input: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``target_input [B, T]`` after ``r_b`` extra ``<sos>`` per row, ``r_b`` uniform in
        ``{0, …, decoder_offset}`` (right-padded to the longest), and the columns ``[B, T]``
        where each row's own steps now are."""
        batch, steps = target_input.shape
        device = target_input.device
        offsets = torch.randint(0, self.decoder_offset + 1, (batch,), device=device)
        columns = offsets.unsqueeze(1) + torch.arange(steps, device=device)
        shifted = target_input.new_full((batch, steps + int(offsets.max())), self.pad_id)
        shifted.masked_fill_(torch.arange(shifted.size(1), device=device) < offsets.unsqueeze(1), self.sos_id)
        return shifted.scatter(1, columns, target_input), columns

    def cross_attention_maps(
        self, source: torch.Tensor, source_padding_mask: torch.Tensor, target_input: torch.Tensor
    ) -> torch.Tensor:
        """The cross-attention of every decoder layer and head under teacher forcing.

        Args:
            source: ``[B, S]`` source tokens.
            source_padding_mask: ``[B, S]``, ``True`` at padding.
            target_input: ``[B, T]`` decoder inputs, ``<sos>`` + target (the inputs of
                :meth:`forward`); for the steps of a greedy decoding, :meth:`decoded_input` of
                its tokens.

        Returns:
            ``[B, layers, heads, T, S]`` (``S + 1`` with ``end_marker``): ``[b, l, h, t]`` is head
            ``h`` of decoder layer ``l`` at step ``t`` (each row sums to 1, to ``1 − α_start`` with
            a start position, ``stop_from_attention`` or ``source_start``, and is 0 on source
            padding). Its last layer averaged
            over heads, ``maps[:, -1].mean(dim=1)``, is what :class:`~attnlab.models.seq2seq.
            Seq2SeqOutput`'s ``attention`` holds (:meth:`forward`, :meth:`step`). Call it in eval
            mode: dropout in training mode changes later layers' inputs.
        """
        _, layer_weights, _ = self._decode(self.start(source, source_padding_mask), target_input)
        return self._source_columns(torch.stack(layer_weights, dim=1))

    def decoded_input(self, tokens: torch.Tensor) -> torch.Tensor:
        """The decoder inputs ``[B, T]`` (``<sos>``, then ``tokens`` but the last) that reproduce
        the steps of a decoding ``tokens [B, T]`` (e.g. ``greedy_decode(...).tokens``) under
        teacher forcing. Decoding is causal, so the cross-attention of the steps up to each
        sequence's ``<eos>`` is the one decoding computed; later steps read padding."""
        start = tokens.new_full((tokens.size(0), 1), self.sos_id)
        return torch.cat([start, tokens[:, :-1]], dim=1)


def _peers(
    table: nn.Embedding, dropout: float = 0.0, unit: str = "token", as_one: bool = False
) -> ComposedWordEmbedding:
    """A :class:`~attnlab.attention.syntactic.ComposedWordEmbedding` with peers whose table is
    ``table`` (the same parameters); ``dropout``: its word dropout, to the peers' mean, of each
    ``unit``; ``as_one``: every peer word read as the peers' mean (``peers_as_one``)."""
    dimensions = (table.num_embeddings, table.embedding_dim)
    peers = ComposedWordEmbedding(
        *dimensions,
        dropout,
        _padding_index(table),
        peers=True,
        dropout_to_peers=dropout > 0,
        dropout_unit=unit,
        peers_as_one=as_one,
    )
    peers.embedding = table
    return peers


def _padding_index(table: nn.Embedding) -> int:
    assert table.padding_idx is not None
    return table.padding_idx


def _read_with_peers(
    peers: ComposedWordEmbedding,
    tokens: torch.Tensor,
    markers: Sequence[int | None],
    source_words: torch.Tensor | None = None,
) -> torch.Tensor:
    """``peers``' embeddings of ``tokens [B, T]``: the marker tokens (padding, starts, ends) keep
    their own embeddings and are not words; a sequence of one word records it as seen alone, or,
    given ``source_words [B]`` (each row's source words), only where that source is one word too."""
    not_words = torch.zeros_like(tokens, dtype=torch.bool)
    for marker in markers:
        if marker is not None:
            not_words |= tokens == marker
    words = (~not_words).sum(dim=1)
    if source_words is not None:  # a row of one word after a longer command records nothing
        words = words.masked_fill((words == 1) & (source_words != 1), 0)
    return peers(tokens, not_words, words)


def _stack(make: Callable[[int], nn.Module], depth: int, universal: bool) -> nn.ModuleList:
    """The layers ``make(0) … make(depth - 1)`` of a stack, or with ``universal`` ``make(0)`` at
    every depth (the only layer built, so the only one to draw initial weights)."""
    if universal:
        return nn.ModuleList([make(0)] * depth)
    return nn.ModuleList(make(index) for index in range(depth))


def _init_embedding(embedding: nn.Embedding, d_model: int, init: str) -> None:
    """``"scaled"``: normal with standard deviation ``d_model ** -0.5`` (Vaswani et al. 2017's
    tensor2tensor), so that the embeddings scaled by ``sqrt(d_model)`` have unit scale, like the
    sinusoidal encodings added to them and the sublayer outputs added to the residual stream.
    PyTorch's default (standard deviation 1) would make them ``sqrt(d_model)`` times larger (11x at
    128): positions drowned in the token embeddings and every sublayer a small change to a large
    residual stream, which learns slowly. ``"xavier"``: Xavier-uniform (read unscaled; Csordás et
    al. 2021). The padding row stays 0."""
    if init == "xavier":
        nn.init.xavier_uniform_(embedding.weight)
    else:
        nn.init.normal_(embedding.weight, std=d_model**-0.5)
    if embedding.padding_idx is not None:
        with torch.no_grad():
            embedding.weight[embedding.padding_idx].zero_()


def _cross_attention(layer: nn.Module) -> CrossAttention:
    assert isinstance(layer, DecoderLayer)
    return layer.cross_attention
