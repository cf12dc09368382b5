"""Word-level language-modelling corpora (WikiText, PTB) and stream batching for truncated BPTT.

File layout (the public WikiText / Mikolov-PTB releases): a corpus folder holds one UTF-8 text file
per split, ``train`` / ``valid`` / ``test``, named ``{split}.txt`` (pytorch/examples),
``wiki.{split}.tokens`` (WikiText) or ``ptb.{split}.txt`` (PTB). Each line is a sentence or a
paragraph of space-separated tokens; every line, blank ones included, ends with one ``<eos>``
(the usual counting: WikiText-2 then has 2,088,628 training tokens).

Documents. Daniluk et al. (2017, §4.1) reset the hidden state between articles. In WikiText an
article starts at its heading line `` = Title = `` (one ``=`` on each side; `` = = Section = = ``
is a section heading, not a new article). PTB has no article marks: a split is one document.

Vocabulary. Built from the training split only: ``<pad>`` (id 0, never predicted), ``<unk>``,
``<eos>``, then words by decreasing count (ties in string order), optionally capped to
``max_size`` word types (``<unk>`` and ``<eos>`` included) — the paper keeps the 77K most frequent
words. Other words become ``<unk>``. With ``normalize_numbers`` every number token (``1990``,
``3.5``, ``1,000``) becomes ``N`` first, as in the paper and Mikolov's PTB.

Streams. Each document ``w_1 … w_n`` (``w_n`` = ``<eos>``) becomes ``n`` prediction steps: input
``<eos>, w_1 … w_{n-1}``, target ``w_1 … w_n``, with a *reset* flag on its first step, so a
document's likelihood never depends on the text before it. The steps are laid out in
``batch_size`` parallel streams (:func:`make_streams`) and cut into segments of ``bptt`` steps
(:func:`segments`); a model carries its state (LSTM state, memory window) from one segment to the
next and resets it where a flag is set. Streams stay on the CPU; each segment is moved to the
device on its own, so evaluation never holds a whole corpus on the device.
"""

from __future__ import annotations

import heapq
import os
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

import numpy as np
import torch

from attnlab.checks import check_choice, check_int
from attnlab.io import atomic_write_text
from attnlab.tasks.examples import tensors_to
from attnlab.tasks.tsv import DataFileNotFoundError, DataFormatError
from attnlab.tasks.vocab import EOS_TOKEN, PAD_TOKEN, Vocabulary

UNK_TOKEN = "<unk>"
NUMBER_TOKEN = "N"
LM_SPECIALS: tuple[str, ...] = (PAD_TOKEN, UNK_TOKEN, EOS_TOKEN)
SPLITS: tuple[str, ...] = ("train", "valid", "test")
SPLIT_FILE_PATTERNS: tuple[str, ...] = ("{split}.txt", "wiki.{split}.tokens", "ptb.{split}.txt")
"""File names tried, in order, for each split of a corpus folder."""

DocumentRule = Literal["auto", "wikitext", "none"]
"""How documents are found: WikiText article headings, none (one document), or auto-detected."""


_RESERVED = (PAD_TOKEN, EOS_TOKEN)
_NUMBER = re.compile(r"^[+-]?(?:\d+(?:[.,]\d+)*|[.,]\d+)$")
_ARTICLE_HEADING = re.compile(r"^= (?!=).*(?<!=) =$")


# --------------------------------------------------------------------------------------------
# Files.


def find_split_files(folder: str | os.PathLike[str], splits: Sequence[str] = SPLITS) -> dict[str, Path]:
    """The file of each split in a WikiText/PTB corpus folder; a missing one names what was looked for."""
    folder = Path(folder)
    if not folder.is_dir():
        raise DataFileNotFoundError(folder, None, "no such corpus folder")
    files = {}
    for split in splits:
        names = [pattern.format(split=split) for pattern in SPLIT_FILE_PATTERNS]
        found = [folder / name for name in names if (folder / name).is_file()]
        if not found:
            raise DataFileNotFoundError(
                folder, None, f"no {split} split: expected one of the files {', '.join(names)}"
            )
        files[split] = found[0]
    return files


def is_article_heading(line: str) -> bool:
    """True for a WikiText article heading `` = Title = `` (not `` = = Section = = ``)."""
    return bool(_ARTICLE_HEADING.match(line.strip()))


def normalize_token(token: str) -> str:
    """``N`` for a number token (``1990``, ``3.5``, ``1,000``), else the token."""
    return NUMBER_TOKEN if _NUMBER.match(token) else token


