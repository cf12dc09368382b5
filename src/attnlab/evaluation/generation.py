"""Text from a trained language model (``attnlab generate``): prompts read as the corpus is, samples
decoded to words with the attention of each, and words joined back into lines."""

from __future__ import annotations

from typing import Any

import torch

from attnlab.models.language_model import LanguageModel
from attnlab.tasks.corpus import EOS_TOKEN, encode_tokens, normalize_token
from attnlab.tasks.vocab import Vocabulary


def generate_text(
    model: LanguageModel,
    vocabulary: Vocabulary,
    prompt: str,
    *,
    words: int,
    samples: int,
    temperature: float,
    top_k: int | None,
    seed: int,
    normalize_numbers: bool,
    device: torch.device,
) -> dict[str, Any]:
    """Sample ``samples`` continuations of ``words`` words after ``prompt``
    (:meth:`LanguageModel.generate <attnlab.models.language_model.LanguageModel.generate>`, never
    ``<pad>``, its generator seeded with ``seed``).

    The prompt (see :func:`prompt_words`) starts a document; words outside the vocabulary are read
    as ``<unk>``. Returns the ``prompt`` words as read, the ``unknown`` ones, and per sample the
    generated ``words`` and, for attentive models, the ``attention`` of each word over the window
    (oldest position first).
    """
    read = prompt_words(prompt, normalize_numbers=normalize_numbers)
    prompt_ids = [vocabulary.eos_id, *encode_tokens(read, vocabulary)]
    generation = model.generate(
        torch.tensor([prompt_ids] * samples, device=device),
        words,
        temperature=temperature,
        top_k=top_k,
        banned=(vocabulary.pad_id,),
        generator=torch.Generator(device=device).manual_seed(seed),
    )
    tokens = vocabulary.tokens
    result = []
    for row, sampled in enumerate(generation.tokens.tolist()):
        sample: dict[str, Any] = {"words": [tokens[index] for index in sampled]}
        if generation.attention is not None:
            sample["attention"] = generation.attention[row].tolist()
        result.append(sample)
    unknown = list(dict.fromkeys(word for word in read if word not in vocabulary))
    return {"prompt": read, "unknown": unknown, "samples": result}


def prompt_words(prompt: str, *, normalize_numbers: bool = False) -> list[str]:
    """The words of ``prompt`` as a corpus line is read: split on whitespace, numbers normalised
    if the run did so, and ``<eos>`` at the end of every line but the last (a line break ends a
    sentence; so does a literal ``<eos>``)."""
    lines = prompt.split("\n")
    words = [word for line in lines[:-1] for word in (*line.split(), EOS_TOKEN)] + lines[-1].split()
    return [normalize_token(word) for word in words] if normalize_numbers else words


def as_text(words: list[str]) -> str:
    """Words joined by spaces, one line per ``<eos>``-terminated sentence."""
    lines: list[list[str]] = [[]]
    for word in words:
        if word == EOS_TOKEN:
            lines.append([])
        else:
            lines[-1].append(word)
    return "\n".join(" ".join(line) for line in lines)
