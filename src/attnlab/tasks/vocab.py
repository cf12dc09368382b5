"""Token vocabularies: token ↔ id maps with the special tokens of sequence-to-sequence models.

``<pad>`` always has id 0. Target vocabularies also hold ``<sos>`` (prepended to the decoder
input) and ``<eos>`` (appended to the decoder output; Dubois et al. 2020, §6.1.1). Specials come
first, in the order given, then the data tokens in sorted order, so ids depend only on the set
of tokens seen. There is no ``<unk>``: a token never seen in training is an error
(:class:`UnknownTokenError`), since the tasks here have closed vocabularies.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from attnlab.checks import did_you_mean
from attnlab.tasks.examples import Seq2SeqExample

PAD_TOKEN = "<pad>"
SOS_TOKEN = "<sos>"
EOS_TOKEN = "<eos>"

SOURCE_SPECIALS: tuple[str, ...] = (PAD_TOKEN,)
TARGET_SPECIALS: tuple[str, ...] = (PAD_TOKEN, SOS_TOKEN, EOS_TOKEN)

_FORMAT_VERSION = 1


class UnknownTokenError(ValueError):
    """A token to encode is not in the vocabulary (it was not seen in the training data)."""

    def __init__(self, token: str, where: str, vocabulary: Vocabulary) -> None:
        self.token = token
        self.where = where
        self.vocabulary = vocabulary
        location = f" at {where}" if where else ""
        super().__init__(
            f"unknown token {token!r}{location}: it was not seen in the training data the "
            f"vocabulary was built from ({len(vocabulary)} tokens, e.g. "
            f"{vocabulary.preview()}){did_you_mean(token, vocabulary.tokens[len(vocabulary.specials) :])}"
        )


class Vocabulary:
    """A bijection between tokens and ids ``0 … len - 1``; ``tokens[0]`` must be ``<pad>``."""

    def __init__(self, tokens: Sequence[str], specials: Sequence[str] = SOURCE_SPECIALS) -> None:
        tokens = list(tokens)
        specials = tuple(specials)
        _check_specials(specials)
        if tuple(tokens[: len(specials)]) != specials:
            raise ValueError(
                f"a vocabulary must start with its special tokens {specials}, got {tokens[: len(specials)]}"
            )
        ids = {token: index for index, token in enumerate(tokens)}
        if len(ids) != len(tokens):
            duplicates = sorted({t for t in tokens if tokens.count(t) > 1})
            raise ValueError(f"duplicate tokens in vocabulary: {duplicates}")
        for token in tokens:
            if not isinstance(token, str) or not token:
                raise ValueError(f"vocabulary tokens must be non-empty strings, got {token!r}")
        self._tokens: tuple[str, ...] = tuple(tokens)
        self._ids: dict[str, int] = ids
        self._specials = specials

    # ---- construction and serialization ---------------------------------------------------

    @classmethod
    def build(
        cls, token_sequences: Iterable[Iterable[str]], specials: Sequence[str] = SOURCE_SPECIALS
    ) -> Vocabulary:
        """Vocabulary of every token in ``token_sequences``: specials first, then sorted tokens.

        A data token equal to one of ``specials`` is an error (it would be silently merged).
        """
        specials = tuple(specials)
        _check_specials(specials)
        seen: set[str] = set()
        for sequence in token_sequences:
            if isinstance(sequence, str):  # its characters would become the tokens
                raise ValueError(f"each sequence must be a list of tokens, got the string {sequence!r}")
            seen.update(sequence)
        clash = sorted(seen.intersection(specials))
        if clash:
            raise ValueError(f"the data contain the special token(s) {clash}")
        return cls([*specials, *sorted(seen)], specials)

    def to_dict(self) -> dict[str, Any]:
        """A JSON/pickle-friendly description, for checkpoints; inverse of :meth:`from_dict`."""
        return {
            "format_version": _FORMAT_VERSION,
            "specials": list(self._specials),
            "tokens": list(self._tokens),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Vocabulary:
        """Rebuild a vocabulary saved by :meth:`to_dict`."""
        if not isinstance(data, Mapping) or "tokens" not in data or "specials" not in data:
            raise ValueError("not a saved vocabulary: expected a mapping with 'tokens', 'specials'")
        version = data.get("format_version", _FORMAT_VERSION)
        if version != _FORMAT_VERSION:
            raise ValueError(f"unsupported vocabulary format_version {version!r}")
        return cls(data["tokens"], data["specials"])

    # ---- lookups ----------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._tokens)

    def __contains__(self, token: object) -> bool:
        return token in self._ids

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Vocabulary):
            return NotImplemented
        return self._tokens == other._tokens and self._specials == other._specials

    def __hash__(self) -> int:
        return hash((self._tokens, self._specials))

    def __repr__(self) -> str:
        return f"Vocabulary({len(self)} tokens: {self.preview()})"

    @property
    def tokens(self) -> tuple[str, ...]:
        """All tokens, in id order."""
        return self._tokens

    @property
    def specials(self) -> tuple[str, ...]:
        return self._specials

    @property
    def pad_id(self) -> int:
        return self._special_id(PAD_TOKEN)

    @property
    def sos_id(self) -> int:
        return self._special_id(SOS_TOKEN)

    @property
    def eos_id(self) -> int:
        return self._special_id(EOS_TOKEN)

    def token_to_id(self, token: str, *, where: str = "") -> int:
        try:
            return self._ids[token]
        except KeyError:
            raise UnknownTokenError(token, where, self) from None

    def id_to_token(self, index: int) -> str:
        if not 0 <= index < len(self._tokens):
            raise ValueError(f"token id {index} out of range for a vocabulary of {len(self)}")
        return self._tokens[index]

    def encode(self, tokens: Iterable[str], *, where: str = "") -> list[int]:
        """Ids of ``tokens``; :class:`UnknownTokenError` names the token and ``where``."""
        ids = self._ids
        try:
            return [ids[token] for token in tokens]
        except KeyError as error:
            raise UnknownTokenError(error.args[0], where, self) from None

    def decode(self, ids: Iterable[int], *, strip_specials: bool = False) -> list[str]:
        """Tokens of ``ids`` (ints or a 1-D tensor).

        With ``strip_specials``, stop before the first ``<eos>`` and drop ``<pad>``/``<sos>``.
        """
        if hasattr(ids, "tolist"):
            ids = ids.tolist()
        tokens = [self.id_to_token(int(index)) for index in ids]
        if not strip_specials:
            return tokens
        if EOS_TOKEN in self._specials and EOS_TOKEN in tokens:
            tokens = tokens[: tokens.index(EOS_TOKEN)]
        dropped = {PAD_TOKEN, SOS_TOKEN}.intersection(self._specials)
        return [t for t in tokens if t not in dropped]

    def preview(self, limit: int = 8) -> str:
        """The first non-special tokens, for messages."""
        data = [t for t in self._tokens if t not in self._specials]
        shown = " ".join(data[:limit])
        return shown + (" …" if len(data) > limit else "") if data else "(no data tokens)"

    def _special_id(self, token: str) -> int:
        if token not in self._specials:
            raise ValueError(
                f"this vocabulary has no {token} token (its special tokens are "
                f"{list(self._specials)}); target vocabularies are built with "
                f"specials={TARGET_SPECIALS}"
            )
        return self._ids[token]


def _check_specials(specials: tuple[str, ...]) -> None:
    if not specials or specials[0] != PAD_TOKEN:
        raise ValueError(f"special tokens must start with {PAD_TOKEN!r} (id 0), got {specials}")
    if len(set(specials)) != len(specials):
        raise ValueError(f"duplicate special tokens: {specials}")


def build_vocabularies(examples: Iterable[Seq2SeqExample]) -> tuple[Vocabulary, Vocabulary]:
    """Source (``<pad>``) and target (``<pad>``, ``<sos>``, ``<eos>``) vocabularies of ``examples``.

    Build them from the training split only, so that test tokens unseen in training are reported.
    """
    examples = list(examples)
    source = Vocabulary.build((ex.source for ex in examples), SOURCE_SPECIALS)
    target = Vocabulary.build((ex.target for ex in examples), TARGET_SPECIALS)
    return source, target
