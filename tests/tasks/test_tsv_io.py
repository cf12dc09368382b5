"""machine-tasks TSV reading and writing: round trips, atomic writes, and every error message."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import attnlab.io
from attnlab.tasks.examples import Seq2SeqExample
from attnlab.tasks.lookup import LookupTablesSpec, generate_lookup_tables
from attnlab.tasks.tsv import DataFileNotFoundError, DataFormatError, read_tsv, write_tsv

FIXTURES = Path(__file__).parent / "fixtures"


def ex(source: str, target: str, attention: str | None = None) -> Seq2SeqExample:
    att = None if attention is None else tuple(int(i) for i in attention.split())
    return Seq2SeqExample(tuple(source.split()), tuple(target.split()), att)


def test_reads_the_machine_tasks_sample() -> None:
    examples = read_tsv(FIXTURES / "machine_tasks_sample.tsv")
    assert examples == [
        ex("000 t1 .", "000 110", "0 1 2"),
        ex("110 t1 .", "110 110", "0 1 2"),
        ex("110 t2 .", "110 100", "0 1 2"),
        ex("000 t1 t1 t2 .", "000 110 110 100", "0 1 2 3 4"),
        ex("000 t2 ! t1 .", "000 110"),  # an empty attention column
    ]


def test_round_trip_of_generated_splits(tmp_path: Path) -> None:
    spec = LookupTablesSpec(variant="noisy", long_levels=1, long_size=200)
    for name, examples in generate_lookup_tables(spec).items():
        path = tmp_path / f"{name}.tsv"
        write_tsv(path, examples)
        assert read_tsv(path) == examples


def test_round_trip_mixed_attention_and_exact_text(tmp_path: Path) -> None:
    examples = [ex("a b .", "x y", "0 1 2"), ex("c .", "z"), ex("d", "w w w", "0 0 0 0")]
    path = tmp_path / "mixed.tsv"
    write_tsv(path, examples)
    # every line has the third column, empty where there is no attention
    assert path.read_text(encoding="utf-8") == "a b .\tx y\t0 1 2\nc .\tz\t\nd\tw w w\t0 0 0 0\n"
    assert read_tsv(str(path)) == examples


def test_tolerates_crlf_trailing_blank_lines_and_empty_third_column(tmp_path: Path) -> None:
    path = tmp_path / "windows.tsv"
    path.write_bytes(b"a b\tx\t0 1\r\nc\ty z\t\r\n\r\n\n  \n")
    assert read_tsv(path) == [ex("a b", "x", "0 1"), ex("c", "y z")]


def _write(tmp_path: Path, text: str | bytes, name: str = "data.tsv") -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("a\tb\n c d\n", 2, "expected 2 or 3 tab-separated columns (source, target[, attention]), found 1"),
        ("a\tb\tc\td\n", 1, "expected 2 or 3 tab-separated columns (source, target[, attention]), found 4"),
        ("a\tb\n\tb\n", 2, "empty source; expected space-separated tokens"),
        ("a\t \n", 1, "empty target; expected space-separated tokens"),
        ("a b\tx\t0 one\n", 1, "attention index 'one' is not an integer"),
        ("a b\tx\t0 1.5\n", 1, "attention index '1.5' is not an integer"),
        (
            "a b\tx y\t0 1\n",
            1,
            "expected 3 attention indices (one per target token plus one for <eos>, "
            "len(target) = 2), found 2",
        ),
        ("a b\tx\t0 1 1\n", 1, "expected 2 attention indices"),
        (
            "a\tx\t\nb\tz\t\nc d\ty\t0 2\n",
            3,
            "attention index 2 out of range; expected 0..1 (the source has 2 tokens)",
        ),
        ("a b\tx\t-1 0\n", 1, "attention index -1 out of range"),
        ("a b\tx <eos>\n", 1, "the target contains the reserved token '<eos>' (<eos> is implicit"),
        ("a <pad>\tx\n", 1, "the source contains the reserved token '<pad>'"),
        ("a\tb\n\nc\td\n", 2, "blank line; blank lines are only allowed at the end of the file"),
        (b"a\tb\nc\t\xff\n", 2, "not valid UTF-8"),
    ],
)
def test_format_errors_name_file_line_and_expectation(
    tmp_path: Path, text: str | bytes, line: int, message: str
) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(DataFormatError) as info:
        read_tsv(path)
    error = info.value
    assert str(error).startswith(f"{path} line {line}: ")
    assert message in str(error)
    assert (error.path, error.line) == (str(path), line)
    assert isinstance(error, ValueError)


@pytest.mark.parametrize("text", ["", "\n\n", "  \n"])
def test_empty_file(tmp_path: Path, text: str) -> None:
    path = _write(tmp_path, text, "empty.tsv")
    with pytest.raises(DataFormatError, match="empty.tsv: the file is empty; expected one example per line"):
        read_tsv(path)


def test_missing_file_and_directory(tmp_path: Path) -> None:
    missing = tmp_path / "nope.tsv"
    with pytest.raises(DataFileNotFoundError, match="nope.tsv: no such file") as info:
        read_tsv(missing)
    assert isinstance(info.value, FileNotFoundError) and isinstance(info.value, DataFormatError)
    with pytest.raises(DataFormatError, match="is a directory"):
        read_tsv(tmp_path)


@pytest.mark.parametrize(
    ("examples", "message"),
    [
        ([ex("a", "b"), Seq2SeqExample(("a",), ())], "line 2: cannot write an empty target"),
        ([Seq2SeqExample((), ("b",))], "line 1: cannot write an empty source"),
        ([Seq2SeqExample(("a b",), ("x",))], "line 1: source token 'a b' is empty or contains whitespace"),
        ([Seq2SeqExample(("a",), ("x\ty",))], "line 1: target token 'x\\ty' is empty"),
        ([Seq2SeqExample(("a",), ("x", "<eos>"))], "line 1: the target contains the reserved token '<eos>'"),
        ([Seq2SeqExample(("a",), ("x",), (0,))], "line 1: expected 2 attention indices"),
        ([Seq2SeqExample(("a",), ("x",), (0, 1))], "line 1: attention index 1 out of range"),
        ([], "no examples to write"),
    ],
)
def test_write_rejects_invalid_examples_and_leaves_file_intact(
    tmp_path: Path, examples: list[Seq2SeqExample], message: str
) -> None:
    path = tmp_path / "out.tsv"
    path.write_text("old\tcontent\n")
    with pytest.raises(DataFormatError, match=message.replace("\\", "\\\\")):
        write_tsv(path, examples)
    assert path.read_text() == "old\tcontent\n"
    assert os.listdir(tmp_path) == ["out.tsv"]


def test_write_is_atomic_when_interrupted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "out.tsv"
    path.write_text("old\tcontent\n")

    def fail(_source: str, _destination: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(attnlab.io.os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        write_tsv(path, [ex("a", "b")])
    assert path.read_text() == "old\tcontent\n"
    assert os.listdir(tmp_path) == ["out.tsv"]  # no temporary file left behind


def test_write_creates_parent_directories_and_replaces(tmp_path: Path) -> None:
    path = tmp_path / "new" / "dir" / "data.tsv"
    write_tsv(path, [ex("a", "b")])
    write_tsv(path, [ex("c", "d", "0 0")])
    assert read_tsv(path) == [ex("c", "d", "0 0")]
    assert sorted(os.listdir(path.parent)) == ["data.tsv"]


def test_written_file_gets_ordinary_permissions(tmp_path: Path) -> None:
    path = tmp_path / "data.tsv"
    write_tsv(path, [ex("a", "b")])
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask
    path.chmod(0o640)
    write_tsv(path, [ex("c", "d")])
    assert path.stat().st_mode & 0o777 == 0o640


def test_a_row_that_lost_a_tab_in_a_three_column_file_is_rejected(tmp_path: Path) -> None:
    """Issue 25: ``000 t1 .<TAB>000 110 0 1 2`` (the tab before the attention lost) must not be read
    as a target ``000 110 0 1 2``; every row must have as many columns as the first."""
    path = _write(tmp_path, "000 t1 .\t000 110\t0 1 2\n110 t1 .\t110 110 0 1 2\n110 t2 .\t110 100\t0 1 2\n")
    with pytest.raises(DataFormatError) as info:
        read_tsv(path)
    assert (info.value.path, info.value.line) == (str(path), 2)
    assert "found 2 tab-separated columns, but line 1 has 3" in str(info.value)
    assert "every line of a file must have the same number of columns" in str(info.value)


def test_a_row_with_an_extra_column_in_a_two_column_file_is_rejected(tmp_path: Path) -> None:
    path = _write(tmp_path, "a b\tx\nc d\ty\t0 1\n")
    with pytest.raises(DataFormatError, match=r"line 2: found 3 tab-separated columns, but line 1 has 2"):
        read_tsv(path)
