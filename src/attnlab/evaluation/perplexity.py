"""Language-model evaluation: streamed perplexity, attention statistics and CBT cloze accuracy.

* :func:`evaluate_perplexity` runs a model over BPTT segments (kept on the CPU, moved to the
  device one at a time) carrying its state, and returns the mean negative log-likelihood per
  token and the perplexity ``exp`` of it; with ``attention_statistics`` also the average
  attention weight per window position (Daniluk et al. 2017, Figure 3b), over the steps whose
  whole window lies inside their document. With ``token_nll`` it also writes each target's
  negative log-likelihood at its corpus position, and :func:`sentence_losses` sums those per
  sentence: the units of a paired significance test (:mod:`attnlab.evaluation.significance`).
* :func:`score_cloze` / :func:`evaluate_cbt` answer Children's Book Test questions the way a
  language model does (Daniluk et al. 2017, §5.1, Fig. 2d): each candidate fills the blank and
  scores the log-probability of the query sentence given the context; the best scoring
  candidate is the answer. Accuracy is reported per word class (NE, CN, V, P).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from attnlab.models.language_model import LanguageModel, ModelState
from attnlab.tasks.cbt import ClozeQuestion
from attnlab.tasks.corpus import EOS_TOKEN, EncodedCorpus, LMBatch, check_document_starts, token_ids
from attnlab.tasks.vocab import Vocabulary


def segment_loss(logits: torch.Tensor, batch: LMBatch) -> tuple[torch.Tensor, int]:
    """The summed negative log-likelihood of ``batch``'s real targets, and their number."""
    nll = F.cross_entropy(
        logits.reshape(-1, logits.size(-1)),
        batch.targets.reshape(-1),
        ignore_index=batch.pad_id,
        reduction="sum",
    )
    return nll, batch.num_targets


def steps_since_document_start(
    resets: torch.Tensor, carried: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``[batch, T]``: how many earlier steps of its document each step has (``carried`` ``[batch]``
    is the count of the step before the segment, plus one); also the carry for the next segment."""
    steps = torch.arange(resets.size(1), device=resets.device)
    last_reset = torch.where(resets, steps, torch.full_like(steps, -1)).cummax(dim=1).values
    since = torch.where(last_reset >= 0, steps - last_reset, carried.unsqueeze(1) + steps)
    return since, since[:, -1] + 1


def token_losses(logits: torch.Tensor, batch: LMBatch, token_nll: torch.Tensor) -> tuple[torch.Tensor, int]:
    """:func:`segment_loss`, also writing each target's NLL into ``token_nll`` (a CPU tensor as long
    as the corpus) at the target's corpus position."""
    if batch.positions is None:
        raise ValueError("per-token losses need segments that carry corpus positions (make_streams)")
    nll = F.cross_entropy(
        logits.reshape(-1, logits.size(-1)),
        batch.targets.reshape(-1),
        ignore_index=batch.pad_id,
        reduction="none",
    )
    positions = batch.positions.reshape(-1)
    real = positions >= 0
    token_nll[positions[real].cpu()] = nll[real].to(token_nll.dtype).cpu()
    return nll.double().sum(), batch.num_targets


def sentence_losses(
    token_nll: torch.Tensor, tokens: torch.Tensor, eos_id: int, document_starts: torch.Tensor
) -> dict[str, list[float]]:
    """Per sentence (the tokens up to and including each ``<eos>``; a last sentence without one
    counts too): ``document`` (the index of the document it is in), ``first_token`` (its corpus
    position), ``tokens`` and ``nll`` (summed, nats)."""
    if token_nll.shape != tokens.shape or bool(torch.isnan(token_nll).any()):
        raise ValueError("token_nll must hold a loss for every token of the corpus")
    check_document_starts(document_starts, tokens.numel())
    is_end = tokens == eos_id
    is_end[-1] = True
    sentence = torch.cumsum(is_end, 0) - is_end.long()
    count = int(sentence[-1]) + 1
    nll = torch.zeros(count, dtype=torch.float64).index_add_(0, sentence, token_nll.double())
    lengths = torch.bincount(sentence, minlength=count)
    firsts = torch.cumsum(lengths, 0) - lengths
    documents = torch.searchsorted(document_starts, firsts, right=True) - 1
    return {
        "document": documents.tolist(),
        "first_token": firsts.tolist(),
        "tokens": lengths.tolist(),
        "nll": nll.tolist(),
    }


