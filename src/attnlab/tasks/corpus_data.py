"""The language-model experiment's data: its ``data:`` config and the corpus, vocabulary and CBT it reads.

:class:`LMDataConfig` names a corpus folder in the WikiText / PTB layout and how to read it (the
file format, documents, vocabulary and streams are :mod:`attnlab.tasks.corpus`; the Children's
Book Test files :mod:`attnlab.tasks.cbt`). :func:`load_vocabulary` gives the configured
vocabulary file or builds one from the training split; :func:`load_split` and
:func:`load_corpus_file` encode a split or any file in the corpus format with the run's rules;
:func:`streams_for` lays a corpus out in parallel streams; :func:`load_cbt` reads the CBT files by
word class; :func:`absolute_data_paths` makes a run's stored config read the same files from any
working directory.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from attnlab.tasks.cbt import ClozeQuestion, read_cbt, word_class
from attnlab.tasks.corpus import (
    EncodedCorpus,
    StreamLayout,
    Streams,
    build_lm_vocabulary,
    count_words,
    encode_corpus_file,
    find_split_files,
    make_streams,
    read_vocabulary_file,
)
from attnlab.tasks.vocab import Vocabulary


@dataclass
class LMDataConfig:
    """A corpus folder in the WikiText / PTB layout and how to read it."""

    corpus: str = "../shared/data/wikitext-2"
    documents: Literal["auto", "wikitext", "none"] = "auto"
    """Document boundaries: WikiText article headings, none (PTB), or detected from the file."""
    max_vocab_size: int | None = None
    min_count: int = 1
    normalize_numbers: bool = False
    vocabulary_file: str | None = None
    """A fixed vocabulary, one token per line (``<pad>``, ``<unk>``, ``<eos>`` first); built from the
    training split when null."""
    max_tokens: dict[str, int] = field(default_factory=dict)
    """Per split, keep only the first N tokens (quick runs), e.g. ``{train: 20000}``."""
    cbt_files: list[str] = field(default_factory=list)
    """Children's Book Test files (``cbtest_{NE,CN,V,P}_*.txt``) to evaluate on after training."""

    def __post_init__(self) -> None:
        unknown = sorted(set(self.max_tokens) - {"train", "valid", "test"})
        if unknown:
            raise ValueError(f"max_tokens: unknown split(s) {unknown}; use train, valid, test")
        if any(value < 2 for value in self.max_tokens.values()):
            raise ValueError(f"max_tokens values must be >= 2, got {self.max_tokens}")
        if self.min_count < 1:
            raise ValueError(f"min_count must be >= 1, got {self.min_count}")


def load_vocabulary(data: LMDataConfig) -> Vocabulary:
    """The configured vocabulary file, or one built from the training split."""
    if data.vocabulary_file is not None:
        return read_vocabulary_file(data.vocabulary_file)
    train_file = find_split_files(data.corpus, ["train"])["train"]
    counts = count_words(train_file, documents=data.documents, normalize_numbers=data.normalize_numbers)
    return build_lm_vocabulary(counts, max_size=data.max_vocab_size, min_count=data.min_count)


def load_split(data: LMDataConfig, split: str, vocabulary: Vocabulary) -> EncodedCorpus:
    """One split of the corpus (``train``, ``valid``, ``test``), cut to ``max_tokens``."""
    path = find_split_files(data.corpus, [split])[split]
    return load_corpus_file(data, path, vocabulary).truncated(data.max_tokens.get(split))


def load_corpus_file(
    data: LMDataConfig, path: str | os.PathLike[str], vocabulary: Vocabulary
) -> EncodedCorpus:
    """Any file in the corpus format, read with the run's rules and vocabulary."""
    return encode_corpus_file(
        path, vocabulary, documents=data.documents, normalize_numbers=data.normalize_numbers
    )


def streams_for(
    corpus: EncodedCorpus, vocabulary: Vocabulary, batch_size: int, layout: StreamLayout
) -> Streams:
    """``corpus`` in ``batch_size`` parallel streams (:func:`attnlab.tasks.corpus.make_streams`)."""
    return make_streams(corpus, batch_size, eos_id=vocabulary.eos_id, pad_id=vocabulary.pad_id, layout=layout)


def load_cbt(data: LMDataConfig) -> dict[str, list[ClozeQuestion]]:
    """CBT questions per word class (the file's name gives the class, else its stem)."""
    return {f"cbt_{word_class(path) or Path(path).stem}": read_cbt(path) for path in data.cbt_files}


def absolute_data_paths(data: LMDataConfig) -> None:
    """Make the corpus, vocabulary and CBT paths absolute, so that the run's stored config reads
    the same data from any working directory."""
    data.corpus = str(Path(data.corpus).resolve())
    if data.vocabulary_file is not None:
        data.vocabulary_file = str(Path(data.vocabulary_file).resolve())
    data.cbt_files = [str(Path(file).resolve()) for file in data.cbt_files]
