"""``attnlab translate``: a trained sequence-to-sequence run decodes given sources exactly as its
evaluation decoded its test sets (the same outputs as ``eval/<set>.predictions.tsv``), with the
attention that produced each output; bad sources are named, never decoded."""

import io
import json
from pathlib import Path

import pytest

from attnlab.cli import main
from attnlab.evaluation.translation import read_sources
from attnlab.experiments.base import TranslationRequest
from attnlab.experiments.lookup.experiment import EXPERIMENT as LOOKUP
from attnlab.models.transformer import TransformerSeq2Seq
from attnlab.tasks.tsv import DataFormatError
from attnlab.tasks.vocab import UnknownTokenError, Vocabulary

SCAN_TINY = [
    "model.embedding_dim=16",
    "model.encoder_hidden_dim=16",
    "model.decoder_hidden_dim=32",
    "model.encoder_layers=1",
    "model.dropout=0.0",
    "training.epochs=2",
    "training.batch_size=16",
    "training.progress=false",
]


def _scan_files_overrides(files: dict[str, Path]) -> list[str]:
    """A SCAN run on the files of ``make_scan_files``."""
    test_files = f"data.test_files={{test: {files['test']}}}"
    return ["data.split=files", f"data.train_file={files['train']}", test_files]


def _predictions(path: Path) -> tuple[list[str], list[str]]:
    """The sources and predictions of an ``eval/<set>.predictions.tsv``."""
    header, *rows = (line.split("\t") for line in path.read_text().splitlines())
    source, prediction = header.index("source"), header.index("prediction")
    return [row[source] for row in rows], [row[prediction] for row in rows]


@pytest.fixture(scope="module")
def lookup_run(tmp_path_factory, tiny_overrides) -> Path:
    run = tmp_path_factory.mktemp("translate") / "lookup"
    assert main(["train", "lookup", *tiny_overrides(), "--run-dir", str(run)]) == 0
    return run


def test_a_lookup_run_translates_its_test_set_as_its_evaluation_did(lookup_run, tmp_path, capsys):
    sources, predicted = _predictions(lookup_run / "eval" / "long1.predictions.tsv")
    listed = tmp_path / "sources.txt"
    listed.write_text("\n".join(sources) + "\n")
    out = tmp_path / "translations.json"
    capsys.readouterr()
    assert main(["translate", str(lookup_run), "--file", str(listed), "--out", str(out)]) == 0
    assert capsys.readouterr().out.splitlines() == predicted
    result = json.loads(out.read_text())
    assert [" ".join(t["output"]) for t in result["translations"]] == predicted
    assert result["unknown"] == []
    for source, translation in zip(sources, result["translations"]):
        assert translation["source"] == source.split()
        steps = len(translation["output"]) + translation["stopped"]  # <eos> is a step
        assert len(translation["attention"]) == steps
        for weights in translation["attention"]:
            assert len(weights) == len(translation["source"])
            assert sum(weights) == pytest.approx(1.0, abs=1e-5)


def test_the_python_api_gives_the_same_outputs_one_source_at_a_time(lookup_run):
    """Sources of 4-6 tokens (interpolation): each decoded alone gets its own length budget, as in
    the evaluation's batches beside longer ones (outputs that run to it included)."""
    sources, predicted = _predictions(lookup_run / "eval" / "interpolation.predictions.tsv")
    assert len({len(source.split()) for source in sources}) > 1
    alone = [
        LOOKUP.translate(lookup_run, TranslationRequest((source,)))["translations"][0]["output"]
        for source in sources[:20]
    ]
    assert [" ".join(output) for output in alone] == predicted[:20]
    small_batches = LOOKUP.translate(
        lookup_run, TranslationRequest(tuple(sources), overrides=("evaluation.batch_size=7",))
    )
    assert [" ".join(t["output"]) for t in small_batches["translations"]] == predicted


def test_one_string_is_not_read_as_a_source_a_letter(lookup_run):
    with pytest.raises(TypeError, match="not one string"):
        LOOKUP.translate(lookup_run, TranslationRequest("000 t1 t2 ."))  # the missing comma


def test_sources_from_the_command_line_and_standard_input(lookup_run, capsys, monkeypatch):
    sources, predicted = _predictions(lookup_run / "eval" / "long1.predictions.tsv")
    capsys.readouterr()
    assert main(["translate", str(lookup_run), "--sources", *sources[:3]]) == 0
    assert capsys.readouterr().out.splitlines() == predicted[:3]
    typed = (
        "\ufeff" + "\r\n".join(sources[3:6]) + "\r\n\n"
    )  # a byte-order mark, CRLF, a blank line at the end
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(typed.encode())))
    assert main(["translate", str(lookup_run)]) == 0
    assert capsys.readouterr().out.splitlines() == predicted[3:6]


