"""Property-based tests (hypothesis) of every reader of a public data format: machine-tasks TSV,
SCAN and English–French ``IN: … OUT: …``, WikiText/PTB corpora and vocabulary files, and the
Children's Book Test. A valid file round-trips (written by the project's writer, read back equal,
also with CRLF line ends and trailing blank lines); a file broken on one line raises
:class:`DataFormatError` naming the file and that line; arbitrary bytes are read or raise that
error, never another exception. The real corpora in ``shared/data`` are not needed here."""

from __future__ import annotations

from pathlib import Path

from hypothesis import assume, given
from hypothesis import strategies as st

from attnlab.tasks import scan
from attnlab.tasks.cbt import BLANK, ClozeQuestion, read_cbt, write_cbt
from attnlab.tasks.corpus import (
    EOS_TOKEN,
    LM_SPECIALS,
    build_lm_vocabulary,
    read_lines,
    read_vocabulary_file,
    write_vocabulary_file,
    write_wikitext_folder,
)
from attnlab.tasks.examples import Seq2SeqExample
from attnlab.tasks.tsv import read_tsv, write_tsv
from attnlab.tasks.vocab import PAD_TOKEN, SOS_TOKEN

from .fuzzing import (
    NOISE_BYTES,
    assert_user_error,
    insert_line,
    line_of,
    read_or_user_error,
    replace_line,
    tokens,
    write_bytes,
)

RESERVED = (PAD_TOKEN, SOS_TOKEN, EOS_TOKEN)
INVALID_UTF8 = st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x80abc", b"\xf8\x88\x80\x80\x80"])


def _crlf(data: bytes) -> bytes:
    return data.replace(b"\n", b"\r\n")


# ------------------------------------------------------------------------- machine-tasks TSV

TSV_TOKEN = tokens(RESERVED)


@st.composite
def tsv_example(draw: st.DrawFn, with_attention: bool | None = None) -> Seq2SeqExample:
    source = tuple(draw(st.lists(TSV_TOKEN, min_size=1, max_size=5)))
    target = tuple(draw(st.lists(TSV_TOKEN, min_size=1, max_size=5)))
    attend = draw(st.booleans()) if with_attention is None else with_attention
    attention = None
    if attend:
        indices = st.integers(0, len(source) - 1)
        attention = tuple(draw(st.lists(indices, min_size=len(target) + 1, max_size=len(target) + 1)))
    return Seq2SeqExample(source, target, attention)


TSV_FILES = st.lists(tsv_example(), min_size=1, max_size=6)


@given(examples=TSV_FILES, crlf=st.booleans(), trailing=st.sampled_from([b"", b"\n", b"\n \n\t\n"]))
def test_tsv_valid_files_round_trip(tmp_path: Path, examples, crlf: bool, trailing: bytes) -> None:
    path = tmp_path / "data.tsv"
    write_tsv(path, examples)
    assert read_tsv(path) == examples
    data = path.read_bytes()
    path.write_bytes((_crlf(data) if crlf else data) + trailing)
    assert read_tsv(path) == examples


@st.composite
def tsv_file_and_line(draw: st.DrawFn) -> tuple[list[Seq2SeqExample], int]:
    """Two or more examples, all with or all without attention, and a line number ≥ 2."""
    attention = draw(st.booleans())
    examples = draw(st.lists(tsv_example(attention), min_size=2, max_size=5))
    return examples, draw(st.integers(2, len(examples)))


def _tsv_bytes(folder: Path, case: tuple[list[Seq2SeqExample], int]) -> tuple[bytes, int]:
    """The bytes :func:`write_tsv` writes for the examples of ``case``, and its line number."""
    examples, number = case
    write_tsv(folder / "data.tsv", examples)
    return (folder / "data.tsv").read_bytes(), number


@given(case=tsv_file_and_line(), data=st.data())
def test_tsv_a_line_that_lost_or_gained_a_tab_is_an_error_at_that_line(tmp_path: Path, case, data) -> None:
    text, number = _tsv_bytes(tmp_path, case)
    line = line_of(text, number)
    tabs = [index for index, byte in enumerate(line) if byte == ord("\t")]
    if data.draw(st.booleans(), label="lose a tab"):
        cut = data.draw(st.sampled_from(tabs), label="tab")
        broken = line[:cut] + data.draw(st.sampled_from([b" ", b""]), label="glue") + line[cut + 1 :]
    else:  # a tab inside a field (or at either end of the line)
        position = data.draw(st.integers(0, len(line)), label="position")
        broken = line[:position] + b"\t" + line[position:]
    assert_user_error(
        read_tsv, write_bytes(tmp_path, replace_line(text, number, broken), "broken.tsv"), number
    )


