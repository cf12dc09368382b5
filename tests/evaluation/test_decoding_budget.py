"""The Lookup Tables evaluation's decoding budget (``2·S + 10`` tokens without ``evaluation.max_length``)
is each source's own: an output does not depend on the longer sources decoded beside it."""

import torch

from attnlab.evaluation.seq2seq import decode_within_budget, decoding_budget
from attnlab.models.seq2seq import RecurrentSeq2Seq

PAD, EOS = 0, 2


def _never_stopping_model() -> RecurrentSeq2Seq:
    """A model whose outputs run to the budget: ``<eos>`` is never the most probable token."""
    torch.manual_seed(0)
    model = RecurrentSeq2Seq(12, 9, embedding_dim=8, hidden_dim=16).eval()
    with torch.no_grad():
        model.generator.bias[EOS] = -1e4
    return model


def _padded(rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(map(len, rows))
    source = torch.tensor([row + [PAD] * (width - len(row)) for row in rows])
    return source, source == PAD


def test_a_source_decodes_alike_alone_and_beside_a_longer_one():
    model = _never_stopping_model()
    short, long = [3, 4, 5], [3, 4, 5, 6, 7, 8, 9, 10]
    alone = decode_within_budget(model, *_padded([short]), max_length=None)
    beside = decode_within_budget(model, *_padded([short, long]), max_length=None)
    own_budget = decoding_budget(len(short))
    assert alone.tokens.size(1) == own_budget and (alone.tokens[0] != PAD).all()
    assert torch.equal(beside.tokens[0, :own_budget], alone.tokens[0])
    assert (beside.tokens[0, own_budget:] == PAD).all() and (beside.attention[0, own_budget:] == 0).all()
    assert torch.allclose(beside.attention[0, :own_budget, : len(short)], alone.attention[0], atol=1e-6)
    assert (beside.tokens[1] != PAD).all()  # the longer source keeps its longer budget


def test_a_configured_max_length_is_every_sources_budget():
    model = _never_stopping_model()
    decoded = decode_within_budget(model, *_padded([[3, 4], [3, 4, 5, 6, 7]]), max_length=7)
    assert decoded.tokens.shape == (2, 7) and (decoded.tokens != PAD).all()


def test_translate_gives_an_unstopped_source_the_same_result_alone_and_beside_a_longer_one():
    """The attention of an output that never stops has a row per decoded step of its own budget,
    not of the batch's (no zero rows from a longer source's budget)."""
    from attnlab.evaluation.translation import translate
    from attnlab.tasks.vocab import SOURCE_SPECIALS, TARGET_SPECIALS, Vocabulary

    model = _never_stopping_model()
    source = Vocabulary([*SOURCE_SPECIALS, *(f"w{i}" for i in range(11))])
    target = Vocabulary([*TARGET_SPECIALS, *(f"v{i}" for i in range(6))], specials=TARGET_SPECIALS)

    def decode(batch: torch.Tensor, padding: torch.Tensor):
        return decode_within_budget(model, batch, padding, max_length=None)

    short, long = "w1 w2 w3", "w1 w2 w3 w4 w5 w6 w7 w8"
    alone = translate(model, source, target, [short], decode, torch.device("cpu"))["translations"][0]
    beside = translate(model, source, target, [short, long], decode, torch.device("cpu"))["translations"][0]
    assert not alone["stopped"] and len(alone["output"]) == len(alone["attention"]) == decoding_budget(3)
    assert beside["output"] == alone["output"] and len(beside["attention"]) == len(alone["attention"])