@dataclass(frozen=True)
class CorpusLine:
    """One line of a corpus file: its 1-based number, its tokens and whether it starts a document."""

    number: int
    tokens: list[str]
    starts_document: bool


def read_lines(
    path: str | os.PathLike[str], *, documents: DocumentRule = "auto", normalize_numbers: bool = False
) -> Iterator[CorpusLine]:
    """The lines of a corpus file, tokenised, each ending in ``<eos>``; line 1 starts a document.

    Blank lines before the first article heading belong to the first article.

    Raises :class:`DataFormatError` (file and line) for a missing or undecodable file, a reserved
    token (``<pad>``, ``<eos>``) in the text, or a file without a single word.
    """
    path = Path(path)
    check_choice("documents", documents, get_args(DocumentRule))
    rule = detect_document_rule(path) if documents == "auto" else documents
    seen_word = False
    document_has_words = False
    for number, raw in enumerate(decoded_lines(path), start=1):
        words = raw.split()
        for token in words:
            if token in _RESERVED:
                raise DataFormatError(path, number, f"the text contains the reserved token {token!r}")
        # A heading starts an article unless the current one has no word yet (leading blank lines).
        starts = number == 1 or (rule == "wikitext" and document_has_words and is_article_heading(raw))
        document_has_words = (document_has_words and not starts) or bool(words)
        seen_word = seen_word or bool(words)
        if normalize_numbers:
            words = [normalize_token(token) for token in words]
        yield CorpusLine(number, [*words, EOS_TOKEN], starts)
    if not seen_word:
        raise DataFormatError(path, None, "the corpus is empty: no line holds a word")


def detect_document_rule(path: str | os.PathLike[str]) -> Literal["wikitext", "none"]:
    """``wikitext`` if the file has a WikiText article heading, else ``none``."""
    return "wikitext" if any(is_article_heading(line) for line in decoded_lines(Path(path))) else "none"


def decoded_lines(path: str | os.PathLike[str]) -> Iterator[str]:
    """The lines of a UTF-8 text file; a missing, unreadable or undecodable file is a
    :class:`DataFormatError` naming the file (and line)."""
    path = Path(path)
    try:
        handle = open(path, "rb")  # noqa: SIM115 - closed below; bytes so an error can name the line
    except FileNotFoundError:
        raise DataFileNotFoundError(path, None, "no such file") from None
    except IsADirectoryError:
        raise DataFormatError(path, None, "is a directory, expected a text file") from None
    with handle:
        for number, data in enumerate(handle, start=1):
            try:
                yield data.decode("utf-8")
            except UnicodeDecodeError as error:
                raise DataFormatError(path, number, f"not valid UTF-8 ({error.reason})") from None


# --------------------------------------------------------------------------------------------
# Vocabulary.


def count_words(
    path: str | os.PathLike[str], *, documents: DocumentRule = "auto", normalize_numbers: bool = False
) -> Counter[str]:
    """Token counts of a corpus file (``<eos>`` included)."""
    counts: Counter[str] = Counter()
    for line in read_lines(path, documents=documents, normalize_numbers=normalize_numbers):
        counts.update(line.tokens)
    return counts


def build_lm_vocabulary(
    counts: Counter[str], *, max_size: int | None = None, min_count: int = 1
) -> Vocabulary:
    """``<pad>``, ``<unk>``, ``<eos>``, then the most frequent words (see the module docstring).

    ``max_size`` caps the number of types the model predicts (``<unk>`` and ``<eos>`` included,
    ``<pad>`` not); words seen fewer than ``min_count`` times become ``<unk>``.
    """
    if max_size is not None and max_size < 3:
        raise ValueError(f"max_size must be >= 3 (<unk>, <eos> and one word), got {max_size}")
    words = sorted(
        (word for word, count in counts.items() if count >= min_count and word not in LM_SPECIALS),
        key=lambda word: (-counts[word], word),
    )
    if max_size is not None:
        words = words[: max_size - 2]
    return Vocabulary([*LM_SPECIALS, *words], LM_SPECIALS)


def write_vocabulary_file(path: str | os.PathLike[str], vocabulary: Vocabulary) -> None:
    """One token per line, in id order (specials included), written atomically."""
    atomic_write_text(path, "".join(f"{token}\n" for token in vocabulary.tokens))


