"""The options of :class:`~attnlab.models.transformer.TransformerSeq2Seq`: the values each one takes,
and the checks of their combinations (a ``ValueError`` naming the option and what was expected),
which the model's constructor and the experiments' configs share so that a bad combination fails
before a run starts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import nn

from attnlab.attention.registry import ATTENDERS
from attnlab.attention.syntactic import DROPOUT_UNITS
from attnlab.checks import check_choice

DOT = "dot"
"""The standard scaled dot-product cross-attention head."""

NORMS = ("pre", "post")
"""Where each layer normalisation sits (``TransformerSeq2Seq(norm=...)``): before every sub-layer
(on its branch) or after every residual sum."""

ATTENDER_KEYS = ("memory", "embeddings", "local")
"""What the attender heads' keys are projected from (``TransformerSeq2Seq(attender_keys=...)``)."""

STOP_LAYERS = ("last", "all", "separate")
"""Whose cross-attention heads the stop of ``stop_from_attention`` is read from
(``TransformerSeq2Seq(stop_layers=...)``): the last decoder layer's, every decoder layer's, or
heads of the stop's own (:class:`StopHeads`) that no output token reads."""

STOP_ENDS = ("either", "gated")
"""How the stop of ``stop_from_attention`` reads the two ends of the source
(``TransformerSeq2Seq(stop_ends=...)``): a head's attention on either end, or a gate over (head,
end) pairs."""

SEMANTIC_EMBEDDINGS = ("shared", "separate")
"""The token embeddings ``semantic_output``'s values read (``TransformerSeq2Seq(semantic_embeddings=...)``):
the encoder's, or a table of their own."""

SEMANTIC_HEADS = ("separate", "shared", "gated")
"""How ``semantic_output``'s heads read the values (``TransformerSeq2Seq(semantic_heads=...)``): each
head its own projection of a word's embedding, concatenated through the output projection
(``"separate"``, multi-head attention's), or one projection every head reads, the heads' glimpses
averaged (``"shared"``: the output a linear function of the words under the heads' mean attention)
or weighted by a softmax over the heads read from the decoder's state (``"gated"``: the step
chooses whose attended word it says)."""

PEER_WORDS = ("none", "source", "target", "both")
"""Who reads a word seen only alone in training as its peers (``TransformerSeq2Seq(peer_words=...)``):
nobody, the encoder, the decoder's inputs, or both."""

TARGET_ALONE = ("output", "command")
"""Which output tokens the decoder's peers count as seen alone (``TransformerSeq2Seq(target_alone=...)``):
every token that was a whole output, or only the whole output of a one-word command."""

STOP_FLOOR = 0.01
"""With ``stop_from_attention``, ``p(<eos>)`` is kept in ``[ε, 1 − ε]`` (``ε`` this floor): the
Shift Attender's attention is a sampled one-hot move in training, so a step whose sample misses the
end would otherwise cost ``−log 0``; the floor bounds that loss at ``−log ε`` (4.6 nats)."""

CrossAttentionSpec = str | list[Any]
"""One name for every head of every layer, or one entry per decoder layer: a name (all heads of
that layer) or a list of one name per head."""


def cross_attention_heads(spec: CrossAttentionSpec, layers: int, heads: int) -> list[list[str]]:
    """Normalise a cross-attention spec to ``[layers][heads]`` names; bad shapes or names (neither
    ``"dot"`` nor a registered attender) raise ``ValueError``."""
    if isinstance(spec, str):
        _check_head_name(spec, "cross_attention")
        return [[spec] * heads for _ in range(layers)]
    if len(spec) != layers:
        raise ValueError(
            f"cross_attention lists {len(spec)} layers, and the decoder has {layers}; give one "
            "name for all, or one entry (a name, or a list of one name per head) per layer"
        )
    per_layer = []
    for i, entry in enumerate(spec):
        if isinstance(entry, str):
            _check_head_name(entry, f"cross_attention[{i}]")
            per_layer.append([entry] * heads)
        elif isinstance(entry, list | tuple) and len(entry) == heads and _names(entry):
            for h, name in enumerate(entry):
                _check_head_name(name, f"cross_attention[{i}][{h}]")
            per_layer.append(list(entry))
        else:
            raise ValueError(
                f"cross_attention[{i}] must be a name or a list of {heads} names (one per head), "
                f"got {entry!r}"
            )
    return per_layer


def _check_head_name(name: str, where: str) -> None:
    if name != DOT and name not in ATTENDERS:
        raise ValueError(
            f"{where}: unknown head {name!r}; expected {DOT!r} or an attender, one of {sorted(ATTENDERS)}"
        )


def _names(entry: list[Any] | tuple[Any, ...]) -> bool:
    return all(isinstance(name, str) for name in entry)


LINEAR_INITS = ("pytorch", "xavier", "csordas2021")
"""How :class:`TransformerSeq2Seq` initialises its attention and feed-forward layers (``linear_init``)."""

EMBEDDING_INITS = ("scaled", "xavier")
"""How :class:`TransformerSeq2Seq` initialises and reads its token embeddings (``embedding_init``)."""