@pytest.mark.parametrize(
    ("typed", "message"),
    [
        (b"000 t1 .\n000 t\xe9 .\n", "standard input line 2: not valid UTF-8"),
        (b"\n\n", "standard input: nothing to read; expected sources, one a line"),
    ],
)
def test_bad_standard_input_is_named(lookup_run, capsys, monkeypatch, typed, message):
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(typed)))
    assert main(["translate", str(lookup_run)]) == 2
    error = capsys.readouterr().err
    assert message in error and "Traceback" not in error


def test_a_shorter_budget_from_an_override_cuts_the_outputs(lookup_run, capsys):
    sources, _ = _predictions(lookup_run / "eval" / "long1.predictions.tsv")
    capsys.readouterr()
    assert main(["translate", str(lookup_run), "evaluation.max_length=1", "--sources", *sources[:4]]) == 0
    captured = capsys.readouterr()
    assert [len(line.split()) for line in captured.out.splitlines()] == [1, 1, 1, 1]
    assert "4 of 4 outputs reached the decoding budget without <eos> (evaluation.max_length" in captured.err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--sources", "000 t1 .", "000 zz ."], "unknown token 'zz' at source 2"),
        (["--sources", "000 t1 .", "   "], "source 2: empty; a source needs at least one token"),
        (["--sources", "000 t1 .", "--file", "x.txt"], "with --sources or --file, not both"),
        (["--file", "no_such_file.txt"], "no_such_file.txt: no such file"),
        (["evaluation.max_lenght=4", "--sources", "000 t1 ."], "did you mean 'max_length'?"),
        (["--sources", "000 t1 .", "evaluation.max_length=4"], "put the overrides before --sources"),
        (["--sources", "000 t1 <pad> ."], "source 1: the source contains the reserved token '<pad>'"),
        (["--sources", "000 t1 pad ."], "unknown token 'pad' at source 1"),
        (["model.hidden_dim=8", "--sources", "000 t1 ."], "'model.hidden_dim=8' would change what the run"),
    ],
)
def test_bad_sources_are_named(lookup_run, capsys, argv, message):
    assert main(["translate", str(lookup_run), *argv]) == 2
    error = capsys.readouterr().err
    assert message in error and "Traceback" not in error and "did you mean '<pad>'" not in error


def test_a_file_names_its_line(lookup_run, tmp_path, capsys):
    listed = tmp_path / "sources.txt"
    listed.write_text("000 t1 .\n\n000 t1 t2 .\n")
    assert main(["translate", str(lookup_run), "--file", str(listed)]) == 2
    assert f"{listed} line 2: empty" in capsys.readouterr().err


def test_an_unknown_word_is_read_as_unk_only_where_the_vocabulary_has_it():
    closed = Vocabulary(["<pad>", "jump", "walk"])
    with pytest.raises(UnknownTokenError, match="unknown token 'jmup' at source 1.*did you mean 'jump'"):
        read_sources(["jmup twice"], closed)
    with pytest.raises(DataFormatError, match="f.txt line 2: empty"):
        read_sources(["jump", ""], closed, "f.txt")
    open_ = Vocabulary(["<pad>", "<unk>", "jump", "walk"], specials=("<pad>", "<unk>"))
    tokens, unknown = read_sources(["jump twice", "twice walk twice"], open_)
    assert tokens == [("jump", "<unk>"), ("<unk>", "walk", "<unk>")] and unknown == ["twice"]
    assert read_sources(["jump <unk>"], open_)[0] == [("jump", "<unk>")]


def test_a_source_longer_than_a_learned_position_table_is_named():
    model = TransformerSeq2Seq(10, 10, d_model=8, heads=2, ff_dim=8, positional="learned", max_positions=6)
    assert model.max_source_length == 6
    marked = TransformerSeq2Seq(
        10, 10, d_model=8, heads=2, ff_dim=8, positional="learned", max_positions=6, end_marker=True
    )
    assert marked.max_source_length == 5  # the end marker takes a position
    assert (
        TransformerSeq2Seq(10, 10, d_model=8, heads=2, ff_dim=8, positional="rope").max_source_length is None
    )
    vocabulary = Vocabulary(["<pad>", "a"])
    assert read_sources(["a " * 5], vocabulary, max_length=5)[0] == [("a",) * 5]
    with pytest.raises(DataFormatError, match="source 2: 6 tokens, more than the 5 positions"):
        read_sources(["a", "a " * 6], vocabulary, max_length=5)