def read_vocabulary_file(path: str | os.PathLike[str]) -> Vocabulary:
    """Read a file written by :func:`write_vocabulary_file`; errors name the file and line."""
    path = Path(path)
    tokens: list[str] = []
    seen: dict[str, int] = {}
    for number, raw in enumerate(decoded_lines(path), start=1):
        token = raw.strip()
        if not token or len(token.split()) != 1:
            raise DataFormatError(path, number, f"expected one token per line, got {raw.rstrip()!r}")
        if token in seen:
            raise DataFormatError(path, number, f"duplicate token {token!r} (first on line {seen[token]})")
        seen[token] = number
        tokens.append(token)
    if tuple(tokens[: len(LM_SPECIALS)]) != LM_SPECIALS:
        raise DataFormatError(
            path, None, f"a language-model vocabulary starts with {list(LM_SPECIALS)}, got {tokens[:3]}"
        )
    return Vocabulary(tokens, LM_SPECIALS)


def vocabulary_file_difference(path: str | os.PathLike[str], vocabulary: Vocabulary) -> str | None:
    """How the vocabulary file at ``path`` differs from ``vocabulary`` (``"N vs M tokens, first
    difference at line K"``), or ``None`` where it holds that vocabulary."""
    from_file = read_vocabulary_file(path)
    if from_file == vocabulary:
        return None
    mismatch = next(
        (i for i, (a, b) in enumerate(zip(from_file.tokens, vocabulary.tokens)) if a != b),
        min(len(from_file), len(vocabulary)),
    )
    return f"{len(from_file)} vs {len(vocabulary)} tokens, first difference at line {mismatch + 1}"


def token_ids(vocabulary: Vocabulary) -> dict[str, int]:
    """Token → id, for encoding many tokens fast (unknown tokens: use the ``<unk>`` id)."""
    return {token: index for index, token in enumerate(vocabulary.tokens)}


def encode_tokens(
    tokens: Sequence[str], vocabulary: Vocabulary, ids: dict[str, int] | None = None
) -> list[int]:
    """Ids of ``tokens``, with ``<unk>`` for words outside the vocabulary."""
    ids = token_ids(vocabulary) if ids is None else ids
    unk = ids[UNK_TOKEN]
    return [ids.get(token, unk) for token in tokens]


# --------------------------------------------------------------------------------------------
# Encoded corpora.


def check_document_starts(starts: torch.Tensor, tokens: int) -> None:
    """Where each document of a ``tokens``-long stream starts: increasing positions from 0."""
    if (
        starts.dim() != 1
        or starts.numel() == 0
        or int(starts[0]) != 0
        or bool((starts[1:] <= starts[:-1]).any())
        or int(starts[-1]) >= tokens
    ):
        raise ValueError(
            f"document_starts must be increasing token positions from 0, each below the "
            f"corpus's {tokens} tokens, got {starts.tolist()[:10]}"
        )


@dataclass
class EncodedCorpus:
    """A split as one token stream: ``tokens`` (int64) and the position where each document starts."""

    tokens: torch.Tensor
    document_starts: torch.Tensor
    origin: str = ""

    def __post_init__(self) -> None:
        if self.tokens.numel() == 0:
            raise DataFormatError(self.origin or "corpus", None, "the corpus is empty")
        check_document_starts(self.document_starts, self.tokens.numel())

    def __len__(self) -> int:
        return self.tokens.numel()

    @property
    def num_documents(self) -> int:
        return self.document_starts.numel()

    def document_lengths(self) -> torch.Tensor:
        ends = torch.cat([self.document_starts[1:], torch.tensor([len(self)])])
        return ends - self.document_starts

    def documents(self) -> list[torch.Tensor]:
        return list(torch.split(self.tokens, self.document_lengths().tolist()))

    def truncated(self, max_tokens: int | None) -> EncodedCorpus:
        """The first ``max_tokens`` tokens (all when ``None``), for quick runs."""
        if max_tokens is not None:
            check_int("max_tokens", max_tokens)
        if max_tokens is None or max_tokens >= len(self):
            return self
        starts = self.document_starts[self.document_starts < max_tokens]
        return EncodedCorpus(self.tokens[:max_tokens].clone(), starts.clone(), self.origin)


def encode_corpus_file(
    path: str | os.PathLike[str],
    vocabulary: Vocabulary,
    *,
    documents: DocumentRule = "auto",
    normalize_numbers: bool = False,
) -> EncodedCorpus:
    """Read and encode a corpus file with ``vocabulary`` (unknown words → ``<unk>``)."""
    ids = token_ids(vocabulary)
    unk = ids[UNK_TOKEN]
    tokens: list[int] = []
    starts: list[int] = []
    for line in read_lines(path, documents=documents, normalize_numbers=normalize_numbers):
        if line.starts_document:
            starts.append(len(tokens))
        tokens.extend(ids.get(token, unk) for token in line.tokens)
    return EncodedCorpus(
        torch.tensor(tokens, dtype=torch.long), torch.tensor(starts, dtype=torch.long), str(path)
    )