RECURRENCE_MODULES: dict[str, type[nn.GRU] | type[nn.LSTM]] = {"gru": nn.GRU, "lstm": nn.LSTM}
"""The recurrent cell of each ``decoder_recurrence`` but ``"none"``."""

DECODER_RECURRENCES = ("none", *RECURRENCE_MODULES)
"""What :class:`TransformerSeq2Seq` runs over its decoder's inputs (``decoder_recurrence``)."""


def added_source_positions(*, end_marker: bool, stop_from_attention: bool, source_start: bool) -> int:
    """How many positions the model adds to every source: the end marker, and one start position
    for ``stop_from_attention`` or ``source_start`` (they share it)."""
    return int(end_marker) + int(stop_from_attention or source_start)


def longest_relative_distances(source_positions: int, decoder_positions: int) -> tuple[int, int]:
    """The longest offsets ``(encoder, decoder)`` that self-attention reads over sequences of these
    many positions (0 for an empty one)."""
    return max(source_positions - 1, 0), max(decoder_positions - 1, 0)


def relative_clips(max_relative_distance: int | tuple[int, int] | list[int]) -> tuple[int, int]:
    """``max_relative_distance`` as ``(encoder, decoder)`` clips, each ``>= 0`` (a ``ValueError``
    otherwise)."""
    if isinstance(max_relative_distance, int) and not isinstance(max_relative_distance, bool):
        clips = max_relative_distance, max_relative_distance
    elif (
        isinstance(max_relative_distance, (tuple, list))
        and len(max_relative_distance) == 2
        and all(isinstance(clip, int) and not isinstance(clip, bool) for clip in max_relative_distance)
    ):
        clips = max_relative_distance[0], max_relative_distance[1]
    else:
        raise ValueError(
            "max_relative_distance must be an int (both stacks) or a pair (encoder, decoder) of ints, "
            f"got {max_relative_distance!r}"
        )
    if min(clips) < 0:
        raise ValueError(f"max_relative_distance must be >= 0, got {max_relative_distance!r}")
    return clips


def check_peer_words(
    peer_words: str,
    *,
    semantic_embeddings: str,
    tied_output: bool,
    peer_dropout: float = 0.0,
    peer_dropout_unit: str = "token",
    target_alone: str = "output",
    peers_as_one: bool = False,
) -> None:
    """A ``ValueError`` unless ``peer_words`` is one of :data:`PEER_WORDS` and, if the encoder reads
    peers (``"source"``, ``"both"``), the values read embeddings of their own
    (``semantic_embeddings="separate"``: reading a word as its peers must not change what it means)
    and, if the decoder does (``"target"``, ``"both"``), the output layer is not the target
    embeddings (``tied_output``); ``peer_dropout`` in [0, 1), and above 0 only if the decoder reads
    peers; ``peer_dropout_unit`` one of :data:`~attnlab.attention.syntactic.DROPOUT_UNITS`, other
    than the default only with ``peer_dropout``; ``target_alone`` one of :data:`TARGET_ALONE`, other
    than the default only if the decoder reads peers; ``peers_as_one`` only if a side reads peers."""
    check_choice("peer_words", peer_words, PEER_WORDS)
    if peers_as_one and peer_words == "none":
        raise ValueError(
            "peers_as_one reads the peer words as their mean; it needs peer_words: source, target or both"
        )
    check_choice("peer_dropout_unit", peer_dropout_unit, DROPOUT_UNITS)
    if peer_dropout_unit != "token" and not peer_dropout:
        raise ValueError(
            f"peer_dropout_unit: {peer_dropout_unit!r} says what peer_dropout drops; "
            "it needs peer_dropout > 0"
        )
    check_choice("target_alone", target_alone, TARGET_ALONE)
    if target_alone != "output" and peer_words not in ("target", "both"):
        raise ValueError(
            f"target_alone: {target_alone!r} says which output tokens the decoder's peers count as seen "
            f"alone; it needs peer_words: target or both, got {peer_words!r}"
        )
    if not 0.0 <= peer_dropout < 1.0:
        raise ValueError(f"peer_dropout must be in [0, 1), got {peer_dropout}")
    if peer_dropout and peer_words not in ("target", "both"):
        raise ValueError(
            "peer_dropout reads the decoder's input tokens as their peers; it needs peer_words: "
            f"target or both, got {peer_words!r}"
        )
    if peer_words in ("source", "both") and semantic_embeddings != "separate":
        raise ValueError(
            f"peer_words: {peer_words!r} changes how the encoder reads a word; what the word means "
            "must come from embeddings of its own: it needs semantic_output: true and "
            "semantic_embeddings: separate"
        )
    if peer_words in ("target", "both") and tied_output:
        raise ValueError(
            f"peer_words: {peer_words!r} changes the decoder's input embeddings, which tied_output "
            "makes the output layer; set tied_output: false"
        )


