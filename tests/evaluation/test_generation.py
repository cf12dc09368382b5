"""Prompts read as a corpus line is, and generated words joined back into lines."""

from attnlab.evaluation.generation import as_text, prompt_words


def test_a_line_break_ends_a_sentence_and_numbers_are_normalised_when_the_run_did():
    prompt = "the year 1990\nit rained  3.5 days"
    assert prompt_words(prompt) == ["the", "year", "1990", "<eos>", "it", "rained", "3.5", "days"]
    normalised = prompt_words(prompt, normalize_numbers=True)
    assert normalised == ["the", "year", "N", "<eos>", "it", "rained", "N", "days"]
    assert prompt_words("") == []


def test_words_are_joined_one_line_per_sentence():
    assert as_text(["a", "b", "<eos>", "c"]) == "a b\nc"
    assert as_text(["a", "<eos>"]) == "a\n"
    text = "one sentence here\nand another"
    assert as_text(prompt_words(text)) == text