def test_runs_that_do_not_translate_say_which_do(tmp_path, tiny_memory_addition, capsys):
    run = tmp_path / "memory"
    assert main(["train", "memory_addition", *tiny_memory_addition, "--run-dir", str(run)]) == 0
    capsys.readouterr()
    assert main(["translate", str(run), "--sources", "1 2"]) == 2
    assert "translate applies to Lookup Tables and SCAN runs" in capsys.readouterr().err


def test_a_scan_run_translates_with_its_stop_rule_as_evaluate_does(make_scan_files, tmp_path, capsys):
    """Syntactic Attention stopping from its attention on the end marker, decoded with another stop
    threshold: translate's outputs are those of ``attnlab evaluate`` with the same override."""
    files = make_scan_files("translate_scan", 200, 40)
    run = tmp_path / "scan"
    data = _scan_files_overrides(files)
    stop = ["model.end_marker=true", "model.stop_from_attention=true"]
    assert main(["train", "scan", *data, *stop, *SCAN_TINY, "--run-dir", str(run)]) == 0
    rule = "evaluation.stop_threshold=0.3"
    assert main(["evaluate", str(run), rule, "--out", str(tmp_path / "evaluated")]) == 0
    sources, predicted = _predictions(tmp_path / "evaluated" / "test.predictions.tsv")
    _, predicted_by_the_run = _predictions(run / "eval" / "test.predictions.tsv")
    assert predicted != predicted_by_the_run  # the rule changes outputs, so the test can fail
    out = tmp_path / "translations.json"
    capsys.readouterr()
    assert main(["translate", str(run), rule, "--sources", *sources, "--out", str(out)]) == 0
    assert capsys.readouterr().out.splitlines() == predicted
    first = json.loads(out.read_text())["translations"][0]
    assert len(first["attention"][0]) == len(first["source"]) + 1  # the end marker's column


def test_a_run_with_unk_reads_an_unseen_word_as_unk(make_scan_files, tmp_path, capsys):
    """A run with data.unknown_words=unk (English-French's setting): an unseen word is decoded as
    <unk>, named once on stderr and listed in the JSON."""
    files = make_scan_files("translate_unk", 200, 20)
    run = tmp_path / "scan_unk"
    data = [*_scan_files_overrides(files), "data.unknown_words=unk"]
    assert main(["train", "scan", *data, *SCAN_TINY, "--run-dir", str(run)]) == 0
    out = tmp_path / "translations.json"
    capsys.readouterr()
    assert main(["translate", str(run), "--sources", "jump dax twice", "dax", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert captured.err.count("read as <unk>: ['dax']") == 1 and len(captured.out.splitlines()) == 2
    result = json.loads(out.read_text())
    assert result["unknown"] == ["dax"]
    assert [t["source"] for t in result["translations"]] == [["jump", "<unk>", "twice"], ["<unk>"]]


def test_a_transformer_translation_has_every_layer_and_head():
    """``heads`` holds each decoder layer's and head's cross-attention over the steps and columns of
    ``attention``, whose last layer's mean over heads is ``attention`` itself."""
    import torch

    from attnlab.evaluation.seq2seq import decode_within_budget
    from attnlab.evaluation.translation import translate
    from attnlab.experiments.seq2seq_common import decoded_cross_attention_maps
    from attnlab.tasks.vocab import SOURCE_SPECIALS, TARGET_SPECIALS

    torch.manual_seed(0)
    model = TransformerSeq2Seq(
        6, 7, d_model=16, heads=2, ff_dim=16, cross_attention=["dot", "shift"], end_marker=True, dropout=0.0
    ).eval()
    source = Vocabulary([*SOURCE_SPECIALS, "a", "b", "c", "d", "e"])
    target = Vocabulary([*TARGET_SPECIALS, "x", "y", "z", "w"], specials=TARGET_SPECIALS)
    result = translate(
        model,
        source,
        target,
        ["a b c", "d e a b c d"],
        lambda batch, padding: decode_within_budget(model, batch, padding, max_length=None),
        torch.device("cpu"),
        head_maps=lambda batch, padding, out: decoded_cross_attention_maps(model, batch, padding, out),
    )
    assert result["head_names"] == model.head_names
    for translation in result["translations"]:
        heads = torch.tensor(translation["heads"])  # [layers, heads, steps, source + end marker]
        attention = torch.tensor(translation["attention"])
        assert heads.shape == (2, 2, *attention.shape) and attention.size(1) == len(translation["source"]) + 1
        torch.testing.assert_close(heads[-1].mean(dim=0), attention, atol=1e-5, rtol=0)
