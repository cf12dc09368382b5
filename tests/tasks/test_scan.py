"""SCAN: the generator and interpreter, the IN/OUT file format and the split builders."""

from collections import Counter
from pathlib import Path

import pytest

from attnlab.tasks.examples import Seq2SeqExample
from attnlab.tasks.scan import (
    MARKERS,
    SCAN_SIZE,
    STANDARD_SPLITS,
    generate_scan,
    generate_standard_split,
    interpret,
    length_split,
    load_standard_split,
    marked_actions,
    primitive_split,
    random_split,
    read_scan_file,
    sentence_actions,
    strip_markers,
    template_split,
    write_scan_file,
)
from attnlab.tasks.tsv import DataFormatError

SCAN_ROOT = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "scan"
L, R = "I_TURN_LEFT", "I_TURN_RIGHT"

KNOWN = {
    "jump": ("I_JUMP",),
    "turn left": (L,),
    "walk right": (R, "I_WALK"),
    "turn opposite right": (R, R),
    "look opposite left": (L, L, "I_LOOK"),
    "turn around right twice": (R,) * 8,
    "jump around left twice": (L, "I_JUMP") * 8,
    "run thrice after jump": ("I_JUMP", "I_RUN", "I_RUN", "I_RUN"),
    "walk and run left": ("I_WALK", L, "I_RUN"),
    "walk opposite right thrice after run opposite right": (R, R, "I_RUN", *(R, R, "I_WALK") * 3),
}


@pytest.fixture(scope="module")
def scan_examples() -> list[Seq2SeqExample]:
    return generate_scan()


# ------------------------------------------------------------------------------ generator


def test_the_grammar_generates_20910_distinct_commands(scan_examples):
    assert len(scan_examples) == SCAN_SIZE == 20_910
    assert len({ex.source for ex in scan_examples}) == SCAN_SIZE


@pytest.mark.parametrize("command", sorted(KNOWN))
def test_known_commands_mean_what_lake_and_baroni_say(command, scan_examples):
    assert interpret(command) == KNOWN[command]
    assert Seq2SeqExample(tuple(command.split()), KNOWN[command]) in set(scan_examples)


def test_generator_and_interpreter_agree_on_every_command(scan_examples):
    assert all(interpret(ex.source) == ex.target for ex in scan_examples)


def test_vocabularies_and_output_lengths(scan_examples):
    words = {word for ex in scan_examples for word in ex.source}
    actions = {action for ex in scan_examples for action in ex.target}
    assert len(words) == 13 and len(actions) == 6
    assert max(len(ex.target) for ex in scan_examples) == 48
    assert max(len(ex.source) for ex in scan_examples) == 9


@pytest.mark.parametrize(
    "command", ["turn", "jump left left", "walk and", "jump twice thrice", "walk and run and look", "fly"]
)
def test_interpret_rejects_commands_outside_the_grammar(command):
    with pytest.raises(ValueError, match="not a SCAN command"):
        interpret(command)


@pytest.mark.parametrize(
    ("command", "actions"),
    [
        ("jump", (1,)),
        ("jump around left thrice", (24,)),
        ("jump around left thrice and walk", (24, 1)),
        ("walk after turn opposite right twice", (1, 4)),
    ],
)
def test_sentence_actions_counts_each_sentence_in_word_order(command, actions):
    assert sentence_actions(command) == actions == sentence_actions(command.split())


def test_sentence_actions_sum_to_the_command_and_reject_what_interpret_rejects(scan_examples):
    assert all(sum(sentence_actions(ex.source)) == len(ex.target) for ex in scan_examples)
    with pytest.raises(ValueError, match="not a SCAN command: 'walk and run and look'"):
        sentence_actions("walk and run and look")


def test_only_the_22_action_length_split_needs_a_sentence_longer_than_training(scan_examples):
    for cutoff, longer in ((22, 3_144), (24, 0), (26, 0), (40, 0)):
        test = length_split(scan_examples, max_train_actions=cutoff).test
        assert sum(max(sentence_actions(ex.source)) > cutoff for ex in test) == longer
    test = length_split(scan_examples, max_train_actions=22).test
    assert {ex.source[-1] for ex in test if sentence_actions(ex.source)[-1] > 22} == {"thrice"}


REP, SEP = MARKERS["repetition"], MARKERS["sentence"]