def encode_documents(documents: Sequence[Sequence[str]], vocabulary: Vocabulary) -> EncodedCorpus:
    """Encode documents given as token lists (each should end in ``<eos>``)."""
    ids = token_ids(vocabulary)
    tokens = [encode_tokens(document, vocabulary, ids) for document in documents if len(document)]
    starts = np.cumsum([0, *(len(document) for document in tokens[:-1])])
    flat = [token for document in tokens for token in document]
    return EncodedCorpus(torch.tensor(flat, dtype=torch.long), torch.from_numpy(starts).long(), "documents")


# --------------------------------------------------------------------------------------------
# Streams and segments.


@dataclass
class LMBatch:
    """One BPTT segment of ``batch`` parallel streams: ``[batch, steps]`` each.

    ``inputs`` are the tokens read, ``targets`` the tokens to predict (``pad_id`` where there is
    nothing to predict), ``resets`` are True on the first step of a document (and of a stream);
    ``positions``, when known, the index of each target in the corpus (−1 on padding).
    """

    inputs: torch.Tensor
    targets: torch.Tensor
    resets: torch.Tensor
    pad_id: int = 0
    positions: torch.Tensor | None = None

    def to(self, device: torch.device | str) -> LMBatch:
        return tensors_to(self, device, non_blocking=True)

    @property
    def target_mask(self) -> torch.Tensor:
        return self.targets != self.pad_id

    @property
    def num_targets(self) -> int:
        return int(self.target_mask.sum())


@dataclass
class Streams:
    """``[batch, length]`` inputs, targets, reset flags and corpus positions of the targets (−1 on
    padding), on the CPU; see :func:`make_streams`."""

    inputs: torch.Tensor
    targets: torch.Tensor
    resets: torch.Tensor
    pad_id: int
    positions: torch.Tensor

    @property
    def batch_size(self) -> int:
        return self.inputs.size(0)

    @property
    def length(self) -> int:
        return self.inputs.size(1)

    @property
    def num_targets(self) -> int:
        return int((self.targets != self.pad_id).sum())


StreamLayout = Literal["auto", "contiguous", "documents"]