@given(case=tsv_file_and_line(), data=st.data())
def test_tsv_a_broken_line_is_an_error_at_that_line(tmp_path: Path, case, data) -> None:
    text, number = _tsv_bytes(tmp_path, case)
    columns = line_of(text, number).split(b"\t")
    kind = data.draw(st.sampled_from(["blank", "undecodable", "empty field", "reserved", "bad index"]))
    if kind == "blank":
        broken = insert_line(text, number, data.draw(st.sampled_from([b"", b" ", b"\t", b"\r"])))
    elif kind == "undecodable":
        field = data.draw(st.integers(0, len(columns) - 1))
        columns[field] += data.draw(INVALID_UTF8)
        broken = replace_line(text, number, b"\t".join(columns))
    elif kind == "empty field":
        columns[data.draw(st.integers(0, 1))] = data.draw(st.sampled_from([b"", b"  "]))
        broken = replace_line(text, number, b"\t".join(columns))
    elif kind == "reserved":
        field = data.draw(st.integers(0, 1))
        columns[field] += b" " + data.draw(st.sampled_from([b"<pad>", b"<eos>"] if field else [b"<pad>"]))
        broken = replace_line(text, number, b"\t".join(columns))
    else:  # an attention column that is not len(target) + 1 source indices
        source, target = columns[0].split(), columns[1].split()
        bad = data.draw(
            st.sampled_from(
                [
                    b" ".join([b"0"] * len(target)),  # one index too few
                    b" ".join([b"0"] * (len(target) + 2)),
                    b" ".join([str(len(source)).encode()] * (len(target) + 1)),  # out of range
                    b" ".join([b"-1"] * (len(target) + 1)),
                    b" ".join([b"x"] * (len(target) + 1)),
                    b" ".join([b"9" * 4400] * (len(target) + 1)),  # too long for int()
                ]
            )
        )
        columns = [*columns[:2], bad]
        other_lines_have_three = len(line_of(text, 1).split(b"\t")) == 3
        assume(other_lines_have_three)
        broken = replace_line(text, number, b"\t".join(columns))
    assert_user_error(read_tsv, write_bytes(tmp_path, broken, "broken.tsv"), number)


@given(data=st.sampled_from([b"", b"\n", b"\r\n", b" \n\n\t\n"]))
def test_tsv_an_empty_file_is_an_error_about_the_file(tmp_path: Path, data: bytes) -> None:
    assert_user_error(read_tsv, write_bytes(tmp_path, data, "empty.tsv"), None)


@given(data=NOISE_BYTES)
def test_tsv_arbitrary_bytes_are_read_or_a_data_format_error(tmp_path: Path, data: bytes) -> None:
    path = write_bytes(tmp_path, data, "noise.tsv")
    examples = read_or_user_error(read_tsv, path)
    if examples is not None:  # what was accepted can be written and read back unchanged
        write_tsv(tmp_path / "again.tsv", examples)
        assert read_tsv(tmp_path / "again.tsv") == examples


# ---------------------------------------------------------------- SCAN and English–French

SCAN_TOKEN = tokens((*RESERVED, "IN:", "OUT:"), max_size=6)


@st.composite
def scan_example(draw: st.DrawFn) -> Seq2SeqExample:
    return Seq2SeqExample(
        tuple(draw(st.lists(SCAN_TOKEN, min_size=1, max_size=6))),
        tuple(draw(st.lists(SCAN_TOKEN, min_size=1, max_size=6))),
    )


SCAN_FILES = st.lists(scan_example(), min_size=1, max_size=6)


@given(examples=SCAN_FILES, crlf=st.booleans(), trailing=st.sampled_from([b"", b"\n", b"\n \n\r\n"]))
def test_scan_valid_files_round_trip(tmp_path: Path, examples, crlf: bool, trailing: bytes) -> None:
    path = tmp_path / "tasks.txt"
    scan.write_scan_file(path, examples)
    assert scan.read_scan_file(path) == examples
    data = path.read_bytes()
    path.write_bytes((_crlf(data) if crlf else data) + trailing)
    assert scan.read_scan_file(path) == examples