@pytest.mark.parametrize(
    ("command", "kinds", "marked"),
    [
        ("jump twice", ["repetition"], ("I_JUMP", REP, "I_JUMP")),
        ("jump twice", ["sentence"], ("I_JUMP", "I_JUMP")),
        ("turn around left thrice", ["repetition"], (L,) * 4 + (REP,) + (L,) * 4 + (REP,) + (L,) * 4),
        ("walk and run left", ["sentence"], ("I_WALK", SEP, L, "I_RUN")),
        (
            "walk thrice after run twice",
            ["repetition", "sentence"],
            ("I_RUN", REP, "I_RUN", SEP, "I_WALK", REP, "I_WALK", REP, "I_WALK"),
        ),
        ("walk opposite right twice", ["repetition"], (R, R, "I_WALK", REP, R, R, "I_WALK")),
        ("look", ["repetition", "sentence"], ("I_LOOK",)),
    ],
)
def test_marked_actions_write_the_repetitions_and_sentences_into_the_output(command, kinds, marked):
    assert marked_actions(command, kinds) == marked == marked_actions(command.split(), kinds)


def test_marked_actions_stripped_are_every_commands_interpretation(scan_examples):
    for kinds in (["repetition"], ["sentence"], ["sentence", "repetition"]):
        assert all(strip_markers(marked_actions(ex.source, kinds)) == ex.target for ex in scan_examples)
    longest = max(len(marked_actions(ex.source, ["repetition", "sentence"])) for ex in scan_examples)
    assert longest == 48 + 4 + 1  # "U around D thrice and U around D thrice": 2 x 2 <rep>, one <sep>


def test_marked_actions_refuse_unknown_kinds_and_commands():
    with pytest.raises(ValueError, match="output marker kinds must be among"):
        marked_actions("jump twice", ["clause"])
    with pytest.raises(ValueError, match="not a SCAN command: 'jump jump'"):
        marked_actions("jump jump", ["repetition"])


@pytest.mark.skipif(not (SCAN_ROOT / "tasks.txt").is_file(), reason="../shared/data/scan is absent")
def test_generator_reproduces_the_public_tasks_file(scan_examples):
    assert set(read_scan_file(SCAN_ROOT / "tasks.txt")) == set(scan_examples)


# ---------------------------------------------------------------------------- file format


def test_write_then_read_round_trips(tmp_path, scan_examples):
    examples = scan_examples[::997]
    write_scan_file(tmp_path / "tasks.txt", examples)
    assert read_scan_file(tmp_path / "tasks.txt") == examples
    assert (tmp_path / "tasks.txt").read_text().splitlines()[0] == "IN: walk OUT: I_WALK"


def test_reader_accepts_crlf_and_trailing_blank_lines(tmp_path):
    path = tmp_path / "data.txt"
    path.write_bytes(b"IN: jump twice OUT: I_JUMP I_JUMP\r\nIN: i m ok . OUT: je vais bien .\n\n\n")
    assert read_scan_file(path) == [
        Seq2SeqExample(("jump", "twice"), ("I_JUMP", "I_JUMP")),
        Seq2SeqExample(("i", "m", "ok", "."), ("je", "vais", "bien", ".")),
    ]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("jump OUT: I_JUMP", "does not start with 'IN:'"),
        ("IN: jump I_JUMP", "no 'OUT:'"),
        ("IN: jump OUT: I_JUMP OUT: I_JUMP", "more than one 'OUT:'"),
        ("IN: OUT: I_JUMP", "empty command"),
        ("IN: jump OUT:", "empty output"),
        ("", "blank line"),
        ("IN: jump OUT: <eos>", "reserved token '<eos>'"),
        ("IN: <pad> OUT: I_JUMP", "reserved token '<pad>'"),
    ],
)
def test_bad_lines_raise_errors_naming_file_and_line(tmp_path, line, message):
    path = tmp_path / "bad.txt"
    path.write_text(f"IN: walk OUT: I_WALK\n{line}\nIN: run OUT: I_RUN\n")
    with pytest.raises(DataFormatError, match=message) as caught:
        read_scan_file(path)
    assert caught.value.path == str(path) and caught.value.line == 2
    assert f"{path} line 2:" in str(caught.value)


