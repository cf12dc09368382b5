"""What the sequence-to-sequence experiments (:mod:`attnlab.experiments.lookup`,
:mod:`attnlab.experiments.scan`) share: a model spec that carries the source and target
vocabularies, rebuilding a model from a checkpoint with such a spec, the attention maps of a
few decoded examples (the trainer's TensorBoard images), the per-example predictions file of an
evaluation, and the Transformer's model options (:class:`TransformerModelConfig`,
``model.architecture: transformer`` in both experiments)."""

from __future__ import annotations

import logging
from abc import abstractmethod
from collections.abc import Callable, Collection, Iterable
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, ClassVar, Generic, Literal, Protocol, TypeVar

import torch

from attnlab.config import ConfigError, from_dict, to_dict
from attnlab.evaluation import translation
from attnlab.evaluation.seq2seq import ExampleOutcomes, decode_within_budget, decoded_steps
from attnlab.experiments.base import Evaluation, Experiment, TranslationRequest
from attnlab.experiments.driver import load_trained
from attnlab.experiments.unit_scores import PREDICTIONS_SUFFIX, dataset_texts, write_predictions
from attnlab.models.seq2seq import Seq2SeqOutput
from attnlab.models.transformer import (
    TransformerSeq2Seq,
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
from attnlab.tasks.batching import EncodedDataset, collate
from attnlab.tasks.vocab import Vocabulary
from attnlab.training.checkpoint import check_model_spec, load_model_weights, load_system_checkpoint

ModelConfigT = TypeVar("ModelConfigT")
ModelT = TypeVar("ModelT", bound=torch.nn.Module)
SplitT = TypeVar("SplitT")
logger = logging.getLogger(__name__)


class Seq2SeqConfig(Protocol):
    """What the seq2seq experiments' configs have in common: model and evaluation sections."""

    model: Any
    evaluation: Any


Seq2SeqConfigT = TypeVar("Seq2SeqConfigT", bound=Seq2SeqConfig)

ATTENTION_SAMPLES = 2
"""How many validation examples :func:`decoded_attention_samples` shows by default."""


def changed_options(config: Any, names: Iterable[str] | None = None) -> list[str]:
    """The fields of the dataclass ``config`` (those of ``names`` only, if given) whose values
    differ from their defaults, in declaration order."""
    wanted = None if names is None else set(names)
    changed = []
    for option in fields(config):
        if wanted is not None and option.name not in wanted:
            continue
        if option.default is not MISSING:
            default = option.default
        elif option.default_factory is not MISSING:
            default = option.default_factory()
        else:  # a required field has no default to differ from
            continue
        if getattr(config, option.name) != default:
            changed.append(option.name)
    return changed


def check_architecture_options(
    architecture: str, transformer: TransformerModelConfig, recurrent_options: list[str]
) -> None:
    """Refuse options that the model's ``architecture`` would ignore: with ``transformer``, the
    ``recurrent_options`` set (changed from their defaults: the recurrent models' options); with
    any other architecture, any ``transformer.*`` option set. A run's saved config holds every
    option at its value, so only changed values can be told apart from options left alone."""
    if architecture == "transformer" and recurrent_options:
        raise ValueError(
            f"{', '.join(recurrent_options)}: option(s) of the recurrent model, which architecture: "
            "transformer ignores; the Transformer's options are under transformer "
            "(e.g. transformer.cross_attention, transformer.d_model)"
        )
    if architecture != "transformer":
        ignored = [f"transformer.{name}" for name in changed_options(transformer)]
        if ignored:
            raise ValueError(
                f"{', '.join(ignored)}: Transformer option(s), which architecture: {architecture} "
                "ignores; they apply with architecture: transformer"
            )


@dataclass
class TransformerModelConfig:
    """The options of :class:`attnlab.models.transformer.TransformerSeq2Seq` (small by default).

    ``positional``: ``sinusoidal`` | ``learned`` | ``relative`` | ``transformer_xl`` | ``rope`` |
    ``alibi`` | ``none``.
    ``cross_attention``: ``dot`` or an attender name (``location``, ``mix``, ``shift``, …) for every
    head, or a list with one entry per decoder layer (a name, or a list of one name per head);
    ``cross_attention_options``: attender name → its options.
    """

    d_model: int = 128
    heads: int = 4
    encoder_layers: int = 2
    decoder_layers: int = 2
    ff_dim: int = 512
    dropout: float = 0.1
    embedding_dropout: float | None = None
    """The input embeddings' dropout rate instead of ``dropout`` (``null``: the same)."""
    linear_init: Literal["pytorch", "xavier", "csordas2021"] = "pytorch"
    """How the attention and feed-forward layers start: ``nn.Linear``'s own, Xavier-uniform, or as
    Csordás et al. 2021's released code leaves each (:class:`attnlab.models.transformer.
    TransformerSeq2Seq`)."""
    attention_bias: bool = True
    """The attention's query, key, value and output projections have biases (Csordás et al.'s
    have none)."""
    positional: Literal["sinusoidal", "learned", "relative", "transformer_xl", "rope", "alibi", "none"] = (
        "sinusoidal"
    )
    cross_attention: str | list[Any] = "dot"
    cross_attention_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    max_positions: int = 256
    max_relative_distance: int | list[int] | Literal["auto"] = 16
    """Shaw et al.'s clip ``k`` of ``relative`` positions: an int for both stacks, ``[encoder,
    decoder]``, or ``auto``: each stack's longest distance in training (the longest source, the
    longest target with ``<sos>`` and ``decoder_offset``), so that no distance a longer test
    sequence reads keeps an untrained embedding (:func:`resolve_relative_clips`). Other schemes
    read no clip."""
    stop_from_attention: bool = False
    """``p(<eos>)`` from the last decoder layer's attention leaving the words: on a learned start
    position or on the source's last token (its end, e.g. Lookup Tables' ``.``); see
    :mod:`attnlab.models.transformer`."""
    stop_layers: Literal["last", "all", "separate"] = "last"
    """Whose heads that stop is read from: the last decoder layer's, every decoder layer's (a gate
    over all of them), or heads of the stop's own that no output token reads; only with
    ``stop_from_attention``."""
    stop_gate_scale: float = 1.0
    """The stop's gate is ``softmax(stop_gate_scale · w)``: how far one update of Adam moves it
    (:class:`attnlab.models.transformer.TransformerSeq2Seq`); only with ``stop_from_attention``."""
    stop_detached: bool = False
    """The stop reads the heads' attention without training it (its loss trains the gate alone)."""
    stop_head_gradient: float = 1.0
    """The share of the stop's gradient that reaches the heads (1: all; ``stop_detached`` is 0)."""
    stop_ends: Literal["either", "gated"] = "either"
    """``either``: the gate is over heads, each read on both ends of the source; ``gated``: over
    (head, end) pairs, so the model learns which end stops it; only with ``stop_from_attention``."""
    end_marker: bool = False
    """Append a learned end-of-command position to every source, which the stop from the attention
    then reads as the source's end (SCAN, whose commands end in a word)."""
    attender_keys: Literal["memory", "embeddings", "local"] = "memory"
    """What the attender heads' keys are projected from: the encoder's output, the source's token
    embeddings alone, or a window of three of them, so that a content move finds a word by what it
    is (and, ``local``, its neighbours), never by where it is (:mod:`attnlab.models.transformer`)."""

    norm: Literal["pre", "post"] = "pre"
    """Layer normalisation before each sub-layer (with a final one after each stack) or after each
    residual sum (Vaswani et al. 2017; Csordás et al. 2021's code)."""
    source_start: bool = False
    """Put a learned start token before every source (Csordás et al. 2021's encoder ``<sos>``), an
    anchor for relative positions."""
    embedding_init: Literal["scaled", "xavier"] = "scaled"
    """Token embeddings of unit scale (normal, ``d_model ** -0.5``, read times ``sqrt(d_model)``) or
    Xavier-uniform read as they are (Csordás et al. 2021's relative Transformer)."""
    tied_output: bool = False
    """The output layer's weights are the target embeddings (Press & Wolf 2017; Csordás et al.)."""
    start_is_end: bool = False
    """The decoder reads ``<sos>`` with ``<eos>``'s embedding (Csordás et al.'s code has one token
    for both)."""
    decoder_offset: int = 0
    """In training, up to this many extra ``<sos>`` tokens (uniform, per example) before each
    target's decoder input, so the decoder cannot tell from its position where outputs end
    (:mod:`attnlab.models.transformer`); 0: none."""
    decoder_hides_start: bool = False
    """The decoder's self-attention never reads ``<sos>`` from a later step, so under relative
    positions, RoPE, ALiBi and none no step can time itself by that token
    (:mod:`attnlab.models.transformer`); not with ``decoder_offset``."""
    semantic_output: bool = False
    """The logits are a linear function of the words the last decoder layer's cross-attention
    attends (values from the token embeddings: Russin et al. 2019's semantics), not of the residual
    stream (:mod:`attnlab.models.transformer`); needs ``end_marker`` or ``stop_from_attention``."""
    previous_outputs: bool = True
    """The decoder reads each step's previous output token; ``false``: every step reads ``<sos>``,
    so the outputs so far reach it only through what its heads attended (Russin et al. 2019's
    decoder; :mod:`attnlab.models.transformer`)."""
    semantic_embeddings: Literal["shared", "separate"] = "shared"
    """With ``semantic_output``: the values read the encoder's token embeddings (``shared``) or a
    table of their own (``separate``: Russin et al. 2019's two embeddings per word)."""
    semantic_heads: Literal["separate", "shared", "gated"] = "separate"
    """With ``semantic_output``: each head reads its own projection of the words' embeddings
    (``separate``), or every head the same one, their glimpses averaged (``shared``: what a word
    means does not depend on which head reads it; :mod:`attnlab.models.transformer`) or weighted by
    a softmax over the heads from the decoder's state (``gated``: the step chooses whose word it
    says)."""
    peer_words: Literal["none", "source", "target", "both"] = "none"
    """``source``: the encoder reads a source word seen only alone in training (add-jump's "jump")
    as its peers, the words seen alone and with others (needs ``semantic_embeddings: separate``);
    ``target``: the decoder reads such an output token among its inputs that way; ``both``: both
    (:mod:`attnlab.models.transformer`)."""
    peer_dropout: float = 0.0
    """With ``peer_words`` ``target`` or ``both``: in training, each output token among the
    decoder's inputs is read as the peers' mean with this probability."""
    peer_dropout_unit: Literal["token", "peer"] = "token"
    """What ``peer_dropout`` drops: each decoder input token on its own (``token``), or each peer
    output token of a target at all of its positions (``peer``)."""
    target_alone: Literal["output", "command"] = "output"
    """With ``peer_words`` ``target`` or ``both``: which output tokens count as seen alone, every
    whole output (``output``) or only the whole output of a one-word command (``command``)."""
    peers_as_one: bool = False
    """With ``peer_words``: every peer word (not only one seen alone) is read as the peers' mean, in
    training and at test, by the side(s) that read peers: the syntax sees that a word is a peer,
    never which (:mod:`attnlab.models.transformer`; with ``target_alone: command`` the turns stay
    themselves)."""

    decoder_recurrence: Literal["none", "gru", "lstm"] = "none"
    """``gru`` / ``lstm``: a GRU or an LSTM over the decoder's inputs adds a recurrent count of the
    outputs so far to them, which no positional scheme has to extrapolate
    (:mod:`attnlab.models.transformer`)."""
    decoder_counting_heads: int = 0
    """This many of each decoder layer's self-attention heads (its last) sum their values under
    sigmoid weights instead of a softmax's mean, so a step can read how many earlier outputs a head
    selects, at any length (:mod:`attnlab.models.transformer`); 0: none."""
    decoder_recurrence_layer: int = 0
    """The decoder layer before which ``decoder_recurrence`` runs over the residual stream, so that
    it reads the earlier layers' glimpses (``0 … decoder_layers``; 0: over the inputs)."""
    universal: bool = False
    """Each stack applies one layer's weights at every depth (a Universal Transformer without
    adaptive computation time: Dehghani et al. 2019; Csordás et al. 2021's universal variants);
    every decoder layer then needs the same cross-attention heads."""

    def __post_init__(self) -> None:
        stop_options = ("stop_layers", "stop_gate_scale", "stop_detached", "stop_head_gradient", "stop_ends")
        for option in changed_options(self, stop_options):
            if not self.stop_from_attention:
                raise ValueError(
                    f"{option}: {getattr(self, option)!r} is an option of the stop read from the attention; "
                    "it needs stop_from_attention: true"
                )
        head_names = cross_attention_heads(self.cross_attention, self.decoder_layers, self.heads)
        check_attender_keys(self.attender_keys, head_names)
        check_decoder_offset(self.decoder_offset, head_names, self.decoder_hides_start)
        check_semantic_output(
            self.semantic_output,
            end_marker=self.end_marker,
            stop_from_attention=self.stop_from_attention,
            semantic_embeddings=self.semantic_embeddings,
            semantic_heads=self.semantic_heads,
        )
        check_peer_words(
            self.peer_words,
            semantic_embeddings=self.semantic_embeddings,
            tied_output=self.tied_output,
            peer_dropout=self.peer_dropout,
            peer_dropout_unit=self.peer_dropout_unit,
            target_alone=self.target_alone,
            peers_as_one=self.peers_as_one,
        )
        check_cross_attention_options(self.cross_attention_options, head_names)
        check_counting_heads(self.decoder_counting_heads, self.heads)
        check_recurrence_layer(self.decoder_recurrence_layer, self.decoder_recurrence, self.decoder_layers)
        check_universal(self.universal, head_names, self.semantic_output)
        if self.max_relative_distance != "auto":
            relative_clips(self.max_relative_distance)


def describe_transformer(config: TransformerModelConfig) -> str:
    """The Transformer of ``config`` in a few words (in the first line of a run's log)."""
    kind = "universal transformer" if config.universal else "transformer"
    return f"{kind}, positional {config.positional}, cross-attention {config.cross_attention}"


def build_transformer(
    config: TransformerModelConfig, source: Vocabulary, target: Vocabulary
) -> TransformerSeq2Seq:
    """The Transformer of ``config`` for these vocabularies (they must share the pad id)."""
    if source.pad_id != target.pad_id:
        raise ValueError("the source and target vocabularies must share the pad id")
    return TransformerSeq2Seq(
        len(source),
        len(target),
        d_model=config.d_model,
        heads=config.heads,
        encoder_layers=config.encoder_layers,
        decoder_layers=config.decoder_layers,
        ff_dim=config.ff_dim,
        dropout=config.dropout,
        embedding_dropout=config.embedding_dropout,
        linear_init=config.linear_init,
        attention_bias=config.attention_bias,
        positional=config.positional,
        cross_attention=config.cross_attention,
        cross_attention_options=config.cross_attention_options,
        max_positions=config.max_positions,
        max_relative_distance=_built_clips(config.max_relative_distance),
        stop_from_attention=config.stop_from_attention,
        stop_layers=config.stop_layers,
        stop_gate_scale=config.stop_gate_scale,
        stop_detached=config.stop_detached,
        stop_head_gradient=config.stop_head_gradient,
        stop_ends=config.stop_ends,
        end_marker=config.end_marker,
        attender_keys=config.attender_keys,
        norm=config.norm,
        source_start=config.source_start,
        embedding_init=config.embedding_init,
        tied_output=config.tied_output,
        start_is_end=config.start_is_end,
        decoder_offset=config.decoder_offset,
        decoder_hides_start=config.decoder_hides_start,
        semantic_output=config.semantic_output,
        previous_outputs=config.previous_outputs,
        semantic_embeddings=config.semantic_embeddings,
        semantic_heads=config.semantic_heads,
        peer_words=config.peer_words,
        peer_dropout=config.peer_dropout,
        peer_dropout_unit=config.peer_dropout_unit,
        target_alone=config.target_alone,
        peers_as_one=config.peers_as_one,
        decoder_recurrence=config.decoder_recurrence,
        decoder_counting_heads=config.decoder_counting_heads,
        decoder_recurrence_layer=config.decoder_recurrence_layer,
        universal=config.universal,
        pad_id=target.pad_id,
        sos_id=target.sos_id,
        eos_id=target.eos_id,
    )


def _built_clips(max_relative_distance: int | list[int] | str) -> int | tuple[int, int]:
    if isinstance(max_relative_distance, str):  # "auto"
        raise ValueError(
            "max_relative_distance: auto is resolved from the training data before the model is built "
            "(resolve_relative_clips); build the model through its experiment"
        )
    return relative_clips(max_relative_distance)


def resolve_relative_clips(model: ModelConfigT, train: EncodedDataset) -> ModelConfigT:
    """The model config with a Transformer's ``max_relative_distance: auto`` replaced by
    ``[encoder, decoder]``: the longest distance each stack's self-attention reads in training,
    over the longest source (with the positions the model adds: ``end_marker``, the start of
    ``stop_from_attention`` or ``source_start``) and the longest target (``<sos>`` and the target,
    with ``decoder_offset``'s extra ``<sos>``), as
    :meth:`~attnlab.models.transformer.TransformerSeq2Seq.relative_distances` counts them. Every
    distance up to each clip is then trained, and longer test sequences read the clip's embedding
    (docs/results.md, issue 28, session 41). Any other model config is returned as it is."""
    transformer = _auto_clipped(model)
    if transformer is None:
        return model
    added = added_source_positions(
        end_marker=transformer.end_marker,
        stop_from_attention=transformer.stop_from_attention,
        source_start=transformer.source_start,
    )
    longest = longest_relative_distances(
        int(train.source_lengths.max()) + added if len(train) else 0,
        int(train.target_lengths.max()) + transformer.decoder_offset if len(train) else 0,
    )
    return _with_clips(model, transformer, [max(distance, 1) for distance in longest])


def _with_clips_of(expected: ModelConfigT, found: ModelConfigT) -> ModelConfigT:
    """``expected`` with its ``max_relative_distance: auto`` (if any) read as the clips that
    ``found`` (a checkpoint's model config) resolved it to."""
    transformer = _auto_clipped(expected)
    if transformer is None:
        return expected
    return _with_clips(expected, transformer, found.transformer.max_relative_distance)  # type: ignore[attr-defined]


def _auto_clipped(model: Any) -> TransformerModelConfig | None:
    """A model config's Transformer options if their ``max_relative_distance`` is ``auto``."""
    transformer = getattr(model, "transformer", None)
    if isinstance(transformer, TransformerModelConfig) and transformer.max_relative_distance == "auto":
        return transformer
    return None


def _with_clips(model: ModelConfigT, transformer: TransformerModelConfig, clips: list[int]) -> ModelConfigT:
    return replace(model, transformer=replace(transformer, max_relative_distance=clips))  # type: ignore[type-var]


def seq2seq_model_spec(system: str, model: Any, source: Vocabulary, target: Vocabulary) -> dict[str, Any]:
    """A checkpoint's model spec: the system, the model config (a dataclass) and both vocabularies."""
    return {
        "system": system,
        "model": to_dict(model),
        "vocabularies": {"source": source.to_dict(), "target": target.to_dict()},
    }


def seq2seq_from_checkpoint(
    path: Path,
    device: torch.device,
    expected: ModelConfigT | None,
    *,
    system: str,
    description: str,
    config_type: type[ModelConfigT],
    build_model: Callable[[ModelConfigT, Vocabulary, Vocabulary], ModelT],
) -> tuple[ModelT, Vocabulary, Vocabulary]:
    """Rebuild the model a ``system`` checkpoint was written for, in eval mode on ``device``.

    With ``expected`` (a model config), the checkpoint must be for that model. ``description``
    names the system in the error for a checkpoint of another one; ``build_model`` makes the model
    from its config and the source and target vocabularies.

    A checkpoint written before a model option existed reads as having that option's default
    (its spec is read through ``config_type``), so adding an option with a default that keeps the
    old model keeps old checkpoints loadable.
    """
    checkpoint, spec = load_system_checkpoint(path, system, description, None, device)
    model_config = from_dict(config_type, spec["model"], f"{path}: model")
    if expected is not None:
        expected = _with_clips_of(expected, model_config)
        check_model_spec(path, {"model_spec": to_dict(model_config)}, to_dict(expected))
    source = Vocabulary.from_dict(spec["vocabularies"]["source"])
    target = Vocabulary.from_dict(spec["vocabularies"]["target"])
    model = build_model(model_config, source, target)
    normalised = {**checkpoint, "model_spec": {**checkpoint["model_spec"], "model": to_dict(model_config)}}
    check_model_spec(path, normalised, seq2seq_model_spec(system, model_config, source, target))
    load_model_weights(path, model, checkpoint)
    return model.to(device).eval(), source, target


@torch.no_grad()
def decoded_attention_samples(
    model: Any,
    dataset: EncodedDataset,
    device: torch.device,
    max_length: int | None,
    *,
    count: int = ATTENTION_SAMPLES,
    prefix: str = "validation",
) -> dict[str, torch.Tensor]:
    """The greedy decoding's attention on the first ``count`` examples of ``dataset``.

    ``<prefix>_<i>`` → ``[decoded steps (<eos> included), source length]`` weights of example
    ``i`` (plus the columns a model appends to every source, e.g. Syntactic Attention's end
    marker), for the trainer's optional ``attention_samples`` hook. ``model`` is any seq2seq model
    with ``greedy_decode(source, padding_mask, max_length)`` returning ``tokens`` and ``attention``;
    ``max_length=None`` decodes up to ``2·S + 10`` tokens.
    """
    rows = list(range(min(count, len(dataset))))
    if not rows:
        return {}
    batch = collate(dataset, rows).to(device)
    decoded = decode_within_budget(model, batch.source, batch.source_padding_mask, max_length)
    assert decoded.tokens is not None
    samples = {}
    appended = decoded.attention.size(-1) - batch.source.size(1)
    steps_of = decoded_steps(decoded.tokens, model.pad_id)
    for row in rows:
        steps = steps_of[row]
        source_length = int((~batch.source_padding_mask[row]).sum()) + appended
        samples[f"{prefix}_{row}"] = decoded.attention[row, :steps, :source_length]
    return samples


def decoded_cross_attention_maps(
    model: Any, source: torch.Tensor, source_padding_mask: torch.Tensor, decoded: Seq2SeqOutput
) -> tuple[torch.Tensor, list[list[str]]] | None:
    """A Transformer's cross-attention ``[B, layers, heads, T, S]`` of a greedy decoding's steps
    (:meth:`TransformerSeq2Seq.cross_attention_maps` of :meth:`~TransformerSeq2Seq.decoded_input`)
    and its heads' kinds, for ``attnlab plot``'s grid of layers × heads; ``None`` for other models."""
    if not isinstance(model, TransformerSeq2Seq):
        return None
    assert decoded.tokens is not None
    with torch.no_grad():
        maps = model.cross_attention_maps(source, source_padding_mask, model.decoded_input(decoded.tokens))
    return maps, model.head_names


def evaluate_with_predictions(
    evaluation: Evaluation[Any, tuple[Any, Vocabulary, Vocabulary]],
    name: str,
    dataset: EncodedDataset,
    evaluate: Callable[[ExampleOutcomes], dict[str, Any]],
    references: list[str] | None = None,
    ignored_tokens: Collection[str] = (),
) -> dict[str, Any]:
    """The metrics ``evaluate`` computes on test set ``name`` while it records each example's
    outcome, and those outcomes written to ``eval/<name>.predictions.tsv`` (``eval/files/`` for
    given files) for ``attnlab compare``; ``evaluation.loaded`` is the model with its source and
    target vocabularies. The target column holds ``references`` when given (the raw references
    BLEU is computed against), else the targets as the model saw them. ``ignored_tokens`` are left
    out when the wrong outputs are counted by kind
    (:func:`~attnlab.experiments.unit_scores.write_predictions`)."""
    _, source, target = evaluation.loaded
    outcomes = ExampleOutcomes()
    metrics = evaluate(outcomes)
    sources, targets = dataset_texts(dataset, source, target)
    targets = targets if references is None else references
    path = evaluation.run.evaluation_file(name, PREDICTIONS_SUFFIX, data_file=evaluation.data_file)
    write_predictions(path, sources, targets, outcomes, target, ignored_tokens)
    return metrics


def untrained_relative_distances(
    model: TransformerSeq2Seq, train: EncodedDataset, tests: dict[str, EncodedDataset]
) -> list[str]:
    """What a ``relative`` Transformer's test sets read that its training never does: for the
    encoder and for the decoder, the relative distances (up to the stack's clip, its
    ``max_relative_distance``, past which every distance shares the clip's embedding) that the
    test sets' longest sources or targets reach beyond the longest ones in training. Their
    embeddings keep their initialisation (:class:`~attnlab.models.transformer.TransformerSeq2Seq`,
    ``max_relative_distance``). A message per side that has such distances; none for other
    schemes."""
    if model.positional != "relative" or len(train) == 0:
        return []

    def longest(split: EncodedDataset, training: bool) -> tuple[int, int]:
        return model.relative_distances(
            int(split.source_lengths.max()), int(split.target_lengths.max()), training=training
        )

    trained = longest(train, training=True)
    read = {name: longest(test, training=False) for name, test in tests.items() if len(test)}
    messages = []
    for side, side_name in enumerate(("encoder", "decoder")):
        clip = model.max_relative_distance[side]
        reaching = {name: min(distances[side], clip) for name, distances in read.items()}
        beyond = [name for name, reached in reaching.items() if reached > trained[side]]
        if not beyond:
            continue
        first, last = trained[side] + 1, max(reaching[name] for name in beyond)
        untrained = (
            f"the embedding of distance {first} is never trained and keeps its"
            if first == last
            else f"the embeddings of distances {first}–{last} are never trained and keep their"
        )
        messages.append(
            f"model.transformer.max_relative_distance: the {side_name}'s clip {clip}: its "
            f"self-attention reads relative distances up to {last} on the test set(s) "
            f"{', '.join(beyond)} and at most {trained[side]} in training; {untrained} "
            "initialisation (docs/results.md, issue 28, session 40); a clip of at most "
            f"{trained[side]} keeps every distance it reads trained (max_relative_distance: auto "
            "sets each stack's clip to its longest distance in training)"
        )
    return messages


@dataclass
class Seq2SeqData(Generic[SplitT]):
    """A seq2seq training run's data: every split, encoded with the run's vocabularies."""

    encoded: dict[str, SplitT]
    source: Vocabulary
    target: Vocabulary


class Seq2SeqExperiment(
    Experiment[Seq2SeqConfigT, Seq2SeqData[SplitT], tuple[ModelT, Vocabulary, Vocabulary]],
    Generic[Seq2SeqConfigT, SplitT, ModelT],
):
    """What the seq2seq experiments share: the model is built from the model config and both
    vocabularies, which the checkpoint's spec carries (:func:`seq2seq_model_spec`); what
    :meth:`load_model` gives is the model with its source and target vocabularies; right after
    training the test sets are the ones encoded for it."""

    system: ClassVar[str]
    """The checkpoints' ``system``."""
    description: ClassVar[str]
    """How errors name the system's checkpoints."""
    model_config_type: ClassVar[type[Any]]
    """The ``model`` section's dataclass (read back from a checkpoint's spec)."""

    @abstractmethod
    def build_seq2seq(self, model: Any, source: Vocabulary, target: Vocabulary) -> ModelT:
        """The model of config section ``model`` for these vocabularies."""

    @abstractmethod
    def decode(
        self, model: ModelT, source: torch.Tensor, source_padding_mask: torch.Tensor, config: Seq2SeqConfigT
    ) -> Seq2SeqOutput:
        """Greedy decoding of a batch of sources exactly as :meth:`evaluate_set` decodes the test
        sets with ``config``'s evaluation settings (what ``attnlab translate`` runs)."""

    def translate(self, run_dir: str | Path, request: TranslationRequest) -> dict[str, Any]:
        """:func:`attnlab.evaluation.translation.translate` with a trained run's model and
        vocabularies, decoding as its evaluation does (:meth:`decode`)."""
        trained = load_trained(self, run_dir, request.device_name, request.checkpoint, request.overrides)
        model, source, target = trained.loaded
        return translation.translate(
            model,
            source,
            target,
            request.sources,
            lambda batch, padding: self.decode(model, batch, padding, trained.config),
            trained.device,
            origin=request.origin,
            max_length=model.max_source_length if isinstance(model, TransformerSeq2Seq) else None,
            batch_size=trained.config.evaluation.batch_size,
            head_maps=lambda batch, padding, decoded: decoded_cross_attention_maps(
                model, batch, padding, decoded
            ),
        )

    @abstractmethod
    def test_set_names(self, config: Seq2SeqConfigT) -> list[str]:
        """The names of the run's own test sets."""

    @abstractmethod
    def encoded_dataset(self, split: SplitT) -> EncodedDataset:
        """The encoded examples of one of the data's splits."""

    def trained_model_config(self, config: Seq2SeqConfigT, data: Seq2SeqData[SplitT]) -> Any:
        """The ``model`` section the run trains, with what depends on the training data resolved
        (:func:`resolve_relative_clips`): what :meth:`build_model` builds and the checkpoint's
        spec holds."""
        return resolve_relative_clips(config.model, self.encoded_dataset(data.encoded["train"]))

    def build_model(self, config: Seq2SeqConfigT, data: Seq2SeqData[SplitT]) -> ModelT:
        """The model to train, with a warning for each relative-position embedding that the test
        sets read and training never trains (:func:`untrained_relative_distances`)."""
        model_config = self.trained_model_config(config, data)
        model = self.build_seq2seq(model_config, data.source, data.target)
        if isinstance(model, TransformerSeq2Seq):
            transformer = model_config.transformer
            if _auto_clipped(config.model) is not None and transformer.positional == "relative":
                logger.info(
                    "model.transformer.max_relative_distance: auto → %s (encoder, decoder: the longest "
                    "distances in training)",
                    transformer.max_relative_distance,
                )
            tests = {
                name: self.encoded_dataset(data.encoded[name])
                for name in self.test_set_names(config)
                if name in data.encoded
            }
            train = self.encoded_dataset(data.encoded["train"])
            for message in untrained_relative_distances(model, train, tests):
                logger.warning(message)
        return model

    def model_spec(self, config: Seq2SeqConfigT, data: Seq2SeqData[SplitT]) -> dict[str, Any]:
        return seq2seq_model_spec(
            self.system, self.trained_model_config(config, data), data.source, data.target
        )

    def read_model_spec(self, spec: dict[str, Any]) -> dict[str, Any]:
        """The spec with its model config read through :attr:`model_config_type`: options added
        since it was written get their defaults (as :func:`seq2seq_from_checkpoint` reads them). A
        spec that does not parse (another system's, a newer version's) is returned as it is, for
        the comparison to reject."""
        model = spec.get("model")
        if not isinstance(model, dict):
            return spec
        try:
            return {**spec, "model": to_dict(from_dict(self.model_config_type, model, "checkpoint: model"))}
        except ConfigError:
            return spec

    def load_model(
        self, path: Path, device: torch.device, config: Seq2SeqConfigT
    ) -> tuple[ModelT, Vocabulary, Vocabulary]:
        return self.model_from_checkpoint(path, device, config.model)

    def model_from_checkpoint(
        self, path: Path, device: torch.device, expected: Any = None
    ) -> tuple[ModelT, Vocabulary, Vocabulary]:
        """:func:`seq2seq_from_checkpoint` for this system; with ``expected`` (a model config),
        the checkpoint must be of that model."""
        return seq2seq_from_checkpoint(
            path,
            device,
            expected,
            system=self.system,
            description=self.description,
            config_type=self.model_config_type,
            build_model=self.build_seq2seq,
        )

    def trained_test_sets(
        self,
        config: Seq2SeqConfigT,
        data: Seq2SeqData[SplitT],
        loaded: tuple[ModelT, Vocabulary, Vocabulary],
    ) -> dict[str, Any]:
        return {name: data.encoded[name] for name in self.test_set_names(config)}