@given(
    example=scan_example(),
    bad=st.sampled_from(["", " ", "a b", "a\tb", "x\ny", "IN:", "OUT:", "<pad>"]),
    where=st.sampled_from(["source", "target"]),
)
def test_scan_writer_refuses_what_the_reader_would_read_differently(
    tmp_path: Path, example: Seq2SeqExample, bad: str, where: str
) -> None:
    if where == "source":
        example = Seq2SeqExample((*example.source, bad), example.target)
    else:
        example = Seq2SeqExample(example.source, (bad, *example.target))
    path = tmp_path / "out.txt"
    path.unlink(missing_ok=True)
    assert_user_error(lambda p: scan.write_scan_file(p, [example]), path, 1)
    assert not path.exists()


@given(examples=st.lists(scan_example(), min_size=1, max_size=5), data=st.data())
def test_scan_a_broken_line_is_an_error_at_that_line(tmp_path: Path, examples, data) -> None:
    path = tmp_path / "tasks.txt"
    scan.write_scan_file(path, examples)
    text = path.read_bytes()
    number = data.draw(st.integers(1, len(examples)), label="line")
    line = line_of(text, number)
    command, output = line[len(b"IN: ") :].split(b" OUT: ")
    kind = data.draw(
        st.sampled_from(["no IN", "no OUT", "two OUT", "two IN", "empty", "blank", "undecodable", "reserved"])
    )
    broken_line = {
        "no IN": command + b" OUT: " + output,
        "no OUT": b"IN: " + command + b" " + output,
        "two OUT": b"IN: " + command + b" OUT: " + output + b" OUT: " + output,
        "two IN": b"IN: " + command + b" IN: OUT: " + output,
        "empty": data.draw(st.sampled_from([b"IN: OUT: " + output, b"IN: " + command + b" OUT:"])),
        "undecodable": line + data.draw(INVALID_UTF8),
        "reserved": b"IN: " + command + b" OUT: " + output + b" <eos>",
    }.get(kind)
    if kind == "blank":
        broken = insert_line(text, number, data.draw(st.sampled_from([b"", b"  ", b"\r", b"\t"])))
    else:
        broken = replace_line(text, number, broken_line)
    assert_user_error(scan.read_scan_file, write_bytes(tmp_path, broken, "broken.txt"), number)


@given(data=NOISE_BYTES)
def test_scan_arbitrary_bytes_are_read_or_a_data_format_error(tmp_path: Path, data: bytes) -> None:
    path = write_bytes(tmp_path, data, "noise.txt")
    examples = read_or_user_error(scan.read_scan_file, path)
    if examples is not None:
        scan.write_scan_file(tmp_path / "again.txt", examples)
        assert scan.read_scan_file(tmp_path / "again.txt") == examples


# ---------------------------------------------------------------- WikiText / PTB corpora

CORPUS_TOKEN = tokens((PAD_TOKEN, EOS_TOKEN, "="), max_size=6)
DOCUMENTS = st.lists(
    st.lists(st.lists(CORPUS_TOKEN, max_size=6), min_size=1, max_size=4), min_size=1, max_size=4
).filter(lambda documents: any(tokens for lines in documents for tokens in lines))


@given(documents=DOCUMENTS, crlf=st.booleans())
def test_corpus_valid_files_round_trip(tmp_path: Path, documents, crlf: bool) -> None:
    """Every line comes back with its tokens and ``<eos>``; each article heading starts a document."""
    path = write_wikitext_folder(tmp_path / "corpus", {"train": documents}) / "train.txt"
    if crlf:
        path.write_bytes(_crlf(path.read_bytes()))
    lines = list(read_lines(path))
    expected, starts = [], []
    for index, document in enumerate(documents):
        starts.append(len(expected) + 1)
        expected.append(["=", "Document", str(index), "=", EOS_TOKEN])
        expected.extend([*tokens, EOS_TOKEN] for tokens in document)
    assert [line.tokens for line in lines] == expected
    assert [line.number for line in lines if line.starts_document] == starts
    assert [line.starts_document for line in read_lines(path, documents="none")].count(True) == 1


@given(documents=DOCUMENTS, data=st.data())
def test_corpus_a_broken_line_is_an_error_at_that_line(tmp_path: Path, documents, data) -> None:
    path = write_wikitext_folder(tmp_path / "corpus", {"train": documents}) / "train.txt"
    text = path.read_bytes()
    number = data.draw(st.integers(1, text.count(b"\n")), label="line")
    line = line_of(text, number)
    if data.draw(st.booleans(), label="undecodable"):
        broken = line + data.draw(INVALID_UTF8)
    else:
        broken = line + b" " + data.draw(st.sampled_from([b"<pad>", b"<eos>"]))
    path.write_bytes(replace_line(text, number, broken))
    assert_user_error(lambda p: list(read_lines(p)), path, number)


