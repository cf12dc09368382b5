"""The command line's help and messages, as a new user reads them."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from attnlab.cli import build_parser, main
from attnlab.experiments.registry import recipes

REPOSITORY = Path(__file__).resolve().parents[1]


def _help(argv, capsys) -> str:
    """The help text, with lines that argparse broke after a hyphen joined again."""
    with pytest.raises(SystemExit) as stop:
        main([*argv, "--help"])
    assert stop.value.code == 0
    return re.sub(r"-\n\s+", "-", capsys.readouterr().out)


def _usage_error(argv, capsys) -> str:
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["multiseed", "lookup", "--seeds", "0", "1", "training.epochs=2"], "--seeds"),
        (["reproduce", "dubois2020", "--tasks", "long", "training.epochs=2"], "--tasks"),
    ],
)
def test_an_override_read_as_an_options_value_says_where_overrides_go(argv, option, capsys):
    """argparse gives an option taking several values every word up to the next option."""
    error = _usage_error(argv, capsys)
    assert f"argument {option}: invalid" in error and f"'{argv[-1]}'" in error
    assert error.endswith(
        f"a key=value override after {option} is read as one of its values: put the overrides before {option}"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["multiseed", "lookup", "--seeds", "0", "x"], "argument --seeds: invalid int value: 'x'"),
        (
            ["plot", "runs/a", "--index", "0", "evaluation.batch_size=4"],
            "invalid int value: 'evaluation.batch_size=4'",
        ),
        (
            ["reproduce", "dubois2020", "--jobs", "training.epochs=2"],
            "invalid int value: 'training.epochs=2'",
        ),
    ],
    ids=["no-equals-sign", "command-without-overrides", "one-value-option"],
)
def test_other_bad_values_get_argparses_message_alone(argv, message, capsys):
    """No advice to move overrides where the command takes none (plot) or the option reads one value."""
    assert _usage_error(argv, capsys).endswith(message)


def test_top_level_help_has_no_markup(capsys):
    text = _help([], capsys)
    assert "``" not in text and "attnlab" in text


@pytest.mark.parametrize("paper", sorted(recipes()))
def test_reproduce_help_lists_choices_once(paper, capsys):
    text = _help(["reproduce", paper], capsys)
    parser = build_parser()._subparsers._group_actions[0].choices["reproduce"]  # noqa: SLF001
    recipe = parser._subparsers._group_actions[0].choices[paper]  # noqa: SLF001
    choices = [str(choice) for action in recipe._actions if action.choices for choice in action.choices]  # noqa: SLF001
    assert choices  # every recipe has options with choices
    assert "{" not in text  # no argparse choice lists, in the usage line and again beside each option
    words = re.findall(r"[\w.-]+", text)
    for choice in choices:
        assert choice in words, (choice, text)


@pytest.mark.parametrize("paper", sorted(recipes()))
def test_reproduce_help_describes_the_recipe_in_whole_sentences(paper, capsys):
    """The description is the docstring's first paragraph, not its first line cut mid-sentence."""
    text = _help(["reproduce", paper], capsys)
    description = " ".join(text.split("\n\n")[1].split())  # after the usage block
    first_paragraph = " ".join(recipes()[paper].__doc__.strip().split("\n\n")[0].split())
    assert description == first_paragraph.replace("``", "")
    assert description.endswith((".", ")")), description


def test_dubois2020_help_names_each_attender_once(capsys):
    from attnlab.experiments.lookup import recipe as dubois2020

    words = re.findall(r"[\w.-]+", _help(["reproduce", "dubois2020"], capsys))
    for attender in [*dubois2020.ATTENDERS, *dubois2020.EXTRAPOLATING]:
        assert words.count(attender) == 1, attender


def _write_dubois_run(root, task, attender, seed):
    from attnlab.experiments.lookup import recipe as dubois2020

    metrics = {"seq_acc": 50.0, "seq_acc_be": 60.0, "attn_loss": 1.0}
    path = root / task / attender / f"seed{seed}" / "eval" / "summary.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({name: metrics for name in dubois2020.TEST_SETS}))


def test_reproduce_says_where_it_wrote_its_files(tmp_path, capsys):
    out = tmp_path / "dubois"
    _write_dubois_run(out, "long", "mix", 0)
    assert main(["reproduce", "dubois2020", "--report-only", "--out", str(out)]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert str(out.resolve()) in last and "results.md" in last


@pytest.mark.parametrize("paper", sorted(recipes()))
def test_report_only_on_a_missing_folder_is_an_error_that_writes_nothing(tmp_path, capsys, paper):
    out = tmp_path / "typo"
    assert main(["reproduce", paper, "--report-only", "--out", str(out)]) == 2
    error = capsys.readouterr().err
    assert f"--out {out}: no such folder" in error and "Traceback" not in error
    assert not out.exists()


def test_readme_data_example_writes_where_git_does_not_track(tmp_path):
    """``attnlab data --out DIR`` as the README shows it writes to a folder git ignores."""
    readme = (REPOSITORY / "README.md").read_text()
    outs = re.findall(r"attnlab data .*--out (\S+)", readme)
    assert outs
    if shutil.which("git") is None or not (REPOSITORY / ".git").exists():
        pytest.skip("not a git checkout")
    for out in outs:
        probe = f"{out}/train.tsv"
        ignored = subprocess.run(["git", "check-ignore", "-q", probe], cwd=REPOSITORY, check=False)
        assert Path(out).is_absolute() or ignored.returncode == 0, out


def test_configs_lists_each_builtin_config_with_its_first_sentence(capsys):
    from attnlab.experiments.registry import builtin_configs

    assert main(["configs"]) == 0
    lines = dict(
        line.split(maxsplit=1) for line in capsys.readouterr().out.splitlines() if line and " " in line
    )
    assert set(builtin_configs()) <= set(lines)
    assert (
        lines["lookup"].strip()
        == "Dubois et al. 2020, §6: recurrent seq2seq on Long Lookup Tables, paper settings."
    )
    assert lines["lm_wikitext2"].startswith(
        "Daniluk et al. (2017) language models on WikiText-2"
    )  # not cut at "al."
    assert all(len(lines[name].strip()) <= 100 for name in builtin_configs())


def test_config_summary_is_the_first_sentence_cut_to_a_width(tmp_path):
    from attnlab.cli import config_summary

    path = tmp_path / "c.yaml"
    path.write_text(
        "# A model, e.g. a GRU. Second sentence.\n# more\nexperiment: lookup\n# later comment. \n"
    )
    assert config_summary(path) == "A model, e.g. a GRU."
    path.write_text("# " + "word " * 40 + "\nexperiment: lookup\n")
    assert config_summary(path, width=30) == ("word " * 6).strip() + "…"
    path.write_text("experiment: lookup\n")
    assert config_summary(path) == ""


def test_configs_name_prints_the_config_and_an_unknown_name_is_an_error(capsys):
    from attnlab.experiments.registry import builtin_configs

    assert main(["configs", "lookup_transformer_shift"]) == 0
    printed = capsys.readouterr().out
    path = builtin_configs()["lookup_transformer_shift"]
    assert printed == f"# {path}\n{path.read_text().rstrip()}\n"
    assert main(["configs", "lookup_transformers"]) == 2
    error = capsys.readouterr().err
    assert "no built-in config 'lookup_transformers'" in error and "lookup_transformer_shift" in error
