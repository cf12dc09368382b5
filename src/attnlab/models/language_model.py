"""Word-level LSTM language models with short attention spans (Daniluk et al. 2017, §2).

One class, :class:`LanguageModel`, whose ``variant`` picks the output head on top of a fused
``nn.LSTM`` (output ``h_t``, hidden size ``k``):

* ``lstm``: ``y_t = softmax(W* h_t + b)`` (eq. 5 with ``h*_t = h_t``);
* ``attention`` (§2.1, eqs. 1–5): attention over the previous ``L`` outputs, query ``h_t``,
  ``h*_t = tanh(W^r r_t + W^x h_t)``;
* ``key_value`` (§2.2, eqs. 6–10): ``h_t = [k_t ; v_t]``, keys ``k``, values ``v``,
  ``h*_t = tanh(W^r r_t + W^x v_t)``;
* ``key_value_predict`` (§2.3, eqs. 11–12): ``h_t = [k_t ; v_t ; p_t]``,
  ``h*_t = tanh(W^r r_t + W^x p_t)``;
* ``ngram`` (§2.4, eq. 13): ``h_t`` split into ``N−1`` slices,
  ``h*_t = tanh(W^N [h^1_t ; h^2_{t-1} ; … ; h^{N-1}_{t-N+2}])``.

The split parts have ``k / parts`` features each (the paper: "the hidden dimension … needs to be a
multiple of three"), and ``h*_t`` has that size too, so ``W*`` is ``|V| × k / parts``. ``W^r`` and
``W^x`` (no biases, as written in eq. 4) are stored as one ``Linear`` on ``[r_t ; x_t]``.

Training procedure (§4.1): parameters are drawn from U(−0.1, 0.1), the LSTM's forget-gate bias
is 1 (``bias_ih`` = 1, ``bias_hh`` = 0 on the forget gate). The memory and the LSTM state carry
across BPTT segments and are reset where a document starts (``resets``). The attention reads only
past outputs and is not fed back into the recurrence, so the LSTM runs fused over the segment
(split only at columns where some stream starts a document) and the head over all steps at once.

:func:`hidden_dim_for_budget` picks the hidden size that gives a parameter budget, for comparisons
at equal size (Figure 2c: ≈ 23.9M parameters without the word embeddings).

:meth:`LanguageModel.generate` samples text word by word (temperature, top-k, greedy), carrying
the state and the memory window, and returns the attention of every generated step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import nn

from attnlab.attention.memory_window import NGramConcatenation, SlidingWindowAttention, check_step_mask
from attnlab.checks import did_you_mean

Variant = Literal["lstm", "attention", "key_value", "key_value_predict", "ngram"]
VARIANTS: tuple[str, ...] = ("lstm", "attention", "key_value", "key_value_predict", "ngram")
ATTENTIVE: tuple[str, ...] = ("attention", "key_value", "key_value_predict")
INIT_RANGE = 0.1
FORGET_BIAS = 1.0

ModelState = dict[str, Any]


def output_parts(variant: str, ngram: int = 4) -> int:
    """How many equal parts the LSTM output is split into (the hidden size must be a multiple)."""
    if variant not in VARIANTS:
        raise ValueError(
            f"unknown variant {variant!r}; choose one of {list(VARIANTS)}{did_you_mean(variant, VARIANTS)}"
        )
    return {"lstm": 1, "attention": 1, "key_value": 2, "key_value_predict": 3}.get(variant, ngram - 1)


@dataclass
class LanguageModelOutput:
    """Logits ``[batch, T, vocab]``, the state to carry to the next segment, and the attention
    weights ``[batch, T, window]`` of the attentive variants (``None`` otherwise)."""

    logits: torch.Tensor
    state: ModelState
    attention: torch.Tensor | None = None


@dataclass
class Generation:
    """Sampled token ids ``[batch, steps]``, and the attention weights ``[batch, steps, window]``
    with which each was predicted (attentive variants; ``None`` otherwise)."""

    tokens: torch.Tensor
    attention: torch.Tensor | None


class LanguageModel(nn.Module):
    """LSTM language model with an optional short-span memory head (see the module docstring).

    Args:
        vocab_size: output classes (the ``<pad>`` id is never a target).
        variant: ``lstm``, ``attention``, ``key_value``, ``key_value_predict`` or ``ngram``.
        embedding_dim: word embedding size ``w`` (300 in the paper).
        hidden_dim: LSTM size ``k``; a multiple of :func:`output_parts`.
        window: ``L``, the attention window of the attentive variants (1, 5, 10, 15 in Fig. 2a).
        ngram: ``N`` of the N-gram RNN (2–5 in Fig. 2b).
        dropout: dropout on the embeddings and on ``h*_t`` (0: the paper mentions none).
        init_range: parameters start in U(−init_range, init_range) (0.1 in §4.1). The paper's
            layers have 300+ inputs; tiny test models learn faster with a wider range.
    """

    def __init__(
        self,
        vocab_size: int,
        *,
        variant: Variant = "lstm",
        embedding_dim: int = 300,
        hidden_dim: int = 300,
        window: int = 10,
        ngram: int = 4,
        dropout: float = 0.0,
        init_range: float = INIT_RANGE,
    ) -> None:
        super().__init__()
        parts = output_parts(variant, ngram)
        _check_options(vocab_size, variant, embedding_dim, hidden_dim, window, ngram, dropout, parts)
        if init_range <= 0:
            raise ValueError(f"init_range must be > 0, got {init_range}")
        self.init_range = init_range
        self.variant = variant
        self.vocab_size = vocab_size
        self.hidden_dim = hidden_dim
        self.part_dim = hidden_dim // parts
        self.window = window if variant in ATTENTIVE else 0
        self.ngram = ngram if variant == "ngram" else 0
        self.embedding = nn.Embedding(vocab_size, embedding_dim)
        self.lstm = nn.LSTM(embedding_dim, hidden_dim, batch_first=True)
        self.dropout = nn.Dropout(dropout)
        self.attention: SlidingWindowAttention | None = None
        self.concatenation: NGramConcatenation | None = None
        self.combine: nn.Linear | None = None
        if variant in ATTENTIVE:
            self.attention = SlidingWindowAttention(
                self.part_dim, self.part_dim, self.part_dim, window=window
            )
            self.combine = nn.Linear(2 * self.part_dim, self.part_dim, bias=False)  # [W^r W^x], eq. 4
        elif variant == "ngram":
            self.concatenation = NGramConcatenation(self.part_dim, ngram)
            self.combine = nn.Linear(hidden_dim, self.part_dim, bias=False)  # W^N, eq. 13
        self.decoder = nn.Linear(self.part_dim, vocab_size)  # W*, b, eq. 5
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """U(−0.1, 0.1) everywhere (``init_range``), forget-gate bias 1 (Daniluk et al. §4.1)."""
        for parameter in self.parameters():
            nn.init.uniform_(parameter, -self.init_range, self.init_range)
        hidden = self.hidden_dim
        with torch.no_grad():  # PyTorch gate order: input, forget, cell, output
            self.lstm.get_parameter("bias_ih_l0")[hidden : 2 * hidden].fill_(FORGET_BIAS)
            self.lstm.get_parameter("bias_hh_l0")[hidden : 2 * hidden].zero_()

    # ---- state --------------------------------------------------------------------------------

    def initial_state(self, batch: int, device: torch.device | None = None) -> ModelState:
        """Zero LSTM state and an empty memory."""
        dtype = self.decoder.weight.dtype
        device = device or self.decoder.weight.device
        zeros = torch.zeros(1, batch, self.hidden_dim, device=device, dtype=dtype)
        state: ModelState = {"h": zeros, "c": zeros.clone()}
        if self.attention is not None:
            state["memory"] = self.attention.initial_state(batch, device, dtype)
        if self.concatenation is not None:
            state["memory"] = self.concatenation.initial_state(batch, device, dtype)
        return state

    @staticmethod
    def detach_state(state: ModelState) -> ModelState:
        """The state cut from the graph (truncated BPTT)."""
        return _map_tensors(state, lambda tensor: tensor.detach())

    @staticmethod
    def move_state(state: ModelState, device: torch.device) -> ModelState:
        """The state's tensors on ``device`` (a state read from a checkpoint)."""
        return _map_tensors(state, lambda tensor: tensor.to(device))

    def repeat_state(self, state: ModelState, times: int) -> ModelState:
        """Each batch row repeated ``times`` times (row ``b`` becomes rows ``b·times … (b+1)·times−1``)."""
        result = {"h": state["h"].repeat_interleave(times, 1), "c": state["c"].repeat_interleave(times, 1)}
        if "memory" in state:
            result["memory"] = _map_tensors(state["memory"], lambda t: t.repeat_interleave(times, 0))
        return result

    # ---- forward ------------------------------------------------------------------------------

    def forward(
        self,
        inputs: torch.Tensor,
        resets: torch.Tensor | None = None,
        state: ModelState | None = None,
        *,
        padding_mask: torch.Tensor | None = None,
    ) -> LanguageModelOutput:
        """Run a segment: ``inputs`` ``[batch, T]`` token ids, ``resets`` bool ``[batch, T]`` (True
        where a document starts), ``padding_mask`` bool ``[batch, T]`` (True = padded step, never
        attended to). ``state=None`` starts from :meth:`initial_state`."""
        if inputs.dim() != 2:
            raise ValueError(f"inputs must be [batch, T] token ids, got {tuple(inputs.shape)}")
        steps = (inputs.size(0), inputs.size(1))
        check_step_mask(type(self).__name__, "resets", resets, steps)  # before the LSTM reads them
        check_step_mask(type(self).__name__, "padding_mask", padding_mask, steps)
        if state is None:
            state = self.initial_state(inputs.size(0), inputs.device)
        elif state["h"].shape != (1, inputs.size(0), self.hidden_dim):
            raise ValueError(
                f"LanguageModel: state is for a batch of {state['h'].size(1)} rows "
                f"(h {tuple(state['h'].shape)}), inputs are {inputs.size(0)} rows: give state=None "
                "or the state of this batch's previous segment"
            )
        embedded = self.dropout(self.embedding(inputs))
        outputs, h, c = self._run_lstm(embedded, resets, state["h"], state["c"])
        new_state: ModelState = {"h": h, "c": c}
        features, attention = self._head(outputs, resets, padding_mask, state, new_state)
        logits = self.decoder(self.dropout(features))
        return LanguageModelOutput(logits, new_state, attention)

    @torch.no_grad()
    def generate(
        self,
        prompt: torch.Tensor,
        steps: int,
        *,
        temperature: float = 1.0,
        top_k: int | None = None,
        banned: tuple[int, ...] = (),
        generator: torch.Generator | None = None,
    ) -> Generation:
        """Sample ``steps`` tokens after each row of ``prompt`` (``[batch, P]`` ids, ``P >= 1``; its
        first token starts a document, as ``<eos>`` does in training), feeding each one back in.

        ``temperature`` divides the logits (0: always the most probable token); ``top_k`` samples
        among the ``k`` most probable tokens only; ``banned`` ids (e.g. ``<pad>``) are never drawn.
        Call ``model.eval()`` first to switch dropout off.
        """
        _check_sampling(prompt, steps, temperature, top_k)
        resets = torch.zeros_like(prompt, dtype=torch.bool)
        resets[:, 0] = True
        output = self(prompt, resets)
        tokens, attention = [], []
        for step in range(steps):
            tokens.append(sample_next_token(output.logits[:, -1], temperature, top_k, banned, generator))
            if output.attention is not None:
                attention.append(output.attention[:, -1])
            if step + 1 < steps:
                output = self(tokens[-1].unsqueeze(1), None, output.state)
        return Generation(torch.stack(tokens, 1), torch.stack(attention, 1) if attention else None)

    def _run_lstm(
        self, embedded: torch.Tensor, resets: torch.Tensor | None, h: torch.Tensor, c: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The fused LSTM over the segment, split only at columns where some row resets."""
        if resets is None:
            outputs, (h, c) = self.lstm(embedded, (h, c))
            return outputs, h, c
        steps = embedded.size(1)
        columns = resets.any(0).nonzero().flatten().tolist()
        bounds = sorted({0, *columns, steps})
        pieces = []
        for start, end in zip(bounds[:-1], bounds[1:]):
            keep = (~resets[:, start]).to(h.dtype).view(1, -1, 1)
            h, c = h * keep, c * keep
            piece, (h, c) = self.lstm(embedded[:, start:end], (h, c))
            pieces.append(piece)
        return (pieces[0] if len(pieces) == 1 else torch.cat(pieces, 1)), h, c

    def _head(
        self,
        outputs: torch.Tensor,
        resets: torch.Tensor | None,
        padding_mask: torch.Tensor | None,
        state: ModelState,
        new_state: ModelState,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``h*_t`` for every step (eqs. 4, 10, 12, 13) and the attention weights."""
        if self.variant == "lstm":
            return outputs, None
        if self.concatenation is not None:
            concatenated, new_state["memory"] = self.concatenation(
                outputs, state["memory"], resets=resets, key_padding_mask=padding_mask
            )
            return torch.tanh(self.combine(concatenated)), None  # type: ignore[misc]
        d = self.part_dim
        if self.variant == "attention":
            query = keys = values = own = outputs  # eqs. 1-4
        elif self.variant == "key_value":
            query = keys = outputs[..., :d]  # eq. 6
            values = own = outputs[..., d:]
        else:
            query = keys = outputs[..., :d]  # eq. 11
            values, own = outputs[..., d : 2 * d], outputs[..., 2 * d :]
        result = self.attention(  # type: ignore[misc]
            query, keys, values, padding_mask, state["memory"], resets=resets
        )
        new_state["memory"] = result.state
        return torch.tanh(self.combine(torch.cat([result.glimpse, own], -1))), result.weights  # type: ignore[misc]


def _check_options(
    vocab_size: int,
    variant: str,
    embedding_dim: int,
    hidden_dim: int,
    window: int,
    ngram: int,
    dropout: float,
    parts: int,
) -> None:
    if vocab_size < 2 or embedding_dim < 1 or hidden_dim < 1:
        raise ValueError(
            f"vocab_size >= 2, embedding_dim >= 1 and hidden_dim >= 1 required, got "
            f"{vocab_size}, {embedding_dim}, {hidden_dim}"
        )
    if variant == "ngram" and ngram < 2:
        raise ValueError(f"ngram (N of the N-gram RNN) must be >= 2, got {ngram}")
    if hidden_dim % parts:
        raise ValueError(
            f"hidden_dim {hidden_dim} must be a multiple of {parts} for variant {variant!r} "
            "(the output is split into equal parts)"
        )
    if variant in ATTENTIVE and window < 1:
        raise ValueError(f"window (L) must be >= 1, got {window}")
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {dropout}")


def sample_next_token(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    banned: tuple[int, ...] = (),
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """One token id per row of ``logits`` ``[batch, vocab]`` (see :meth:`LanguageModel.generate`)."""
    logits = logits.float().clone()
    if banned:
        logits[:, list(banned)] = -torch.inf
    if temperature == 0 or top_k == 1:
        return logits.argmax(-1)
    if top_k is not None and top_k < logits.size(-1):
        threshold = logits.topk(top_k, -1).values[:, -1:]
        logits = logits.masked_fill(logits < threshold, -torch.inf)
    probabilities = torch.softmax(logits / temperature, -1)
    return torch.multinomial(probabilities, 1, generator=generator).squeeze(1)


def _check_sampling(prompt: torch.Tensor, steps: int, temperature: float, top_k: int | None) -> None:
    if prompt.dim() != 2 or prompt.size(1) < 1:
        raise ValueError(f"prompt must be [batch, P] token ids with P >= 1, got {tuple(prompt.shape)}")
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    if not 0 <= temperature < math.inf:
        raise ValueError(f"temperature must be a finite number >= 0 (0: greedy), got {temperature}")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}")


def _map_tensors(state: dict[str, Any], function: Any) -> dict[str, Any]:
    return {
        key: function(value)
        if isinstance(value, torch.Tensor)
        else (_map_tensors(value, function) if isinstance(value, dict) else value)
        for key, value in state.items()
    }


# --------------------------------------------------------------------------------------------
# Parameter counts.


def count_parameters(model: nn.Module, *, include_embedding: bool = False) -> int:
    """Trainable parameters; without the input word embeddings by default (the paper's θ_M)."""
    total = sum(parameter.numel() for parameter in model.parameters())
    if not include_embedding and isinstance(model, LanguageModel):
        total -= model.embedding.weight.numel()
    return total


def model_summary(model: LanguageModel) -> dict[str, int]:
    """The LSTM size, the output parts and the parameter count without the word embeddings."""
    parts = output_parts(model.variant, model.ngram or 4)
    return {
        "hidden_dim": model.hidden_dim,
        "parts": parts,
        "parameters_without_embeddings": count_parameters(model),
    }


def parameter_count(vocab_size: int, *, include_embedding: bool = False, **options: Any) -> int:
    """Parameters of ``LanguageModel(vocab_size, **options)``, counted on the meta device (no memory)."""
    with torch.device("meta"):
        model = LanguageModel(vocab_size, **options)
    return count_parameters(model, include_embedding=include_embedding)


def hidden_dim_for_budget(
    budget: int,
    vocab_size: int,
    *,
    variant: Variant = "lstm",
    ngram: int = 4,
    max_hidden: int = 1 << 14,
    **options: Any,
) -> int:
    """The hidden size (a multiple of the variant's parts) whose parameter count without the word
    embeddings is closest to ``budget`` (ties: the smaller)."""
    parts = output_parts(variant, ngram)

    def count(units: int) -> int:
        return parameter_count(vocab_size, variant=variant, ngram=ngram, hidden_dim=units * parts, **options)

    low, high = 1, max(1, max_hidden // parts)
    if count(low) >= budget:
        return parts
    while low + 1 < high:  # invariant: count(low) < budget, count(high) >= budget (or high at max)
        middle = (low + high) // 2
        if count(middle) < budget:
            low = middle
        else:
            high = middle
    best = min((low, high), key=lambda units: (abs(count(units) - budget), units))
    return best * parts