@given(data=st.sampled_from([b"", b"\n", b" \n\r\n\t\n"]))
def test_corpus_without_a_word_is_an_error_about_the_file(tmp_path: Path, data: bytes) -> None:
    assert_user_error(lambda p: list(read_lines(p)), write_bytes(tmp_path, data, "empty.txt"), None)


@given(data=NOISE_BYTES, rule=st.sampled_from(["auto", "wikitext", "none"]))
def test_corpus_arbitrary_bytes_are_read_or_a_data_format_error(tmp_path: Path, data: bytes, rule) -> None:
    path = write_bytes(tmp_path, data, "noise.txt")
    lines = read_or_user_error(lambda p: list(read_lines(p, documents=rule, normalize_numbers=True)), path)
    if lines is not None:
        assert [line.number for line in lines] == list(range(1, len(lines) + 1))
        assert lines[0].starts_document and all(line.tokens[-1] == EOS_TOKEN for line in lines)


@given(words=st.lists(CORPUS_TOKEN, min_size=1, max_size=20), crlf=st.booleans())
def test_vocabulary_files_round_trip(tmp_path: Path, words: list[str], crlf: bool) -> None:
    from collections import Counter

    vocabulary = build_lm_vocabulary(Counter(words))
    path = tmp_path / "vocabulary.txt"
    write_vocabulary_file(path, vocabulary)
    if crlf:
        path.write_bytes(_crlf(path.read_bytes()))
    assert read_vocabulary_file(path).tokens == vocabulary.tokens


@given(data=NOISE_BYTES, header=st.booleans())
def test_vocabulary_arbitrary_bytes_are_read_or_a_data_format_error(tmp_path: Path, data, header) -> None:
    prefix = "".join(f"{token}\n" for token in LM_SPECIALS).encode() if header else b""
    path = write_bytes(tmp_path, prefix + data, "vocabulary.txt")
    vocabulary = read_or_user_error(read_vocabulary_file, path)
    if vocabulary is not None:
        assert tuple(vocabulary.tokens[:3]) == LM_SPECIALS


# ------------------------------------------------------------------ Children's Book Test

CBT_WORD = tokens((BLANK,), max_size=5)
CANDIDATE = tokens((BLANK,), max_size=5).filter(lambda word: "|" not in word)