def prediction_steps(corpus: EncodedCorpus, eos_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Inputs, targets and reset flags of every step (see the module docstring), 1-D."""
    targets = corpus.tokens
    inputs = torch.roll(targets, 1)
    inputs[corpus.document_starts] = eos_id
    resets = torch.zeros_like(targets, dtype=torch.bool)
    resets[corpus.document_starts] = True
    return inputs, targets, resets


def make_streams(
    corpus: EncodedCorpus,
    batch_size: int,
    *,
    eos_id: int,
    pad_id: int,
    layout: StreamLayout = "contiguous",
    max_padding: float = 0.1,
) -> Streams:
    """Lay the corpus out in ``batch_size`` parallel streams, padded at the end.

    * ``contiguous`` (pytorch/examples ``batchify``): stream ``b`` holds steps
      ``b·n … (b+1)·n − 1`` with ``n = ceil(steps / batch_size)``; a document may be cut between
      two streams, and the second part then starts without context (a reset).
    * ``documents``: whole documents, longest first, each to the currently shortest stream, so every
      step has its full document context and the log-likelihood does not depend on
      ``batch_size`` or the segment length.
    * ``auto``: ``documents`` unless it pads more than ``max_padding`` of the steps.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    check_choice("layout", layout, get_args(StreamLayout))
    inputs, targets, resets = prediction_steps(corpus, eos_id)
    if layout != "contiguous":
        assignment = _pack_documents(corpus.document_lengths().tolist(), batch_size)
        longest = max(sum(lengths) for _, lengths in assignment)
        if layout == "documents" or longest * batch_size <= len(corpus) * (1 + max_padding):
            return _document_streams(corpus, inputs, targets, resets, assignment, longest, pad_id)
    length = -(-len(corpus) // batch_size)
    padding = length * batch_size - len(corpus)
    stream_inputs = _pad_to(inputs, padding, pad_id).view(batch_size, length)
    stream_targets = _pad_to(targets, padding, pad_id).view(batch_size, length)
    stream_resets = _pad_to(resets, padding, False).view(batch_size, length).clone()
    stream_resets[:, 0] = True
    stream_positions = _pad_to(torch.arange(len(corpus)), padding, -1).view(batch_size, length)
    return Streams(stream_inputs, stream_targets, stream_resets, pad_id, stream_positions)


def _pad_to(values: torch.Tensor, padding: int, fill: int | bool) -> torch.Tensor:
    return torch.cat([values, torch.full((padding,), fill, dtype=values.dtype)])


def _pack_documents(lengths: list[int], batch_size: int) -> list[tuple[list[int], list[int]]]:
    """Longest documents first, each to the stream with the fewest steps so far; each stream then
    reads its documents in corpus order."""
    chosen: list[list[int]] = [[] for _ in range(batch_size)]
    heap = [(0, index) for index in range(batch_size)]
    for document in sorted(range(len(lengths)), key=lambda d: (-lengths[d], d)):
        total, index = heapq.heappop(heap)
        chosen[index].append(document)
        heapq.heappush(heap, (total + lengths[document], index))
    return [(sorted(documents), [lengths[d] for d in sorted(documents)]) for documents in chosen]


def _document_streams(
    corpus: EncodedCorpus,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    resets: torch.Tensor,
    assignment: list[tuple[list[int], list[int]]],
    length: int,
    pad_id: int,
) -> Streams:
    batch = len(assignment)
    out_inputs = torch.full((batch, length), pad_id, dtype=torch.long)
    out_targets = torch.full((batch, length), pad_id, dtype=torch.long)
    out_resets = torch.zeros((batch, length), dtype=torch.bool)
    out_positions = torch.full((batch, length), -1, dtype=torch.long)
    starts = corpus.document_starts.tolist()
    for row, (documents, lengths) in enumerate(assignment):
        if not documents:
            continue
        index = torch.cat([torch.arange(starts[d], starts[d] + n) for d, n in zip(documents, lengths)])
        out_inputs[row, : index.numel()] = inputs[index]
        out_targets[row, : index.numel()] = targets[index]
        out_resets[row, : index.numel()] = resets[index]
        out_positions[row, : index.numel()] = index
    return Streams(out_inputs, out_targets, out_resets, pad_id, out_positions)


def segments(streams: Streams, bptt: int, *, max_segments: int | None = None) -> Iterator[LMBatch]:
    """Consecutive ``[batch, bptt]`` segments (the last may be shorter); all-padding ones are skipped."""
    if bptt < 1:
        raise ValueError(f"bptt must be >= 1, got {bptt}")
    produced = 0
    for start in range(0, streams.length, bptt):
        if max_segments is not None and produced >= max_segments:
            return
        end = start + bptt
        batch = LMBatch(
            streams.inputs[:, start:end],
            streams.targets[:, start:end],
            streams.resets[:, start:end],
            streams.pad_id,
            streams.positions[:, start:end],
        )
        if bool(batch.target_mask.any()):
            produced += 1
            yield batch


def num_segments(streams: Streams, bptt: int) -> int:
    """How many segments of ``bptt`` steps :func:`segments` cuts ``streams`` into (empty ones counted)."""
    if bptt < 1:
        raise ValueError(f"bptt must be >= 1, got {bptt}")
    return -(-streams.length // bptt)


# --------------------------------------------------------------------------------------------
# Synthetic corpora (tests, benchmarks, smoke runs).


def copy_pattern_documents(
    num_documents: int,
    *,
    lines_per_document: int = 5,
    span: int = 5,
    words: int = 30,
    generator: torch.Generator | None = None,
) -> list[list[list[str]]]:
    """Documents of lines ``w_1 … w_span ; w_1 … w_span``: ``span`` random words, then the same
    words again, so the second half is predictable only by looking ``span + 1`` steps back."""
    vocabulary = [f"w{index}" for index in range(words)]
    documents = []
    for _ in range(num_documents):
        lines = []
        for _ in range(lines_per_document):
            picked = torch.randint(words, (span,), generator=generator).tolist()
            first = [vocabulary[index] for index in picked]
            lines.append([*first, ";", *first])
        documents.append(lines)
    return documents


def write_wikitext_folder(folder: str | os.PathLike[str], splits: dict[str, list[list[list[str]]]]) -> Path:
    """Write ``split → documents → lines → tokens`` as a WikiText-layout folder (``{split}.txt``,
    each document under a `` = Title = `` heading line); returns the folder."""
    folder = Path(folder)
    for split, documents in splits.items():
        text = []
        for index, lines in enumerate(documents):
            text.append(f" = Document {index} = \n")
            text.extend(f" {' '.join(tokens)} \n" for tokens in lines)
        atomic_write_text(folder / f"{split}.txt", "".join(text))
    return folder