@torch.no_grad()
def evaluate_perplexity(
    model: LanguageModel,
    segments: Iterable[LMBatch],
    device: torch.device | str,
    *,
    attention_statistics: bool = False,
    token_nll: torch.Tensor | None = None,
) -> dict[str, Any]:
    """``loss`` (mean NLL per token, nats), ``perplexity`` and ``tokens`` over ``segments``.

    With ``attention_statistics`` and an attentive model, also ``attention_by_position``: the mean
    weight of each window position (oldest first) over steps with a full window. With
    ``token_nll`` (a CPU tensor as long as the corpus), each target's NLL is written into it at
    the target's corpus position (see :func:`token_losses`).
    """
    model.eval()
    state: ModelState | None = None
    total, count = torch.zeros((), dtype=torch.float64, device=device), 0
    window = model.window
    weight_sum = torch.zeros(max(window, 1), dtype=torch.float64, device=device)
    weight_steps = 0
    carried: torch.Tensor | None = None
    for batch in segments:
        batch = batch.to(device)
        output = model(batch.inputs, batch.resets, state, padding_mask=~batch.target_mask)
        state = output.state
        if token_nll is None:
            nll, n = segment_loss(output.logits.float(), batch)
        else:
            nll, n = token_losses(output.logits.float(), batch, token_nll)
        total += nll.double()
        count += n
        if attention_statistics and output.attention is not None:
            if carried is None:
                carried = torch.zeros(batch.inputs.size(0), dtype=torch.long, device=device)
            since, carried = steps_since_document_start(batch.resets, carried)
            full = (since >= window) & batch.target_mask
            weight_sum += output.attention[full].double().sum(0)
            weight_steps += int(full.sum())
    if count == 0:
        raise ValueError("no tokens to evaluate")
    loss = float(total) / count
    result: dict[str, float | list[float]] = {"loss": loss, "perplexity": math.exp(loss), "tokens": count}
    if attention_statistics and window:
        result["attention_by_position"] = (weight_sum / max(weight_steps, 1)).tolist()
        result["attention_steps"] = weight_steps
    return result


def evaluate_corpus(
    model: LanguageModel,
    segments: Iterable[LMBatch],
    corpus: EncodedCorpus,
    eos_id: int,
    device: torch.device,
) -> tuple[dict[str, Any], dict[str, list[float]]]:
    """:func:`evaluate_perplexity` of a whole ``corpus`` (read as ``segments``) with the attention
    statistics, and the NLL of each of its sentences (:func:`sentence_losses`)."""
    token_nll = torch.full((len(corpus),), float("nan"), dtype=torch.float64)
    metrics = evaluate_perplexity(model, segments, device, attention_statistics=True, token_nll=token_nll)
    return metrics, sentence_losses(token_nll, corpus.tokens, eos_id, corpus.document_starts)


# --------------------------------------------------------------------------------------------
# Children's Book Test.


@torch.no_grad()
def score_cloze(
    model: LanguageModel, vocabulary: Vocabulary, question: ClozeQuestion, device: torch.device | str
) -> list[float]:
    """``log p(query with candidate | context)`` for every candidate (context sentences and the
    query each end in ``<eos>``; the document starts at the first context sentence)."""
    ids = token_ids(vocabulary)
    unk, eos = ids["<unk>"], ids[EOS_TOKEN]
    context = [ids.get(token, unk) for sentence in question.context for token in (*sentence, EOS_TOKEN)]
    state = _read_context(model, context, eos, device)
    queries = [
        [ids.get(token, unk) for token in (*question.filled(c), EOS_TOKEN)] for c in question.candidates
    ]
    targets = torch.tensor(queries, device=device)  # all queries have the same length
    inputs = torch.cat(
        [torch.full((len(queries), 1), context[-1] if context else eos, device=device), targets[:, :-1]], 1
    )
    state = model.repeat_state(state, len(queries)) if state is not None else None
    resets = None
    if state is None:  # no context: the query starts the document
        resets = torch.zeros_like(inputs, dtype=torch.bool)
        resets[:, 0] = True
    logits = model(inputs, resets, state).logits.float()
    log_probs = torch.log_softmax(logits, -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return log_probs.sum(1).tolist()


def _read_context(
    model: LanguageModel, context: Sequence[int], eos: int, device: torch.device | str
) -> ModelState | None:
    if not context:
        return None
    inputs = torch.tensor([[eos, *context[:-1]]], device=device)
    resets = torch.zeros_like(inputs, dtype=torch.bool)
    resets[0, 0] = True
    return model(inputs, resets).state


def answer_cloze(
    model: LanguageModel, vocabulary: Vocabulary, question: ClozeQuestion, device: torch.device | str
) -> int:
    """The index of the best-scoring candidate (the first one on ties)."""
    scores = score_cloze(model, vocabulary, question, device)
    return max(range(len(scores)), key=lambda index: (scores[index], -index))


def evaluate_cbt(
    model: LanguageModel,
    vocabulary: Vocabulary,
    questions_by_class: Mapping[str, Sequence[ClozeQuestion]],
    device: torch.device | str,
) -> dict[str, dict[str, float]]:
    """Accuracy and number of questions per word class (e.g. ``{"NE": {...}, "V": {...}}``)."""
    model.eval()
    results = {}
    for name, questions in questions_by_class.items():
        if not questions:
            raise ValueError(
                f"word class {name!r} has no questions: an accuracy of 0 questions is not a number"
            )
        correct = sum(answer_cloze(model, vocabulary, q, device) == q.answer_index for q in questions)
        results[name] = {"accuracy": correct / len(questions), "questions": len(questions)}
    return results