def test_missing_and_empty_files_are_data_errors(tmp_path):
    with pytest.raises(DataFormatError, match="no such file"):
        read_scan_file(tmp_path / "absent.txt")
    (tmp_path / "empty.txt").write_text("\n")
    with pytest.raises(DataFormatError, match="empty"):
        read_scan_file(tmp_path / "empty.txt")
    (tmp_path / "latin1.txt").write_bytes(b"IN: caf\xe9 OUT: x\n")
    with pytest.raises(DataFormatError, match="UTF-8"):
        read_scan_file(tmp_path / "latin1.txt")


# ---------------------------------------------------------------------------------- splits


def test_length_split_matches_lake_and_baroni(scan_examples):
    split = length_split(scan_examples)
    assert (len(split.train), len(split.test)) == (16_990, 3_920)
    assert max(len(ex.target) for ex in split.train) == 22
    assert min(len(ex.target) for ex in split.test) == 24


@pytest.mark.parametrize(
    ("primitive", "train", "test", "copies"),
    [("jump", 14_670, 7_706, 1_467), ("turn left", 21_890, 1_208, 2_189)],
)
def test_primitive_split_matches_the_public_add_primitive_splits(
    scan_examples, primitive, train, test, copies
):
    split = primitive_split(scan_examples, primitive)
    assert (len(split.train), len(split.test)) == (train, test)
    bare = tuple(primitive.split())
    assert Counter(ex.source for ex in split.train)[bare] == copies
    words = " " + primitive + " "
    assert all(words in f" {' '.join(ex.source)} " for ex in split.test)
    assert not any(words in f" {' '.join(ex.source)} " for ex in split.train if ex.source != bare)


def test_primitive_split_without_oversampling_keeps_the_primitive_once(scan_examples):
    split = primitive_split(scan_examples, "walk", oversample_fraction=0.0)
    assert sum(ex.source == ("walk",) for ex in split.train) == 1
    assert len(split.train) + len(split.test) == SCAN_SIZE


def test_template_split_holds_out_every_match(scan_examples):
    split = template_split(scan_examples, "* around right")
    assert all(" around right" in " ".join(ex.source) for ex in split.test)
    assert not any(" around right" in " ".join(ex.source) for ex in split.train)
    assert len(split.train) + len(split.test) == SCAN_SIZE
    jump_right = template_split(scan_examples, "jump around right")
    assert 0 < len(jump_right.test) < len(split.test)


def test_random_split_is_seeded(scan_examples):
    first = random_split(scan_examples, test_fraction=0.2, seed=3)
    assert len(first.test) == round(0.2 * SCAN_SIZE)
    assert first == random_split(scan_examples, test_fraction=0.2, seed=3)
    assert first.test != random_split(scan_examples, test_fraction=0.2, seed=4).test


def test_split_builders_reject_empty_results(scan_examples):
    with pytest.raises(ValueError, match="test set empty"):
        template_split(scan_examples, "fly")
    with pytest.raises(ValueError, match="not a command of its own"):
        primitive_split(scan_examples, "fly")
    with pytest.raises(ValueError, match="training set empty"):
        length_split(scan_examples, max_train_actions=0)


def test_standard_split_loader_reads_the_public_layout(tmp_path):
    for train_file, test_file in STANDARD_SPLITS.values():
        write_scan_file(tmp_path / train_file, [Seq2SeqExample(("walk",), ("I_WALK",))])
        write_scan_file(tmp_path / test_file, [Seq2SeqExample(("jump",), ("I_JUMP",))])
    split = load_standard_split("addprim_jump", tmp_path)
    assert split.train[0].source == ("walk",) and split.test[0].source == ("jump",)
    with pytest.raises(DataFormatError, match="SCAN split 'add_jump': no file named tasks_train_add_jump"):
        load_standard_split("add_jump", tmp_path)


@pytest.mark.skipif(not (SCAN_ROOT / "tasks.txt").is_file(), reason="../shared/data/scan is absent")
@pytest.mark.parametrize("name", ["length", "addprim_jump", "addprim_turn_left"])
def test_generated_splits_equal_the_public_files(name):
    public = load_standard_split(name, SCAN_ROOT)
    generated = generate_standard_split(name)
    assert Counter(public.train) == Counter(generated.train)
    assert Counter(public.test) == Counter(generated.test)