def check_semantic_output(
    semantic_output: bool,
    *,
    end_marker: bool,
    stop_from_attention: bool,
    semantic_embeddings: str = "shared",
    semantic_heads: str = "separate",
) -> None:
    """A ``ValueError`` if ``semantic_output`` has no source position to emit ``<eos>`` from (module
    docstring): it needs ``end_marker`` or ``stop_from_attention``; or if ``semantic_embeddings`` is
    not one of :data:`SEMANTIC_EMBEDDINGS`, or is ``"separate"`` without ``semantic_output``; or if
    ``semantic_heads`` is not one of :data:`SEMANTIC_HEADS`, or other than ``"separate"`` without it."""
    check_choice("semantic_embeddings", semantic_embeddings, SEMANTIC_EMBEDDINGS)
    check_choice("semantic_heads", semantic_heads, SEMANTIC_HEADS)
    for option, value, default in (
        ("semantic_embeddings", semantic_embeddings, "shared"),
        ("semantic_heads", semantic_heads, "separate"),
    ):
        if value != default and not semantic_output:
            raise ValueError(
                f"{option}: {value!r} is how semantic_output reads the words; it needs semantic_output: true"
            )
    if semantic_output and not (end_marker or stop_from_attention):
        raise ValueError(
            "semantic_output emits every token, <eos> too, from the attended source positions: "
            "it needs end_marker (or stop_from_attention)"
        )


def check_attender_keys(attender_keys: str, head_names: list[list[str]]) -> None:
    """A ``ValueError`` unless ``attender_keys`` is one of :data:`ATTENDER_KEYS` and, if not the
    default, some cross-attention head (``head_names``: per decoder layer) is an attender."""
    check_choice("attender_keys", attender_keys, ATTENDER_KEYS)
    if attender_keys != "memory" and all(name == DOT for names in head_names for name in names):
        raise ValueError(
            f"attender_keys={attender_keys!r} needs attender heads; every cross-attention head is dot"
        )


def check_decoder_offset(
    decoder_offset: int, head_names: list[list[str]], decoder_hides_start: bool = False
) -> None:
    """A ``ValueError`` unless ``decoder_offset`` is ``>= 0`` and, if not 0, every cross-attention
    head (``head_names``: per decoder layer) is a dot-product head (an attender head would step
    through the extra ``<sos>``) and ``decoder_hides_start`` is off (it would hide one of them)."""
    if decoder_offset < 0:
        raise ValueError(f"decoder_offset must be >= 0, got {decoder_offset}")
    if decoder_offset and decoder_hides_start:
        raise ValueError(
            "decoder_offset adds <sos> tokens and decoder_hides_start hides the first one: use one of them"
        )
    attenders = sorted({name for names in head_names for name in names} - {DOT})
    if decoder_offset and attenders:
        raise ValueError(
            f"decoder_offset needs dot-product cross-attention heads; {', '.join(attenders)} would "
            "step through the extra <sos> tokens"
        )


def check_universal(universal: bool, head_names: list[list[str]], semantic_output: bool) -> None:
    """Refuse what one layer shared across the decoder's depths cannot be: layers with different
    cross-attention heads, or ``semantic_output``'s last layer unlike the others."""
    if not universal:
        return
    if any(names != head_names[0] for names in head_names):
        raise ValueError(
            f"universal shares one decoder layer across depths, so every layer needs the same "
            f"cross-attention heads; got {head_names}"
        )
    if semantic_output:
        raise ValueError("universal shares one decoder layer across depths; semantic_output changes the last")


def check_counting_heads(decoder_counting_heads: int, heads: int) -> None:
    """A ``ValueError`` unless ``decoder_counting_heads`` is one of a layer's ``0 … heads`` heads."""
    if not 0 <= decoder_counting_heads <= heads:
        raise ValueError(
            f"decoder_counting_heads must be between 0 and heads ({heads}), got {decoder_counting_heads}"
        )


def check_recurrence_layer(
    decoder_recurrence_layer: int, decoder_recurrence: str, decoder_layers: int
) -> None:
    """A ``ValueError`` unless ``decoder_recurrence_layer`` is one of ``0 … decoder_layers`` and, past
    0, there is a ``decoder_recurrence`` to place there."""
    if not 0 <= decoder_recurrence_layer <= decoder_layers:
        raise ValueError(
            f"decoder_recurrence_layer must be between 0 and decoder_layers ({decoder_layers}), "
            f"got {decoder_recurrence_layer}"
        )
    if decoder_recurrence_layer and decoder_recurrence == "none":
        raise ValueError("decoder_recurrence_layer places decoder_recurrence, which is 'none'")


def check_cross_attention_options(options: Mapping[str, Any], head_names: list[list[str]]) -> None:
    """A ``ValueError`` where ``options`` (attender name → its options) names an attender that no
    cross-attention head (``head_names``: per decoder layer) is: those options would be ignored."""
    used = {name for names in head_names for name in names}
    unused = sorted(set(options) - used)
    if unused:
        raise ValueError(
            f"cross_attention_options names {', '.join(unused)}, which no cross-attention head is "
            f"(heads: {', '.join(sorted(used))}); options apply to the attenders named in cross_attention"
        )
