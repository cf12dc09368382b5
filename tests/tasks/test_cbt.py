"""The Children's Book Test file format and language-model cloze scoring (Daniluk et al. 2017, Fig. 2d)."""

import pytest
import torch

from attnlab.evaluation.perplexity import answer_cloze, evaluate_cbt, score_cloze
from attnlab.models.language_model import LanguageModel
from attnlab.tasks.cbt import ClozeQuestion, read_cbt, word_class, write_cbt
from attnlab.tasks.corpus import LM_SPECIALS
from attnlab.tasks.tsv import DataFormatError
from attnlab.tasks.vocab import Vocabulary

CONTEXT = [f"the cat sat on the mat {i} times ." for i in range(1, 21)]
QUERY = "21 the XXXXX sat on the mat .\tcat\t\tdog|cat|hat|mat|sun|pan|fox|box|cow|owl"


def _block(context=CONTEXT, query=QUERY) -> str:
    return "\n".join([*(f"{i} {s}" for i, s in enumerate(context, start=1)), query]) + "\n"


def test_reads_the_official_layout(tmp_path):
    path = tmp_path / "cbtest_CN_test_2500ex.txt"
    path.write_text(_block() + "\n" + _block(query=QUERY.replace("\tcat\t", "\tdog\t")) + "\n")
    questions = read_cbt(path)
    assert len(questions) == 2 and word_class(path) == "CN"
    first = questions[0]
    assert len(first.context) == 20 and first.context[0][:3] == ("the", "cat", "sat")
    assert first.query == ("the", "XXXXX", "sat", "on", "the", "mat", ".")
    assert first.answer == "cat" and first.answer_index == 1 and len(first.candidates) == 10
    assert first.filled("dog")[1] == "dog" and first.line == 21 and questions[1].line == 43
    assert questions[1].answer == "dog"
    write_cbt(tmp_path / "again.txt", questions)
    assert read_cbt(tmp_path / "again.txt") == [
        ClozeQuestion(q.context, q.query, q.answer, q.candidates, q.line) for q in questions
    ]


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        (_block(context=CONTEXT[:19], query=QUERY.replace("21 ", "20 ")), 20, "found the query at line 20"),
        ("\n".join(_block().splitlines()[:20]) + "\n", 20, "ends after 20 lines"),
        (_block().replace("\n7 the cat", "\n8 the cat"), 7, "start with '7 '"),
        (_block(query=QUERY.replace("\tcat\t", "\towl2\t")), 21, "not among the candidates"),
        (_block(query=QUERY.replace("XXXXX", "cat")), 21, "XXXXX"),
        (_block(query=QUERY.replace("\t\tdog|", "\t\t")), None, None),  # 9 candidates are fine
        (_block(query="21 the XXXXX sat .\tcat"), 21, "3 tab-separated fields"),
        (_block(query=QUERY.replace("dog|", "cat|")), 21, "duplicate candidates"),
        ("", None, "no questions"),
    ],
)
def test_bad_question_blocks_name_file_and_line(tmp_path, text, line, message):
    path = tmp_path / "cbtest_NE_valid_2000ex.txt"
    path.write_text(text)
    if message is None:
        assert len(read_cbt(path)[0].candidates) == 9
        return
    with pytest.raises(DataFormatError, match=message) as error:
        read_cbt(path)
    assert error.value.path == str(path) and error.value.line == line


def _vocabulary() -> Vocabulary:
    words = sorted(
        {w for s in CONTEXT for w in s.split()} | set(QUERY.split("\t")[-1].split("|")) | {"XXXXX"}
    )
    return Vocabulary([*LM_SPECIALS, *words], LM_SPECIALS)


@pytest.mark.parametrize("variant", ["lstm", "key_value_predict"])
def test_scores_are_the_log_probability_of_the_filled_query_given_the_context(tmp_path, variant):
    vocabulary = _vocabulary()
    torch.manual_seed(0)
    model = LanguageModel(len(vocabulary), variant=variant, embedding_dim=6, hidden_dim=9, window=3).eval()
    path = tmp_path / "cbtest_V_test_2500ex.txt"
    path.write_text(_block())
    question = read_cbt(path)[0]
    scores = score_cloze(model, vocabulary, question, "cpu")
    # Reference: the whole document (context + filled query) in one pass, summing the query's tokens.
    ids = {token: i for i, token in enumerate(vocabulary.tokens)}
    context = [ids[t] for s in question.context for t in (*s, "<eos>")]
    for candidate, score in zip(question.candidates, scores):
        query = [ids[t] for t in (*question.filled(candidate), "<eos>")]
        tokens = torch.tensor([context + query])
        inputs = torch.cat([torch.tensor([[ids["<eos>"]]]), tokens[:, :-1]], 1)
        resets = torch.zeros_like(inputs, dtype=torch.bool)
        resets[0, 0] = True
        log_probs = torch.log_softmax(model(inputs, resets).logits, -1)[0, -len(query) :]
        expected = log_probs.gather(-1, torch.tensor(query)[:, None]).sum()
        assert score == pytest.approx(float(expected.detach()), abs=1e-4)
    assert answer_cloze(model, vocabulary, question, "cpu") == max(range(10), key=lambda i: scores[i])


def test_a_model_that_learned_the_story_answers_correctly(tmp_path):
    """Train a tiny LM on the context pattern: it must prefer 'cat' in 'the XXXXX sat on the mat'."""
    vocabulary = _vocabulary()
    torch.manual_seed(0)
    model = LanguageModel(
        len(vocabulary), variant="key_value", embedding_dim=8, hidden_dim=16, window=2, init_range=0.5
    )
    ids = {token: i for i, token in enumerate(vocabulary.tokens)}
    text = torch.tensor([[ids[t] for s in CONTEXT for t in (*s.split(), "<eos>")]])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(60):
        loss = torch.nn.functional.cross_entropy(model(text[:, :-1]).logits[0], text[0, 1:])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    path = tmp_path / "cbtest_CN_test_2500ex.txt"
    path.write_text(_block())
    results = evaluate_cbt(model.eval(), vocabulary, {"CN": read_cbt(path)}, "cpu")
    assert results == {"CN": {"accuracy": 1.0, "questions": 1}}