@st.composite
def cloze_questions(draw: st.DrawFn, context_sentences: int) -> list[ClozeQuestion]:
    questions = []
    for index in range(draw(st.integers(1, 3))):
        context = tuple(
            tuple(draw(st.lists(CBT_WORD, min_size=1, max_size=5))) for _ in range(context_sentences)
        )
        words = draw(st.lists(CBT_WORD, max_size=5))
        query = tuple(words[: len(words) // 2]) + (BLANK,) + tuple(words[len(words) // 2 :])
        candidates = tuple(draw(st.lists(CANDIDATE, min_size=2, max_size=10, unique=True)))
        answer = draw(st.sampled_from(candidates))
        line = (index + 1) * (context_sentences + 2) - 1  # blocks of n + 1 lines and a blank line
        questions.append(ClozeQuestion(context, query, answer, candidates, line))
    return questions


@st.composite
def cbt_files(draw: st.DrawFn) -> tuple[int, list[ClozeQuestion]]:
    context_sentences = draw(st.integers(1, 4))
    return context_sentences, draw(cloze_questions(context_sentences))


@given(case=cbt_files(), crlf=st.booleans())
def test_cbt_valid_files_round_trip(tmp_path: Path, case, crlf: bool) -> None:
    context_sentences, questions = case
    path = tmp_path / "cbtest_NE_test_2500ex.txt"
    write_cbt(path, questions)
    if crlf:
        path.write_bytes(_crlf(path.read_bytes()))
    assert read_cbt(path, context_sentences=context_sentences) == questions


@given(case=cbt_files(), data=st.data())
def test_cbt_a_broken_line_is_an_error_at_that_line(tmp_path: Path, case, data) -> None:
    context_sentences, questions = case
    path = tmp_path / "cbtest_CN_valid_2000ex.txt"
    write_cbt(path, questions)
    text = path.read_bytes()
    question = data.draw(st.sampled_from(questions), label="question")
    query_line = question.line
    number = data.draw(st.integers(query_line - context_sentences, query_line), label="line")
    line = line_of(text, number)
    kind = data.draw(st.sampled_from(["renumbered", "undecodable", "lost tab", "query early", "blank"]))
    if kind == "renumbered":
        rest = line.split(b" ", 1)[1]
        prefix = data.draw(st.sampled_from([b"0 ", b"99 ", b"x ", b"01 ", b"9" * 4400 + b" "]))
        broken = replace_line(text, number, prefix + rest)
    elif kind == "undecodable":
        broken = replace_line(text, number, line + data.draw(INVALID_UTF8))
    elif kind == "lost tab":
        assume(number == query_line)  # the tab between the query and the answer (empty fields are
        broken = replace_line(text, number, line.replace(b"\t", b" ", 1))  # ignored: the others may go)
    elif kind == "query early":  # a tab in a context sentence
        assume(number < query_line)
        broken = replace_line(text, number, line + b"\tanswer")
    else:  # a blank line inside the question: its first part is too short
        assume(number > query_line - context_sentences)
        broken = insert_line(text, number, b"")
        number -= 1
    path.write_bytes(broken)
    assert_user_error(lambda p: read_cbt(p, context_sentences=context_sentences), path, number)


@given(case=cbt_files(), data=st.data())
def test_cbt_a_bad_query_is_an_error_at_its_line(tmp_path: Path, case, data) -> None:
    context_sentences, questions = case
    question = data.draw(st.sampled_from(questions))
    kind = data.draw(st.sampled_from(["no blank", "two blanks", "answer", "duplicate", "one candidate"]))
    query, answer, candidates = list(question.query), question.answer, list(question.candidates)
    if kind == "no blank":
        query.remove(BLANK)
    elif kind == "two blanks":
        query.append(BLANK)
    elif kind == "answer":
        answer = "|".join(candidates)  # never a candidate
    elif kind == "duplicate":
        candidates.append(candidates[0])
    else:
        candidates, answer = candidates[:1], candidates[0]
    broken = ClozeQuestion(question.context, tuple(query), answer, tuple(candidates), question.line)
    path = tmp_path / "cbtest_V_train.txt"
    write_cbt(path, [broken if q is question else q for q in questions])
    assert_user_error(lambda p: read_cbt(p, context_sentences=context_sentences), path, question.line)


@given(data=NOISE_BYTES, context_sentences=st.integers(1, 3))
def test_cbt_arbitrary_bytes_are_read_or_a_data_format_error(tmp_path: Path, data, context_sentences) -> None:
    path = write_bytes(tmp_path, data, "cbtest_P_test.txt")
    read_or_user_error(lambda p: read_cbt(p, context_sentences=context_sentences), path)


@given(data=st.sampled_from([b"", b"\n", b" \n\r\n\t\n"]))
def test_cbt_an_empty_file_is_an_error_about_the_file(tmp_path: Path, data: bytes) -> None:
    assert_user_error(read_cbt, write_bytes(tmp_path, data, "cbtest_NE_test.txt"), None)


# ------------------------------------------------------------------ attnlab translate's sources

SOURCE_WORDS = ("jump", "walk", "twice", "after", "left")
SOURCE_LINES = st.lists(
    st.lists(st.sampled_from([*SOURCE_WORDS, "jmup", PAD_TOKEN, " ", "\t", "\r"]), max_size=5), max_size=6
).map(lambda lines: "\n".join(" ".join(words) for words in lines).encode())


@given(data=NOISE_BYTES | SOURCE_LINES, unk=st.booleans())
def test_translate_sources_from_arbitrary_bytes_are_read_or_a_user_error(data: bytes, unk: bool) -> None:
    """Bytes on standard input (or in a --file) become sources of known words, or of ``<unk>`` where
    the vocabulary has it; anything else is a user error naming standard input and, for one bad
    source, its line — never another exception."""
    from attnlab.evaluation.translation import read_sources
    from attnlab.tasks.scan_data import UNK_TOKEN
    from attnlab.tasks.tsv import DataFormatError, lines_of_bytes
    from attnlab.tasks.vocab import UnknownTokenError, Vocabulary

    specials = (PAD_TOKEN, UNK_TOKEN) if unk else (PAD_TOKEN,)
    vocabulary = Vocabulary([*specials, *SOURCE_WORDS], specials=specials)
    try:
        lines = lines_of_bytes(data, "standard input", "nothing to read")
        sources, unknown = read_sources([line.rstrip("\r") for line in lines], vocabulary, "standard input")
    except UnknownTokenError as error:
        assert not unk and str(error).startswith(f"unknown token {error.token!r} at standard input line ")
        return
    except DataFormatError as error:
        assert error.path == "standard input" and str(error).startswith("standard input")
        return
    assert len(sources) == len(lines) and all(sources)
    for source, line in zip(sources, lines):
        words = line.split()
        assert len(source) == len(words) and PAD_TOKEN not in source
        for token, word in zip(source, words):
            assert token == word or (token == UNK_TOKEN and word in unknown)
