"""The alignment stream of Syntactic Attention (Russin et al. 2019, §2): its encoder and its score.

Syntactic Attention factorizes a translation into *alignment* (which source word matters now,
computed from context) and *translation* (what that word means, computed from the word alone).
This module holds the two reusable pieces of the alignment stream; the whole model, with its
translation stream and decoder, is :class:`attnlab.models.syntactic_attention.SyntacticAttentionSeq2Seq`.

* :class:`ShiftedBidirectionalEncoder` — §2.2: a bidirectional LSTM whose vector for word ``j`` is
  built from its *neighbours'* states, ``h_j = [→h_{j−1} ; ←h_{j+1}]``, so that it encodes the role
  the word plays in the sentence and never the word itself.
* :class:`DotProductAttender` — eq. 2: ``e_ij = a(s_i, h_j) = s_i · h_j``, ``α_ij = softmax_j(e_ij)``
  (unscaled, unlike :class:`~attnlab.attention.content.ScaledDotAttender`), with the interface of
  every attender (:mod:`attnlab.attention.base`).
* :class:`ComposedWordEmbedding` — an attnlab option, not in the paper: the alignment stream's word
  embedding with word dropout to a learned unknown word, which also stands for every word never
  seen composed with others in training (issue 29; docs/results.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from attnlab.attention.base import AttentionState, check_padding_mask
from attnlab.attention.content import ScoringAttender, check_same_dims
from attnlab.checks import check_choice

__all__ = [
    "ComposedWordEmbedding",
    "DotProductAttender",
    "ShiftedBidirectionalEncoder",
    "ShiftedEncoding",
    "reverse_padded",
]


class DotProductAttender(ScoringAttender):
    """Dot-product alignment, Russin et al. (2019) eq. 2: ``a(s_i, h_j) = s_i · h_j``.

    ``α_ij = exp(e_ij) / Σ_k exp(e_ik)`` over the real (unpadded) positions; the glimpse is
    ``Σ_j α_ij v_j`` for whatever values are given (``c_i`` of eq. 3 when the values are the
    ``h_j``, ``d_i`` of eq. 1 when they are the translation vectors ``m_j``). Parameter-free, so it
    needs ``query_dim == key_dim``. State: only the base ``"step"`` / ``"source_lengths"``.
    """

    def __init__(self, query_dim: int, key_dim: int, value_dim: int | None = None) -> None:
        check_same_dims(type(self).__name__, query_dim, key_dim)
        super().__init__(query_dim, key_dim, value_dim)

    def score(self, query: torch.Tensor, keys: torch.Tensor, state: AttentionState) -> torch.Tensor:
        return torch.bmm(query, keys.transpose(1, 2))


@dataclass
class ShiftedEncoding:
    """Output of :class:`ShiftedBidirectionalEncoder`, batch-first.

    ``keys``: ``[B, S, 2H]``, ``h_j = [→h_{j−1} ; ←h_{j+1}]`` (padded positions hold the boundary
    vectors and must be masked); ``summary``: ``[B, 2H]``, ``[→h_T ; ←h_1]``, the final states of
    both directions, which have read the whole sentence (used to start a decoder).
    """

    keys: torch.Tensor
    summary: torch.Tensor


class ShiftedBidirectionalEncoder(nn.Module):
    """``h_j = [→h_{j−1} ; ←h_{j+1}]`` (Russin et al. 2019, §2.2), the alignment encoder.

    The two directions are separate ``num_layers``-deep LSTMs. (In a stacked ``nn.LSTM`` with
    ``bidirectional=True`` the second layer's forward state at ``j − 1`` reads the first layer's
    backward state at ``j − 1``, which has read word ``j``; keeping the directions apart is what
    guarantees that ``h_j`` never depends on word ``j``.) ``→h_0`` and ``←h_{T+1}``, the states
    beyond the sentence's ends, are learned boundary vectors (the paper is silent; the authors'
    code uses learned ``<SOS>``/``<EOS>`` roles there). Right padding is handled per sequence:
    the backward LSTM reads each sequence reversed within its own length, so padding never reaches
    a real position.
    """

    def __init__(self, input_dim: int, hidden_dim: int, num_layers: int = 2, dropout: float = 0.0) -> None:
        super().__init__()
        if hidden_dim < 1 or num_layers < 1:
            raise ValueError(f"hidden_dim and num_layers must be >= 1, got {hidden_dim}, {num_layers}")
        layer_dropout = dropout if num_layers > 1 else 0.0
        self.hidden_dim = hidden_dim
        self.forward_rnn = nn.LSTM(input_dim, hidden_dim, num_layers, batch_first=True, dropout=layer_dropout)
        self.backward_rnn = nn.LSTM(
            input_dim, hidden_dim, num_layers, batch_first=True, dropout=layer_dropout
        )
        bound = 1.0 / math.sqrt(hidden_dim)
        self.start = nn.Parameter(torch.empty(hidden_dim).uniform_(-bound, bound))  # →h_0
        self.end = nn.Parameter(torch.empty(hidden_dim).uniform_(-bound, bound))  # ←h_{T+1}

    @property
    def output_dim(self) -> int:
        return 2 * self.hidden_dim

    def forward(self, inputs: torch.Tensor, padding_mask: torch.Tensor) -> ShiftedEncoding:
        """``inputs`` ``[B, S, D]`` (right-padded), ``padding_mask`` bool ``[B, S]`` (True = padding)."""
        check_padding_mask(
            type(self).__name__, padding_mask, inputs.shape[:2], "padding_mask", right_padded=True
        )
        lengths = (~padding_mask).sum(dim=1)
        forward_states, _ = self.forward_rnn(inputs)  # position j has read words 0..j
        backward_states = reverse_padded(self.backward_rnn(reverse_padded(inputs, lengths))[0], lengths)
        batch, source_len = padding_mask.shape
        start = self.start.expand(batch, 1, -1)
        previous = torch.cat([start, forward_states[:, :-1]], dim=1)  # →h_{j−1}
        following = torch.cat([backward_states[:, 1:], backward_states[:, :1]], dim=1)  # ←h_{j+1}
        positions = torch.arange(source_len, device=inputs.device)
        beyond_end = (positions.unsqueeze(0) + 1 >= lengths.unsqueeze(1)).unsqueeze(-1)
        following = torch.where(beyond_end, self.end.expand_as(following), following)
        last = (lengths - 1).view(-1, 1, 1).expand(-1, 1, self.hidden_dim)
        summary = torch.cat([forward_states.gather(1, last).squeeze(1), backward_states[:, 0]], dim=-1)
        return ShiftedEncoding(keys=torch.cat([previous, following], dim=-1), summary=summary)


DROPOUT_UNITS = ("token", "peer")
"""What :class:`ComposedWordEmbedding`'s word dropout drops (``dropout_unit``): each position on its
own, or each peer word of a sequence at all of its positions."""


class ComposedWordEmbedding(nn.Module):
    """A word embedding that reads a word it never saw composed as a learned unknown word.

    Why (attnlab, issue 29): in a one-word source the alignment has one position to attend
    (``α = 1`` whatever the scores), so no gradient reaches that word's alignment embedding. On
    SCAN's add-jump split "jump" occurs only alone, and its alignment embedding stays at its random
    initialisation through training (docs/results.md): at test the alignment stream reads a random
    vector, and whether it treats "jump" like "walk" depends on the seed. This embedding:

    * in training, replaces each real word by a learned vector ``u`` with probability ``dropout``
      (word dropout), so the alignment learns to align a word it cannot identify from its context;
    * records every word that occurs in a source with at least two real words (``composed``);
    * in evaluation, reads every word never recorded as ``u``.

    The record is a buffer, so it is saved with the model and a resumed run continues it. The
    choice of "composed" (two or more real words, an appended end marker not counted) as the test
    of "trained" is ours: it is when the alignment embedding of a word can matter.

    ``peers=True`` (issue 29, session 17) reads a never-composed word that was seen *alone* (a
    one-word source) not as ``u`` but as its peers: the mean embedding of the words seen both
    alone and composed. A word never composed can only have been seen alone, and that slot is the
    one piece of syntax the data give about it; on SCAN's add-jump the peers of "jump" are
    "walk", "run" and "look". Why not ``u``: ``u`` stands for every dropped word, "turn" and
    "twice" included, so the alignment reads "jump left" partly as "turn left" (``u left``); on
    the paper-sized add-jump checkpoints that ambiguity is every length-given failure
    (docs/results.md). With ``peers`` the word dropout may be 0; a word seen neither composed
    nor alone (or a word seen alone when no word is a peer) is still read as ``u``.

    ``dropout_to_peers=True`` (with ``peers``; issue 28, session 45) makes the word dropout read a
    dropped word as the peers' mean instead of ``u`` (``u`` while no word is a peer yet), so that what
    reads these embeddings learns to go on over the very vector an alone-only word becomes at test.
    ``dropout_unit`` says what is dropped: ``"token"`` (default) each real position on its own;
    ``"peer"`` (with ``dropout_to_peers``; issue 28, session 46) each peer word of a sequence, with
    probability ``dropout``, at every one of its positions there, the way an alone-only word is the
    peers' mean wherever it occurs at test ("jump thrice" reads it three times in a row), and no
    other word.

    ``peers_as_one=True`` (with ``peers``; issue 28, session 48) reads every peer word as the peers'
    mean too, in training and at test, so that what reads these embeddings sees that a word is one
    of the peers (or an alone-only word) but never which: an alone-only word's sequences then read
    exactly as their twins with a peer word in its place, and no dropout is needed to train the
    reader on the vector the alone-only word becomes. What the word means must come from elsewhere
    (in the Transformer, the values' embeddings of their own).
    """

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        dropout: float,
        padding_idx: int,
        peers: bool = False,
        dropout_to_peers: bool = False,
        dropout_unit: str = "token",
        peers_as_one: bool = False,
    ) -> None:
        super().__init__()
        if peers_as_one and not peers:
            raise ValueError("peers_as_one reads the peer words as their mean: it needs peers=True")
        if not 0.0 <= dropout < 1.0 or (dropout == 0.0 and not peers):
            raise ValueError(f"word dropout must be in (0, 1), or in [0, 1) with peers=True, got {dropout}")
        if dropout_to_peers and not peers:
            raise ValueError("dropout_to_peers reads a dropped word as its peers: it needs peers=True")
        check_choice("dropout_unit", dropout_unit, DROPOUT_UNITS)
        if dropout_unit == "peer" and not dropout_to_peers:
            raise ValueError(
                "dropout_unit='peer' drops peer words to the peers' mean: it needs dropout_to_peers=True"
            )
        self.dropout_unit = dropout_unit
        self.dropout = dropout
        self.peers = peers
        self.dropout_to_peers = dropout_to_peers
        self.peers_as_one = peers_as_one
        self.embedding = nn.Embedding(num_embeddings, embedding_dim, padding_idx=padding_idx)
        self.unknown = nn.Parameter(torch.zeros(embedding_dim))
        self.composed: torch.Tensor
        self.register_buffer("composed", torch.zeros(num_embeddings, dtype=torch.bool))
        self.alone: torch.Tensor
        if peers:  # only then, so that checkpoints written without it still load
            self.register_buffer("alone", torch.zeros(num_embeddings, dtype=torch.bool))

    def forward(
        self, words: torch.Tensor, padding_mask: torch.Tensor, real_words: torch.Tensor
    ) -> torch.Tensor:
        """``[B, S, D]`` embeddings of ``words`` ``[B, S]``; ``padding_mask`` ``[B, S]`` is ``True``
        at padding, ``real_words`` ``[B]`` counts each source's words (an end marker left out).
        A position the mask marks is never replaced, so a marker (a start or end token) may be
        masked to keep its own embedding; a one-word source's word is its first unmasked one."""
        embedded = self.embedding(words)
        real = ~padding_mask
        if self.training:
            rows = real_words >= 2
            self.composed[words[rows][real[rows]]] = True
            if self.peers:  # the word itself: the first real position, never a marker around it
                single = real_words == 1
                first = real[single].int().argmax(dim=1, keepdim=True)
                self.alone[words[single].gather(1, first).flatten()] = True
            if self.dropout_unit == "peer":  # one draw per (sequence, word), for peer words only
                draws = torch.rand(words.size(0), self.composed.numel(), device=words.device) < self.dropout
                unknown = real & self._peer_mask()[words] & draws.gather(1, words)
            else:
                unknown = real & (torch.rand(words.shape, device=words.device) < self.dropout)
            # the peers' mean only where an option reads it: one embedding mean an update saved
            peer_vector = self._peer_vector() if self.dropout_to_peers or self.peers_as_one else None
            replacement: torch.Tensor = self.unknown
            if self.dropout_to_peers and peer_vector is not None:
                replacement = peer_vector
            embedded = torch.where(unknown.unsqueeze(-1), replacement.expand_as(embedded), embedded)
            return self._read_peers_as_one(words, real, embedded, peer_vector)
        unknown = real & ~self.composed[words]
        peer_vector = self._peer_vector()
        if peer_vector is not None:
            like_peers = unknown & self.alone[words]
            embedded = torch.where(like_peers.unsqueeze(-1), peer_vector.expand_as(embedded), embedded)
            unknown = unknown & ~like_peers
        embedded = torch.where(unknown.unsqueeze(-1), self.unknown.expand_as(embedded), embedded)
        return self._read_peers_as_one(words, real, embedded, peer_vector)

    def _read_peers_as_one(
        self,
        words: torch.Tensor,
        real: torch.Tensor,
        embedded: torch.Tensor,
        peer_vector: torch.Tensor | None,
    ) -> torch.Tensor:
        """With ``peers_as_one``, ``embedded`` with every real position of a peer word read as
        ``peer_vector``, the peers' mean (while there are peers: not ``None``); else ``embedded``."""
        if not self.peers_as_one or peer_vector is None:
            return embedded
        as_one = real & self._peer_mask()[words]
        return torch.where(as_one.unsqueeze(-1), peer_vector.expand_as(embedded), embedded)

    def _peer_vector(self) -> torch.Tensor | None:
        """The peers' mean embedding, or ``None`` without ``peers`` or while no word is a peer."""
        if not self.peers:
            return None
        peers = self._peer_mask()
        return self.embedding.weight[peers].mean(dim=0) if bool(peers.any()) else None

    def peer_words(self) -> torch.Tensor:
        """The ids of the words an alone-only word is aligned as (``peers=True``): seen both alone
        and composed in training. Empty without ``peers``."""
        if not self.peers:
            return torch.zeros(0, dtype=torch.long)
        return self._peer_mask().nonzero().flatten()

    def _peer_mask(self) -> torch.Tensor:
        """``[V]``: ``True`` at the peers, the words seen both alone and composed (``peers=True``)."""
        return self.composed & self.alone


def reverse_padded(sequences: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Reverse each row of ``sequences`` ``[B, S, D]`` within its first ``lengths[b]`` positions.

    Padded positions stay where they are, so the function is its own inverse.
    """
    positions = torch.arange(sequences.size(1), device=sequences.device).unsqueeze(0)
    ends = lengths.to(sequences.device).unsqueeze(1)
    index = torch.where(positions < ends, ends - 1 - positions, positions)
    return sequences.gather(1, index.unsqueeze(-1).expand_as(sequences))
