"""The Shift Attender: attention that moves the previous attention by whole words (issue 6).

A location attention built for extrapolation. At each step the attention is one of a few
*moves* applied to the previous attention, or a content attention, chosen from the query::

    candidates_t = [ c_t,                      "content":  content attention (Dubois eq. 2-3)
                     alpha_{t-1},              "stay"
                     shift(alpha_{t-1}, +1),   "forward":  every weight one word to the right
                     shift(alpha_{t-1}, -1),   "backward": every weight one word to the left
                     onehot(first word),       "start"
                     onehot(last word) ]       "end"
    pi_t    = choose(W_2 ReLU(W_1 q_t))        one-hot of a move: sampled (Gumbel) in training,
                                               the best in evaluation; straight-through gradient
    alpha_t = sum_k pi_tk candidates_tk

A shift saturates at the ends of the source: weight pushed past the last (first) word stays on
it. ``alpha_{-1}`` is the one-hot of the first word.

Why it extrapolates: the Location Attender (Dubois et al. 2020, §5.1) places a Gaussian at a
relative position ``mu`` built from gated reference points, so reading "the previous word" is a
learned sum that must come out at exactly ``-1 / (n - 1)`` for every length ``n``, and narrow
Gaussians give the gates no gradient toward words far from where they sit (issue 6 found seeds
that never learn Reversed Lookup Tables for this reason). Here "the previous word" is a move
that is exact at every length and position, and every move is scored by what its candidate
attention would read, so the choice gets a useful gradient wherever the attention is. The idea
of a location attention restricted to steps of one word is that of the OneStep attention of Ray
Chowdhury & Caragea (2023, "Monotonic Location Attention for Length Generalization", ICML);
this attender is our own formulation of it as a choice among moves of the previous attention.

Option ``moves`` may also name *stride moves* (issue 26 part 2), ``forward<k>`` / ``backward<k>`` for
``k >= 2`` (e.g. ``"forward2"``): every weight ``k`` words to the right (left), saturating like
the one-word shifts. Dubois et al. (2020)'s Intermediate-noise Lookup Tables put a random table
between every two real ones (``000 n1 t1 n2 t2 .``, gold attention ``0 2 4 5``); with one-word
steps only, the content move must find every real table and cannot tell it from a noise table,
whereas ``forward2`` is an exact route at every length.

Option ``moves`` may also name ``"last_match"`` (issue 26 part 2): the *last* word that matches
the query, a stick-breaking attention taken from the right end of the source::

    m_s     = sigmoid(beta cos(W_m q_t, k_s) + b)          how well word s matches
    w_s     ∝ m_s prod_{s' > s} (1 - m_{s'})               the last match wins

Dubois et al. (2020)'s Noisy-multi Lookup Tables put noise before the tables that may itself
hold ``!``, and the tables start after the *last* ``!``: every word after a ``!`` matches a
content query equally (its key is a local window), and only the order tells the right one. No
count is involved, so it is the same at every length. (Stick-breaking attention over positions is
also that of Tan et al. 2024; here it is one move among the others.)

Option ``content_strength`` (issue 26) bounds the content move's scores (cosine similarity times
a fixed strength, Graves et al. 2014): with unbounded scores, a content attention that settles on
a wrong word keeps no gradient toward the right one, which is how some training seeds leave every
Noisy-start example of one input value failing (docs/results.md).

Option ``content_steps`` (issue 26 part 2) is an inductive bias, stated as one: the content-type
moves (``content``, ``last_match``) are offered only at the first ``content_steps`` decoder steps
(their logits are masked at every later step), so every later step must be a move of the previous
attention. In all five of Dubois et al. (2020)'s Lookup-table variants (Long, Reversed, Noisy
single, Noisy multi, Intermediate noise) the only step that needs to *find* a word is the jump to
where the input or the tables start (decoder step 0 on Reversed, step 1 on the Noisy variants);
every later step is an exact one- or two-word move at any length. A content move left available
at later steps can instead fit the training lengths by a content walk (finding "the word before
the one just read" by its key), which does not extrapolate (docs/results.md, session 15). The
choice ``content_steps=2`` covers the jumps of all five variants; it is a prior about these
tasks, not learnt.

Option ``content_once`` is the same bias in another form: a content-type move may be taken at
most once per sequence (after the first, their logits are masked for the rest of the decoding).
With ``content_steps=2`` alone, Reversed Lookup Tables (whose jump is at step 0, to the input
word before ``.``) can still take ``content`` at step 1, and measured runs learn neither that nor
``backward`` (docs/results.md, session 15 continued); with ``content_once`` the step after the
jump must be a move of it.

Option ``shared_match_query`` (issue 26 part 2, session 16) makes ``last_match`` score words with
the content move's query map (``m_s = sigmoid(beta cos(W q, k_s) + b)``, ``W`` the content
attender's ``query_layer``), so that the two content-type moves share what "matching" means and
differ only in which matching word they take (all of them by a softmax, or the last one). Where
either move can make the jump — Reversed Lookup Tables at decoder step 0, where the query is the
same for every sequence — the sampled choice alternates between them; with separate maps each
trains the keys toward its own direction, and a measured run (Reversed, training seed 4) kept both
attentions at about 0.6 on the right word for 10 epochs and never fit. With one map a gradient
through either move sharpens both (docs/results.md, session 16).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from attnlab.attention.base import (
    Attender,
    AttentionOutput,
    AttentionState,
    construct,
    masked_softmax,
    prefixed_state,
    unprefixed_state,
    weighted_sum,
)
from attnlab.attention.content import (
    CONTENT_ATTENDERS,
    MultiplicativeAttender,
    ScoringAttender,
    advance_state,
    check_positive,
)
from attnlab.attention.location import straight_through_one_hot
from attnlab.attention.positional import source_positions
from attnlab.checks import check_choice, check_int

__all__ = [
    "CONTENT_MOVES",
    "MOVES",
    "ShiftAttender",
    "attend_heads",
    "can_attend_together",
    "heads_initial_state",
    "move_stride",
    "shift_targets",
]

MOVES = ("content", "stay", "forward", "backward", "start", "end")
"""The default moves; ``moves`` may also name ``"last_match"`` and stride moves ``forward<k>`` /
``backward<k>``."""
EXTRA_MOVES = ("last_match",)
CONTENT_MOVES = ("content", "last_match")
"""The moves that find a word by its key (restricted by the option ``content_steps``)."""
LAST_MATCH_STRENGTH = 5.0
"""``beta`` of the ``last_match`` move when ``content_strength`` is not set."""
_STRIDE_MOVE = re.compile(r"(forward|backward)([1-9][0-9]*)?")
CHOICES = ("softmax", "straight_through", "gumbel")


def shift_targets(key_padding_mask: torch.Tensor | None, like: torch.Tensor, offset: int) -> torch.Tensor:
    """For each key, the index of the real key ``offset`` words after it, saturating at the ends.

    ``like`` is any ``[batch, source_len, ...]`` tensor (for shape and device). Returns a long
    tensor ``[batch, source_len]``; padded keys map to themselves (they hold no weight). Works
    for any padding layout: positions are ranks among the real keys.
    """
    batch, source_len = like.shape[:2]
    ranks = source_positions(like, key_padding_mask).long()  # [B, S], padding -> 0
    real = _real_keys(ranks, key_padding_mask)
    lengths = real.sum(dim=1, keepdim=True)
    indices = torch.arange(source_len, device=like.device).expand(batch, source_len)
    # index_of_rank[b, r]: the tensor index of the real key of rank r (one spare column for padding)
    index_of_rank = torch.zeros(batch, source_len + 1, dtype=torch.long, device=like.device)
    index_of_rank.scatter_(1, torch.where(real, ranks, source_len), indices)
    wanted = torch.minimum((ranks + offset).clamp_min(0), lengths - 1)
    return torch.where(real, index_of_rank.gather(1, wanted), indices)


def move_stride(move: str) -> int | None:
    """The signed word offset of a shift move (``"forward"`` +1, ``"backward3"`` -3), else ``None``.

    Raises ``ValueError`` for a stride below 2 written out (``"forward1"``: write ``"forward"``).
    """
    match = _STRIDE_MOVE.fullmatch(move)
    if match is None:
        return None
    stride = 1 if match.group(2) is None else int(match.group(2))
    if match.group(2) is not None and stride < 2:
        raise ValueError(
            f"move {move!r}: a written-out stride must be at least 2 (one word is {match.group(1)!r})"
        )
    return stride if match.group(1) == "forward" else -stride


def _real_keys(ranks: torch.Tensor, key_padding_mask: torch.Tensor | None) -> torch.Tensor:
    """``True`` at the real (unpadded) keys, shaped like ``ranks`` ``[batch, source_len]``."""
    return torch.ones_like(ranks, dtype=torch.bool) if key_padding_mask is None else ~key_padding_mask


def _cosine(queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """Cosine of every query ``[batch, steps, dim]`` with every key ``[batch, source_len, dim]``."""
    return torch.bmm(F.normalize(queries, dim=-1), F.normalize(keys, dim=-1).transpose(1, 2))


class ShiftAttender(Attender):
    """Shift Attender: the attention is a chosen move of the previous attention (module docstring).

    Layers: ``content`` (a content attender, for the ``"content"`` move), ``move_hidden``
    (``query_dim -> hidden_dim``) and ``move_layer`` (``hidden_dim -> len(moves)``), whose outputs
    are the logits of the moves in the order of ``moves``.

    State (flat dict; every tensor is ``[batch, ...]``): ``"step"``, ``"source_lengths"`` (the
    base state); ``"positions"`` ``[batch, source_len]`` (each key's rank among the real keys, 0 on
    padding; computed once per source); ``"previous_attention"`` ``[batch, source_len]``
    (``alpha_{t-1}``, initially the one-hot of the first word); ``"forward_targets"``,
    ``"backward_targets"`` and ``"<move>_targets"`` for each stride move (long
    ``[batch, source_len]``, see :func:`shift_targets`); ``"start"``,
    ``"end"`` (one-hots of the first and last real word, ``[batch, source_len]``);
    ``"linear_maps"`` ``[batch, source_len, moves * source_len]`` (``stay`` and the shifts as
    matrices, :meth:`_linear_maps`); and the content attender's own state under ``"content.<key>"``.

    Variables (each ``[batch, steps]`` unless said): ``"move_<name>"`` for every move (its weight
    ``pi_t``), ``"position"`` (the mean word index of ``alpha_t``, in words from the first),
    ``"content_attention"`` and (with that move) ``"last_match_attention"``
    ``[batch, steps, source_len]``.

    Options:
        moves: the moves to choose from, in any order (default :data:`MOVES`): any of
            :data:`MOVES`, and stride moves ``"forward<k>"`` / ``"backward<k>"`` (``k >= 2``):
            every weight ``k`` words to the right (left), saturating at the ends like ``forward``.
            ``"forward2"`` gives an exact route through Dubois et al. (2020)'s Intermediate-noise
            Lookup Tables, where a noise table sits between every two real ones (module docstring;
            docs/results.md, session 15). ``"last_match"``: the last word that matches the query
            (module docstring; its own query map ``last_match_query`` and match bias
            ``last_match_bias``, strength ``content_strength`` or 5), for Noisy-multi Lookup
            Tables. Default: neither.
        choice: how the moves' logits become weights ``pi_t``.
            ``"gumbel"`` (default): in training, one move sampled by the straight-through
            Gumbel-softmax (Jang et al. 2017; Gumbel noise added to the logits, the one-hot of the
            argmax in the forward pass, the softmax's gradient in the backward pass); in
            evaluation, the move with the largest logit. The sampling explores moves other than
            the current best, which is what lets every seed find the Reversed task's moves
            (docs/results.md). ``"straight_through"``: always the largest logit, exactly, with
            the softmax's gradient (Bengio et al. 2013). ``"softmax"``: a convex combination of
            the moves (fits the training lengths with blurred attention; does not extrapolate).
        hidden_dim: width of the move chooser's hidden layer (default 64).
        content: the content attender, ``"additive"``, ``"multiplicative"`` (default) or
            ``"scaled_dot"``.
        content_options: keyword options of the content attender.
        content_strength: if set (a positive float ``beta``), the content scores are
            ``beta * cos(W q, k)`` (multiplicative content) or ``beta * cos(q, k)`` (scaled dot):
            the content addressing of Graves et al. (2014, Neural Turing Machines) with a fixed key
            strength. The scores then lie in ``[-beta, beta]``, so every word keeps at least
            ``exp(-2 beta)`` times the largest weight, and the gradient does not vanish with the
            scores' size. Without it the dot-product scores grow without limit and a content
            attention that settles on a wrong word (e.g. at the first step after the input, where
            the stateless decoder's query depends on the input value only) has weights of 1e-20
            elsewhere and no gradient toward the right word (issue 26, docs/results.md). Default
            ``None``: the content attender's own scores. Not with ``content="additive"`` (whose
            scores are already bounded by its output layer).
        content_steps: if set (an int ``n >= 1``), the content-type moves (:data:`CONTENT_MOVES`:
            ``"content"``, ``"last_match"``) can be chosen only at decoder steps ``0 … n-1``; at
            every later step their logits are ``-inf`` (weight 0, no gradient through them), so
            the attention is a move of the previous one (module docstring: an inductive bias for
            the Lookup-table tasks, where only the first jump needs to find a word). Needs at
            least one content-type and one other move. Default ``None``: every move at every step.
        content_once: if true, a content-type move can be taken at most once per sequence: once
            the chosen move (the argmax of ``pi_t``) has been ``"content"`` or ``"last_match"``,
            their logits are ``-inf`` at every later step (state ``"content_used"``, ``[batch]``
            bool). Same requirements on ``moves`` as ``content_steps``; the two combine. Default
            false.
        shared_match_query: if true, ``"last_match"`` compares the keys with the content move's
            query map (``content.query_layer`` for multiplicative content, the query itself for
            scaled_dot) instead of its own ``last_match_query`` (which is then not created), so
            both content-type moves train one notion of a match (module docstring). Needs the
            ``"content"`` and ``"last_match"`` moves and multiplicative or scaled_dot content.
            Default false.
    """

    stateful = True

    def __init__(
        self,
        query_dim: int,
        key_dim: int,
        value_dim: int | None = None,
        *,
        moves: tuple[str, ...] | list[str] = MOVES,
        choice: str = "gumbel",
        hidden_dim: int = 64,
        content: str = "multiplicative",
        content_options: dict[str, Any] | None = None,
        content_strength: float | None = None,
        content_steps: int | None = None,
        content_once: bool = False,
        shared_match_query: bool = False,
    ) -> None:
        super().__init__(query_dim, key_dim, value_dim)
        name = type(self).__name__
        if isinstance(moves, str):  # tuple("forward") would be its letters
            raise ValueError(f"{name}: option moves must be a list of moves, got the string {moves!r}")
        moves = tuple(moves)
        if not moves:
            raise ValueError(f"{name}: option moves must name at least one of {list(MOVES)}")
        for move in moves:
            try:
                stride = move_stride(move)
            except ValueError as error:
                raise ValueError(f"{name}: option moves: {error}") from None
            if stride is None and move not in MOVES + EXTRA_MOVES:
                raise ValueError(
                    f"{name}: option moves must name moves among {sorted(MOVES + EXTRA_MOVES)} or "
                    f"stride moves forward<k> / backward<k> (k >= 2), got {move!r}"
                )
        if len(set(moves)) != len(moves):
            raise ValueError(f"{name}: option moves names a move twice: {list(moves)}")
        check_choice("choice", choice, CHOICES, owner=name)
        check_choice("content", content, CONTENT_ATTENDERS, owner=name)
        check_positive(name, hidden_dim=hidden_dim)
        if content_strength is not None:
            check_positive(name, content_strength=content_strength)
            if "content" not in moves:
                raise ValueError(f"{name}: option content_strength needs the 'content' move")
            if content == "additive":
                raise ValueError(
                    f"{name}: option content_strength needs multiplicative or scaled_dot content"
                )
        if content_steps is not None:
            check_int("content_steps", content_steps, owner=name)
        if not isinstance(content_once, bool):
            raise ValueError(f"{name}: option content_once must be true or false, got {content_once!r}")
        for option, value in (("content_steps", content_steps is not None), ("content_once", content_once)):
            if not value:
                continue
            if not any(move in CONTENT_MOVES for move in moves):
                raise ValueError(f"{name}: option {option} needs a move among {list(CONTENT_MOVES)}")
            if all(move in CONTENT_MOVES for move in moves):
                raise ValueError(f"{name}: option {option} needs a move other than {list(CONTENT_MOVES)}")
        if not isinstance(shared_match_query, bool):
            raise ValueError(
                f"{name}: option shared_match_query must be true or false, got {shared_match_query!r}"
            )
        if shared_match_query and not {"content", "last_match"} <= set(moves):
            raise ValueError(
                f"{name}: option shared_match_query needs both the 'content' and 'last_match' moves"
            )
        if shared_match_query and content == "additive":
            raise ValueError(f"{name}: option shared_match_query needs multiplicative or scaled_dot content")
        self.content_steps = content_steps
        self.content_once = content_once
        self.shared_match_query = shared_match_query
        self.content_strength = None if content_strength is None else float(content_strength)
        self.moves = moves
        # the shift moves' signed word offsets (forward +1, backward2 -2), parsed once, not per step
        self.strides = {move: stride for move in moves if (stride := move_stride(move)) is not None}
        # the moves that are linear maps of the previous attention (stay, the shifts) and the others,
        # by index in ``moves``: fixed at construction, read at every step of the walk
        self.linear_moves = [k for k, move in enumerate(moves) if move == "stay" or move in self.strides]
        self.other_moves = [k for k in range(len(moves)) if k not in self.linear_moves]
        self.choice = choice
        self.content: ScoringAttender | None = (
            construct(CONTENT_ATTENDERS[content], query_dim, key_dim, value_dim, content_options)
            if "content" in moves
            else None
        )
        if "last_match" in moves:
            if not shared_match_query:
                self.last_match_query = nn.Linear(query_dim, key_dim, bias=False)
            self.last_match_bias = nn.Parameter(torch.zeros(()))
        self.move_hidden = nn.Linear(query_dim, hidden_dim)
        self.move_layer = nn.Linear(hidden_dim, len(moves))

    def _init_state(
        self, keys: torch.Tensor, key_padding_mask: torch.Tensor | None, lengths: torch.Tensor
    ) -> AttentionState:
        ranks = source_positions(keys, key_padding_mask)
        real = _real_keys(ranks, key_padding_mask)
        first = ((ranks == 0) & real).to(keys.dtype)
        last = ((ranks == (lengths - 1).to(ranks.dtype).unsqueeze(1)) & real).to(keys.dtype)
        state: AttentionState = {
            "positions": ranks,
            "previous_attention": first,
            **{
                f"{move}_targets": shift_targets(key_padding_mask, keys, stride)
                for move, stride in {"forward": +1, "backward": -1, **self.strides}.items()
            },
            "start": first,
            "end": last,
        }
        state["linear_maps"] = self._linear_maps(state, keys.size(1), keys.dtype)
        if self.content_once:
            state["content_used"] = torch.zeros(keys.size(0), dtype=torch.bool, device=keys.device)
        if self.content is not None:
            state.update(prefixed_state("content", self.content._init_state(keys, key_padding_mask, lengths)))
        return state

    def _attend(
        self,
        query: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        key_padding_mask: torch.Tensor | None,
        state: AttentionState,
    ) -> AttentionOutput:
        logits, found = self._scored_moves(query, keys, key_padding_mask, unprefixed_state("content", state))
        return self._moved(logits, found, values, state)

    def _scored_moves(
        self,
        query: torch.Tensor,
        keys: torch.Tensor,
        key_padding_mask: torch.Tensor | None,
        content_state: AttentionState,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """What a step reads from this attender's parameters, all steps at once: the moves'
        logits ``[batch, steps, moves]`` and the content-type moves' attentions
        ``[batch, steps, source_len]`` by move."""
        logits = self.move_layer(F.relu(self.move_hidden(query)))
        found: dict[str, torch.Tensor] = {}
        if self.content is not None:
            found["content"] = self._content_attention(query, keys, key_padding_mask, content_state)
        if "last_match" in self.moves:
            found["last_match"] = self._last_match(query, keys, key_padding_mask)
        return logits, found

    def _moved(
        self,
        logits: torch.Tensor,
        found: dict[str, torch.Tensor],
        values: torch.Tensor,
        state: AttentionState,
        heads: int = 1,
    ) -> AttentionOutput:
        """The rest of a step, which reads no parameter: the choice of moves from ``logits``, the
        walk, the glimpse and the next state. With ``heads`` > 1 the batch holds that many heads'
        rows, head by head (:func:`attend_heads`)."""
        if self.content_steps is not None:
            logits = self._mask_content_moves(logits, state["step"])
        updates: AttentionState = {}
        if self.content_once:
            pis, updates["content_used"] = self._choose_content_once(logits, state["content_used"], heads)
        else:
            pis = self._choose(logits, heads)
        attention = self._walk(pis, state, found)
        previous = attention[:, -1]
        variables = {f"move_{move}": pis[..., k] for k, move in enumerate(self.moves)}
        variables["position"] = (attention * state["positions"].unsqueeze(1)).sum(-1)
        variables.update({f"{move}_attention": attention for move, attention in found.items()})
        return AttentionOutput(
            glimpse=weighted_sum(attention, values),
            weights=attention,
            state=advance_state(state, logits.size(1), previous_attention=previous, **updates),
            variables=variables,
        )

    def _content_attention(
        self,
        query: torch.Tensor,
        keys: torch.Tensor,
        key_padding_mask: torch.Tensor | None,
        content_state: AttentionState,
    ) -> torch.Tensor:
        """The content move's attention ``[batch, steps, source_len]`` (cosine scores times
        ``content_strength`` when it is set)."""
        assert self.content is not None
        if self.content_strength is None:
            return self.content.attention(query, keys, key_padding_mask, content_state)
        cosine = _cosine(self._content_query(query), keys)
        return masked_softmax(self.content_strength * cosine, key_padding_mask)

    def _content_query(self, query: torch.Tensor) -> torch.Tensor:
        """What the content move compares with the keys: ``W q`` (multiplicative content) or ``q``."""
        assert self.content is not None
        return self.content.query_layer(query) if isinstance(self.content, MultiplicativeAttender) else query

    def _last_match(
        self, query: torch.Tensor, keys: torch.Tensor, key_padding_mask: torch.Tensor | None
    ) -> torch.Tensor:
        """The ``last_match`` move's attention ``[batch, steps, source_len]`` (module docstring):
        ``w_s ∝ m_s prod_{s'>s} (1 - m_s')``, in log space; padding never matches."""
        strength = LAST_MATCH_STRENGTH if self.content_strength is None else self.content_strength
        matched = self._content_query(query) if self.shared_match_query else self.last_match_query(query)
        scores = strength * _cosine(matched, keys) + self.last_match_bias
        log_match, log_miss = F.logsigmoid(scores), F.logsigmoid(-scores)
        if key_padding_mask is not None:
            log_miss = log_miss.masked_fill(key_padding_mask.unsqueeze(1), 0.0)
        # sum of log(1 - m_s') over s' > s: a reversed cumulative sum, exclusive
        after = log_miss.flip(-1).cumsum(-1).flip(-1) - log_miss
        return masked_softmax(log_match + after, key_padding_mask)

    def _mask_content_moves(self, logits: torch.Tensor, first_step: Any) -> torch.Tensor:
        """``logits`` ``[batch, steps, moves]`` with the content-type moves at ``-inf`` at every
        decoder step ``>= content_steps`` (the queries are steps ``first_step, first_step + 1, …``)."""
        assert self.content_steps is not None
        steps = torch.arange(logits.size(1), device=logits.device) + first_step
        late = (steps >= self.content_steps).view(1, -1, 1)  # [1, T, 1]
        content_type = self._content_type(logits.device)
        return logits.masked_fill(late & content_type, float("-inf"))

    def _content_type(self, device: torch.device) -> torch.Tensor:
        """``True`` at the content-type moves, ``[moves]``."""
        return torch.tensor([move in CONTENT_MOVES for move in self.moves], dtype=torch.bool, device=device)

    def _choose_content_once(
        self, logits: torch.Tensor, used: torch.Tensor, heads: int = 1
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``pi`` ``[batch, steps, moves]`` with the content-type moves masked in the rows that have
        already taken one (``used`` ``[batch]`` bool); returns ``pi`` and the new ``used``.

        All steps at once: until a row first takes a content-type move the mask changes nothing,
        so that step is the first content-type argmax of the logits masked by ``used`` alone, and
        every later step is masked. The same choices as masking step by step, with one draw of
        the Gumbel noise for all steps.
        """
        content_type = self._content_type(logits.device)
        scores = self._perturbed(logits, heads)
        open_scores = scores.masked_fill(used.view(-1, 1, 1) & content_type, float("-inf"))
        took = content_type[open_scores.argmax(-1)]  # [B, T]: a content-type move, before any mask
        taken_before = used.unsqueeze(1) | (took.cumsum(1) - took.long() > 0)  # [B, T]
        pis = self._weights(scores.masked_fill(taken_before.unsqueeze(-1) & content_type, float("-inf")))
        return pis, used | took.any(1)

    def _choose(self, logits: torch.Tensor, heads: int = 1) -> torch.Tensor:
        """The weights ``pi`` of the moves from their logits ``[batch, steps, moves]``."""
        return self._weights(self._perturbed(logits, heads))

    def _perturbed(self, logits: torch.Tensor, heads: int = 1) -> torch.Tensor:
        """``logits`` ``[batch, steps, moves]`` plus Gumbel noise with ``choice="gumbel"`` in
        training (straight-through Gumbel-softmax, Jang et al. 2017: a sampled move, so training
        explores moves other than the current best), else ``logits``. The noise is drawn step by
        step (``[steps, batch, moves]`` in memory), so a call with all steps draws what a call per
        step would; with ``heads`` > 1 (a batch of that many heads' rows, head by head), head by
        head and in each step by step, so the heads draw what one call per head would."""
        if self.choice != "gumbel" or not self.training:
            return logits
        batch, steps, moves = logits.shape
        noise = torch.empty(heads, steps, batch // heads, moves, dtype=logits.dtype, device=logits.device)
        return logits - noise.exponential_().log().transpose(1, 2).reshape(batch, steps, moves)

    def _weights(self, scores: torch.Tensor) -> torch.Tensor:
        """``pi`` from (perturbed) logits: their softmax with ``choice="softmax"``, else the
        one-hot of the argmax with the softmax's gradient."""
        return scores.softmax(-1) if self.choice == "softmax" else straight_through_one_hot(scores)

    def _linear_maps(self, state: AttentionState, source_len: int, dtype: torch.dtype) -> torch.Tensor:
        """``[batch, source_len, linear moves * source_len]``: each linear move (``linear_moves``)
        as a matrix whose row ``s`` holds where word ``s``'s weight goes (the identity for ``stay``,
        the one-hots of ``<move>_targets`` for a shift), side by side, so that one product of a row
        of weights with it moves the row by every linear move; built once per source."""
        batch = state["positions"].size(0)
        device = state["positions"].device
        eye = torch.eye(source_len, dtype=dtype, device=device).expand(batch, -1, -1)
        maps = [
            eye
            if self.moves[k] == "stay"
            else F.one_hot(state[f"{self.moves[k]}_targets"], source_len).to(dtype)
            for k in self.linear_moves
        ]
        return torch.cat(maps, dim=2) if maps else eye.new_zeros(batch, source_len, 0)

    def _walk(self, pis: torch.Tensor, state: AttentionState, found: dict[str, torch.Tensor]) -> torch.Tensor:
        """``alpha_t`` ``[batch, steps, source_len]`` for the moves' weights ``pis``
        ``[batch, steps, moves]``, from ``state["previous_attention"]``; ``found``: the content-type
        moves' attentions ``[batch, steps, source_len]``.

        ``alpha_t = sum_k pi_tk candidate_tk`` (module docstring), split by how a candidate depends
        on ``alpha_{t-1}``: ``stay`` and the shifts are linear maps of it (the identity; the 0/1
        matrix ``[s, targets[s]]``, saturating at the ends), stored side by side in
        ``state["linear_maps"]``, so one matrix product a step gives all of them; ``content``,
        ``last_match``, ``start`` and ``end`` do not depend on it, and their mix ``c_t`` is built
        for all steps at once. A step is then two batched products instead of a candidate per
        move (1.4-1.8x less CPU for the attender's forward and backward, benchmarks/
        bench_shift_walk.py). The same numbers up to rounding: where a shift saturates, the two
        weights it adds are each scaled by ``pi`` before the sum instead of after.
        """
        batch, steps, _ = pis.shape
        previous = state["previous_attention"]
        source_len = previous.size(-1)
        linear, fixed = self.linear_moves, self.other_moves
        if fixed:
            candidates = [
                found[move] if move in found else state[move].unsqueeze(1).expand(batch, steps, source_len)
                for move in (self.moves[k] for k in fixed)
            ]
            offsets = torch.einsum("btk,btks->bts", pis[..., fixed], torch.stack(candidates, dim=2))
        else:
            offsets = previous.new_zeros(batch, steps, source_len)
        if not linear:
            return offsets
        maps = state["linear_maps"]  # [B, S, L * S]
        # unbind, not index, each step: the backward of x[:, t] writes a zero tensor of x's full size
        step_pis = pis[..., linear].unsqueeze(2).unbind(1)  # each [B, 1, L]
        step_offsets = offsets.unsqueeze(2).unbind(1)  # each [B, 1, S]
        row = previous.unsqueeze(1)  # [B, 1, S]
        finals: list[torch.Tensor] = []
        for pi, offset in zip(step_pis, step_offsets):
            moved = torch.bmm(row, maps).view(batch, len(linear), source_len)  # each linear move of it
            row = torch.baddbmm(offset, pi, moved)
            finals.append(row)
        return torch.cat(finals, dim=1)


def can_attend_together(attenders: Sequence[Attender]) -> bool:
    """Whether ``attenders`` (heads of one layer) are Shift Attenders that choose and walk alike
    (the same moves, choice, ``content_steps``, ``content_once`` and kind of content attender), so
    that :func:`attend_heads` runs them as one batch. Their parameters and the options that only
    shape their own scores (``hidden_dim``, ``content_strength``, ...) may differ."""
    if not attenders or not all(isinstance(attender, ShiftAttender) for attender in attenders):
        return False
    walks = {
        (a.moves, a.choice, a.content_steps, a.content_once, type(a.content))
        for a in attenders
        if isinstance(a, ShiftAttender)
    }
    return len(walks) == 1


def heads_initial_state(
    attenders: Sequence[ShiftAttender], keys: torch.Tensor, key_padding_mask: torch.Tensor | None
) -> AttentionState:
    """The initial state of ``attenders`` (:func:`can_attend_together`), one per head of ``keys``
    ``[batch, heads, source_len, key_dim]``, as one state whose batch holds the heads' rows head
    by head (row ``h * batch + b``). Each head's content attender starts its own part."""
    batch, heads = keys.shape[:2]
    merged_mask = None if key_padding_mask is None else key_padding_mask.repeat(heads, 1)
    state = attenders[0].initial_state(_heads_as_batch(keys), merged_mask)
    contents = [attender.content for attender in attenders]
    if contents[0] is not None:
        lengths = state["source_lengths"][:batch]
        own = [
            content._init_state(keys[:, h], key_padding_mask, lengths)
            for h, content in enumerate(contents)
            if content is not None
        ]
        for name in own[0]:
            state[f"content.{name}"] = torch.cat([part[name] for part in own])
    return state


def attend_heads(
    attenders: Sequence[ShiftAttender],
    query: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    key_padding_mask: torch.Tensor | None,
    state: AttentionState,
) -> AttentionOutput:
    """Steps of several Shift Attender heads at once: what calling each head's attender on its
    slice would give (the same weights, glimpses and Gumbel draws), in one batch.

    ``query`` ``[batch, heads, steps, query_dim]``, ``keys`` / ``values`` ``[batch, heads,
    source_len, dim]``, ``state`` from :func:`heads_initial_state` (or this function). Each head's
    parameters (the moves' logits, the content-type moves) are applied head by head; the choice
    of moves, the walk and the glimpse, which read none, run once on all heads' rows, so a
    teacher-forced step costs one walk instead of one per head (the walk is a product per decoder
    step). Returns the glimpse ``[batch, heads, steps, value_dim]``, the weights ``[batch, heads,
    steps, source_len]``, the variables ``[batch, heads, steps, ...]`` and the next state (still
    head by head in its batch).
    """
    batch, heads = query.shape[:2]
    content_state = unprefixed_state("content", state)
    scored = [
        attender._scored_moves(
            query[:, h],
            keys[:, h],
            key_padding_mask,
            {name: _head_rows(value, h, batch, heads) for name, value in content_state.items()},
        )
        for h, attender in enumerate(attenders)
    ]
    logits = torch.cat([head_logits for head_logits, _ in scored])
    found = {name: torch.cat([head_found[name] for _, head_found in scored]) for name in scored[0][1]}
    output = attenders[0]._moved(logits, found, _heads_as_batch(values), state, heads)
    return AttentionOutput(
        glimpse=_batch_as_heads(output.glimpse, heads),
        weights=_batch_as_heads(output.weights, heads),
        state=output.state,
        variables={name: _batch_as_heads(value, heads) for name, value in output.variables.items()},
    )


def _heads_as_batch(x: torch.Tensor) -> torch.Tensor:
    """``[batch, heads, ...]`` → ``[heads * batch, ...]``, head by head."""
    return x.transpose(0, 1).reshape(x.size(0) * x.size(1), *x.shape[2:])


def _batch_as_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    """``[heads * batch, ...]`` (head by head) → ``[batch, heads, ...]``."""
    return x.view(heads, x.size(0) // heads, *x.shape[1:]).transpose(0, 1)


def _head_rows(value: Any, head: int, batch: int, heads: int) -> Any:
    """Head ``head``'s rows of a state entry whose batch holds ``heads`` heads (others as they are)."""
    if isinstance(value, torch.Tensor) and value.dim() > 0 and value.size(0) == heads * batch:
        return value[head * batch : (head + 1) * batch]
    return value
