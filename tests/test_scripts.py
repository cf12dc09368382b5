"""The shell scripts of ``scripts/`` that campaigns rely on."""

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
import torch

from attnlab.cli import main

REPOSITORY = Path(__file__).resolve().parents[1]
ATTNLAB = Path(sys.executable).parent / "attnlab"
needs_bash = pytest.mark.skipif(
    shutil.which("bash") is None or not ATTNLAB.exists(), reason="needs bash and the attnlab command"
)


def _epochs(run: Path) -> list[int]:
    return [json.loads(line)["epoch"] for line in (run / "metrics.jsonl").read_text().splitlines()]


def _summary(folder: Path) -> dict:
    return json.loads((folder / "summary.json").read_text())


@needs_bash
def test_epoch_budget_keeps_what_each_budget_would_have_given(tmp_path, tiny_memory_addition):
    overrides = [item for item in tiny_memory_addition if not item.startswith("training.epochs=")]
    run = tmp_path / "staged"
    script = str(REPOSITORY / "scripts" / "epoch_budget.sh")
    command = ["bash", script, str(run), "1 3", "memory_addition", *overrides]
    env = {"ATTNLAB": str(ATTNLAB), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    subprocess.run(command, check=True, env=env, capture_output=True, text=True)
    assert _epochs(run) == [1, 2, 3]
    assert _summary(run / "eval_at" / "epoch1") != _summary(run / "eval_at" / "epoch3")

    for budget in (1, 3):  # each stage equals a run trained with that budget from the start
        alone = tmp_path / f"alone{budget}"
        argv = ["train", "memory_addition", *overrides, f"training.epochs={budget}", "--run-dir", str(alone)]
        assert main(argv) == 0
        assert _summary(run / "eval_at" / f"epoch{budget}") == _summary(alone / "eval")

    # Started again, finished stages are skipped: nothing is retrained.
    before = (run / "metrics.jsonl").read_bytes()
    result = subprocess.run(command, check=True, env=env, capture_output=True, text=True)
    assert (run / "metrics.jsonl").read_bytes() == before and "budget" not in result.stdout


@needs_bash
def test_epoch_budget_evaluates_the_trained_weights_of_a_run_that_averages_them(
    tmp_path, tiny_memory_addition
):
    overrides = [item for item in tiny_memory_addition if not item.startswith("training.epochs=")]
    run = tmp_path / "averaged"
    script = str(REPOSITORY / "scripts" / "epoch_budget.sh")
    command = ["bash", script, str(run), "2", "memory_addition", *overrides, "training.ema_decay=0.5"]
    env = {"ATTNLAB": str(ATTNLAB), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    subprocess.run(command, check=True, env=env, capture_output=True, text=True)
    stage = run / "eval_at" / "epoch2"
    assert _summary(stage) == _summary(run / "eval")  # the average, as the run evaluated it

    plain = tmp_path / "plain"  # the same training without the average: its weights are the trained ones
    assert main(["train", "memory_addition", *overrides, "training.epochs=2", "--run-dir", str(plain)]) == 0
    assert _summary(stage / "trained") == _summary(plain / "eval") != _summary(stage)


@needs_bash
def test_epoch_budget_keeps_each_stage_s_predictions(tmp_path):
    """Each stage keeps its evaluation's predictions beside its records (the next stage's evaluation
    replaces the run's own), for analyses of the outputs at every budget."""
    fake = tmp_path / "attnlab"  # trains nothing: writes the evaluation of a run at its budget
    fake.write_text(
        "#!/usr/bin/env bash\n"
        'for arg in "$@"; do case $arg in --run-dir) take=1 ;; training.epochs=*) n=${arg#*=} ;;\n'
        '  *) [ -n "${take:-}" ] && run=$arg && take= ;; esac; done\n'
        'mkdir -p "$run/eval" && touch "$run/config.yaml"\n'
        'echo "{\\"epochs\\": $n}" >"$run/eval/summary.json"\n'
        'echo "source	prediction $n" >"$run/eval/test.predictions.tsv"\n'
    )
    fake.chmod(0o755)
    run = tmp_path / "staged"
    script = str(REPOSITORY / "scripts" / "epoch_budget.sh")
    env = {"ATTNLAB": str(fake), "PATH": "/usr/bin:/bin"}
    subprocess.run(["bash", script, str(run), "1 2", "lookup"], check=True, env=env, capture_output=True)
    for budget in (1, 2):
        stage = run / "eval_at" / f"epoch{budget}"
        assert _summary(stage) == {"epochs": budget}
        assert (stage / "test.predictions.tsv").read_text() == f"source\tprediction {budget}\n"


@needs_bash
def test_archive_every_archives_with_checkpoints_each_round_and_goes_on_after_a_failed_one(tmp_path):
    fake = tmp_path / "attnlab"  # records its arguments; the first round fails
    fake.write_text(
        "#!/usr/bin/env bash\n"
        'echo "$*" >>"$CALLS"\n'
        '[ "$(wc -l <"$CALLS")" -gt 1 ] || { echo "no such tree" >&2; exit 2; }\n'
    )
    fake.chmod(0o755)
    calls, logs = tmp_path / "calls.txt", tmp_path / "logs"
    env = {"ATTNLAB": str(fake), "PATH": "/usr/bin:/bin", "CALLS": str(calls), "LANES": str(logs)}
    script = str(REPOSITORY / "scripts" / "archive_every.sh")
    subprocess.run(
        ["bash", script, "0", "/runs/tree", "results/tree"],
        check=True,
        env={**env, "ARCHIVE_ROUNDS": "3"},
        timeout=60,
    )
    assert calls.read_text().splitlines() == ["archive /runs/tree results/tree --unfinished-checkpoints"] * 3
    log = (logs / "archive_every.log").read_text()
    assert "no such tree" in log
    assert [line.split()[3] for line in log.splitlines() if " archive rc=" in line] == [
        "rc=2",
        "rc=0",
        "rc=0",
    ]


def _fake_run(run: Path, long5: float | None) -> None:
    """A run directory as a recipe leaves it: finished (``long5`` its headline seqAcc) or not."""
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text("experiment: lookup\n")
    (run / "checkpoints" / "best.pt").write_bytes(b"best")
    (run / "checkpoints" / "last.pt").write_bytes(b"last")
    if long5 is not None:
        (run / "eval").mkdir()
        (run / "eval" / "summary.json").write_text(json.dumps({"long5": {"seq_acc": long5}}))


@needs_bash
def test_timed_part_packs_the_runs_finished_in_the_call_and_stops_every_process(tmp_path):
    """At its deadline the script kills the recipes it started and packs the runs that finished
    during the call: no last.pt, best.pt only where seed 0 got a headline example wrong; unfinished
    runs and runs finished before the call (home's, copied in so as not to train them again) stay
    behind."""
    tree, pack = tmp_path / "tree", tmp_path / "pack"
    part = tree / "lookup_stop"
    _fake_run(part / "home" / "seed0", long5=100.0)
    env = {"ATTNLAB": str(ATTNLAB), "PATH": "/usr/bin:/bin", "TIMED_PART_TREE": str(tree)}
    script = str(REPOSITORY / "scripts" / "timed_part.sh")
    call = subprocess.Popen(["bash", script, "4", "1", "1", "lookup_stop", str(pack)], env=env)
    started = tree / "timed_part_logs" / "started"
    for _ in range(100):
        if started.exists():
            break
        time.sleep(0.05)
    time.sleep(0.05)  # past the marker's timestamp
    _fake_run(part / "wrong" / "seed0", long5=90.0)
    _fake_run(part / "wrong" / "seed1", long5=80.0)
    _fake_run(part / "right" / "seed0", long5=100.0)
    _fake_run(part / "unfinished" / "seed0", long5=None)
    assert call.wait(timeout=120) == 0

    assert not subprocess.run(["pgrep", "-f", str(tree)], capture_output=True).stdout  # all stopped
    pieces = sorted(pack.glob("runs.tgz.*"))
    with tarfile.open(fileobj=io.BytesIO(b"".join(piece.read_bytes() for piece in pieces))) as packed:
        members = {name for name in packed.getnames() if not name.startswith("timed_part_logs")}
        summary = packed.extractfile("timed_part_logs/summary.txt").read().decode()  # type: ignore[union-attr]
    runs = {"lookup_stop/wrong/seed0", "lookup_stop/wrong/seed1", "lookup_stop/right/seed0"}
    assert {name for name in members if name.count("/") == 2} == runs  # not the unfinished ones
    assert {name for name in members if name.endswith(".pt")} == {
        "lookup_stop/wrong/seed0/checkpoints/best.pt"
    }
    assert summary.startswith("finished runs: 3;")


@needs_bash
def test_a_lane_started_again_first_reruns_the_command_it_was_stopped_in(tmp_path):
    """The log's last START without an END is put back at the head of the queue: the lane runs it
    before the queued commands, and says so."""
    (tmp_path / "lane_T.log").write_text(
        "2026-11-27 10:00:00 START echo first\n2026-11-27 10:00:01 END rc=0 echo first\n"
        "2026-11-27 10:00:02 START echo interrupted\n"
    )
    (tmp_path / "queue_T.txt").write_text("echo queued\n")
    lane = subprocess.Popen(
        ["bash", str(REPOSITORY / "scripts" / "lane.sh"), "T"],
        env={"LANES": str(tmp_path), "PATH": "/usr/bin:/bin"},
        start_new_session=True,
    )
    try:
        out = tmp_path / "lane_T_out.log"
        log_file = tmp_path / "lane_T.log"
        assert _wait_for(lambda: _logged_last(log_file, "END rc=0 echo queued"))
    finally:
        os.killpg(lane.pid, signal.SIGTERM)
        lane.wait(timeout=10)
    assert out.read_text().splitlines() == ["interrupted", "queued"]
    log = log_file.read_text().splitlines()
    assert log[3].endswith("REQUEUED echo interrupted")
    assert [line.split(" ", 2)[2] for line in log[4:8]] == [
        "START echo interrupted",
        "END rc=0 echo interrupted",
        "START echo queued",
        "END rc=0 echo queued",
    ]
    assert (tmp_path / "queue_T.txt").read_text() == ""


@needs_bash
@pytest.mark.parametrize(
    "command, added",
    [
        ("false && attnlab train scan_transformer training.seed=2 --run-dir {started}", " --resume"),
        ("cd /tmp && false && attnlab train scan_transformer --run-dir {started}", " --resume"),
        ("false && attnlab train scan_transformer --run-dir {empty}", ""),
        ("false && attnlab train {started}/config.yaml --run-dir {started} --resume", ""),
        ("false && attnlab train scan_transformer --run-dir {started} && echo done", ""),
    ],
)
def test_a_lane_requeues_an_unfinished_training_into_a_run_directory_with_resume(tmp_path, command, added):
    """An interrupted ``attnlab train ... --run-dir DIR`` whose DIR holds a run (``last.pt``) comes
    back with ``--resume`` (without it ``attnlab train`` refuses the directory); one whose DIR holds
    nothing yet, one already resuming, and one followed by another command come back as they were.
    (Each command starts with ``false &&``, so that nothing is trained.)"""
    started = tmp_path / "started"
    (started / "checkpoints").mkdir(parents=True)
    (started / "checkpoints" / "last.pt").write_bytes(b"")
    command = command.format(started=started, empty=tmp_path / "empty")
    log_file = tmp_path / "lane_R.log"
    log_file.write_text(f"2026-11-29 08:00:00 START {command}\n")
    lane = subprocess.Popen(
        ["bash", str(REPOSITORY / "scripts" / "lane.sh"), "R"],
        env={"LANES": str(tmp_path), "PATH": "/usr/bin:/bin"},
        start_new_session=True,
    )
    try:
        assert _wait_for(lambda: _logged_last(log_file, f"END rc=1 {command}{added}"))
    finally:
        os.killpg(lane.pid, signal.SIGTERM)
        lane.wait(timeout=10)
    assert log_file.read_text().splitlines()[1].endswith(f" REQUEUED {command}{added}")


def _wait_for(predicate, seconds=20.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not predicate():
        time.sleep(0.1)
    return predicate()


def _logged_last(log, event):
    """Whether a lane's log ends with ``event``. A command's END follows its output, so on a busy
    machine the output alone does not say that the lane is done with it."""
    return log.is_file() and log.read_text().endswith(f" {event}\n")


@needs_bash
def test_a_preempting_lane_stops_the_running_one_and_runs_its_command_before_the_stopped_one(tmp_path):
    """``lane.sh P --preempt CMD`` stops lane P's running instance (the command it was running with
    it), runs CMD, then the stopped command again, then the queue; starting a lane that is running
    without ``--preempt`` is refused."""
    slow_once = f"test -f {tmp_path}/marker || {{ touch {tmp_path}/marker; sleep 60; }}; echo resumed"
    (tmp_path / "queue_P.txt").write_text(f"{slow_once}\necho queued\n")
    env = {"LANES": str(tmp_path), "PATH": "/usr/bin:/bin"}
    script = str(REPOSITORY / "scripts" / "lane.sh")
    first = subprocess.Popen(["bash", script, "P"], env=env, start_new_session=True)
    second = None
    out, log = tmp_path / "lane_P_out.log", tmp_path / "lane_P.log"
    try:
        assert _wait_for(lambda: (tmp_path / "marker").is_file())
        refused = subprocess.run(["bash", script, "P"], env=env, capture_output=True, text=True, timeout=30)
        assert refused.returncode == 1 and "lane P is already running" in refused.stderr
        preempt = ["bash", script, "P", "--preempt", "echo urgent"]
        second = subprocess.Popen(preempt, env=env, start_new_session=True)
        assert _wait_for(lambda: _logged_last(log, "END rc=0 echo queued"))
        assert out.read_text().splitlines() == ["urgent", "resumed", "queued"]
        assert first.wait(timeout=10) != 0  # stopped by the preempting lane
    finally:
        for lane in (first, second):
            if lane is not None and lane.poll() is None:
                os.killpg(lane.pid, signal.SIGTERM)
                lane.wait(timeout=10)
    events = [line.split(" ", 2)[2] for line in log.read_text().splitlines()]
    assert events == [
        f"START {slow_once}",
        "PREEMPTED by echo urgent",
        f"REQUEUED {slow_once}",
        "START echo urgent",
        "END rc=0 echo urgent",
        f"START {slow_once}",
        f"END rc=0 {slow_once}",
        "START echo queued",
        "END rc=0 echo queued",
    ]


def test_the_long_sentence_probe_trains_on_short_sentences_and_tests_on_longer_ones(tmp_path):
    """scripts/scan_long_sentence_probe.py: the 94 single sentences of at most 22 actions train,
    the 8 longer ones ("U around D thrice") test; a finished variant is read back, not retrained."""
    tiny = (
        "scan_transformer model.transformer.d_model=16 model.transformer.heads=2 model.transformer.ff_dim=32 "
        "model.transformer.encoder_layers=1 model.transformer.decoder_layers=1 training.epochs=1"
    )
    command = [
        sys.executable,
        str(REPOSITORY / "scripts" / "scan_long_sentence_probe.py"),
        str(tmp_path),
        "--variant",
        f"tiny: {tiny}",
        "--variant",  # a config that generates its own split at a cut-off: the files replace it
        f"generated: scan_transformer_csordas2021 {tiny.split(' ', 1)[1]}",
        "--copies",
        "2",
        "training.progress=false",
    ]
    first = subprocess.run(command, capture_output=True, text=True, check=True, cwd=REPOSITORY)
    lines = [
        (tmp_path / "data" / f"{name}.txt").read_text().splitlines()
        for name in ("train", "validation", "test")
    ]
    assert [len(part) for part in lines] == [2 * 94, 94, 8]
    assert all(" around " in line and " thrice OUT:" in line for line in lines[2])
    table = first.stdout.splitlines()[-4:]
    assert table[0] == "| variant | exact match | length given | output lengths (target 24) |"
    for row, name in zip(table[2:], ("tiny", "generated"), strict=True):
        assert row.startswith(f"| {name} | ") and "/8 | " in row and len(row.split("|")[4].split()) == 8
    generated = (tmp_path / "generated" / "config.yaml").read_text()
    assert "split: files" in generated and "generate: false" in generated
    again = subprocess.run(command, capture_output=True, text=True, check=True, cwd=REPOSITORY)
    assert again.stdout.splitlines() == table  # read back: nothing trained or printed by training


def _write_scan_predictions(run: Path, outcomes: dict[str, int], given_length: bool = False) -> None:
    """``run/eval/test.predictions.tsv`` as evaluation writes it for SCAN commands, each right (its
    gold output) or wrong (``I_WALK``) as ``outcomes`` says; with ``given_length`` a
    ``seq_acc_given_length`` column of 1s too."""
    from attnlab.tasks.scan import interpret

    rows = [
        "example\tsource\ttarget\tprediction\tseq_acc" + ("\tseq_acc_given_length" if given_length else "")
    ]
    for index, (command, right) in enumerate(outcomes.items()):
        target = " ".join(interpret(command))
        prediction = target if right else "I_WALK"
        rows.append(f"{index}\t{command}\t{target}\t{prediction}\t{right}" + ("\t1" if given_length else ""))
    (run / "eval").mkdir(parents=True)
    (run / "eval" / "test.predictions.tsv").write_text("\n".join(rows) + "\n")


def test_the_sentence_starts_table_groups_exact_match_by_where_the_long_sentence_starts(tmp_path):
    """scripts/scan_sentence_starts.py reads each run's test predictions and counts its right
    outputs by where the last sentence of >= 24 actions starts in the output (output order: "A
    after B" is B first) and by the target's length."""

    def sentence_starts(*arguments: str) -> subprocess.CompletedProcess:
        script = REPOSITORY / "scripts" / "scan_sentence_starts.py"
        return subprocess.run([sys.executable, str(script), *arguments], capture_output=True, text=True)

    commands = {  # command: (the long sentence's start, right in run a, right in run b)
        "jump around left thrice and walk": (0, 1, 1),
        "walk thrice and jump around left thrice": (3, 1, 0),
        "jump around left thrice after walk twice": (2, 1, 0),
        "walk around right thrice after run": (1, 0, 0),
        "walk": (None, 1, 1),
        "run twice": (None, 1, 1),
        "look thrice and jump": (None, 1, 0),
        "jump around left thrice": (0, 0, 1),
        "turn left and look around left thrice": (1, 1, 1),
        "look opposite right": (None, 0, 0),
    }
    for run, column in (("a", 1), ("b", 2)):
        _write_scan_predictions(
            tmp_path / run, {command: outcome[column] for command, outcome in commands.items()}
        )
    result = sentence_starts(str(tmp_path / "a"), str(tmp_path / "b"), "--bin", "16")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "| test commands (test) | a | b |"
    rows = {line.split(" | ")[0].removeprefix("| "): line.split(" | ")[1:] for line in lines[2:]}
    starts = "a sentence of ≥ 24 actions starts at output position"
    assert rows[f"{starts} 0"] == ["1/2 (50%)", "2/2 (100%) |"]
    assert rows[f"{starts} 1"] == ["1/2 (50%)", "1/2 (50%) |"]
    assert rows[f"{starts} 2"] == ["1/1 (100%)", "0/1 (0%) |"]
    assert rows[f"{starts} 3"] == ["1/1 (100%)", "0/1 (0%) |"]
    assert rows["no sentence of ≥ 24 actions"] == ["3/4 (75%)", "2/4 (50%) |"]
    assert rows["target of 0–15 actions"] == ["3/4 (75%)", "2/4 (50%) |"]
    assert rows["target of 16–31 actions"] == ["4/6 (67%)", "3/6 (50%) |"]
    evaluated = tmp_path / "evaluated"  # an `attnlab evaluate --out` folder: the file at its top
    evaluated.mkdir()
    shutil.copy(tmp_path / "a" / "eval" / "test.predictions.tsv", evaluated)
    again = sentence_starts(str(evaluated), "--bin", "16")
    assert again.returncode == 0 and again.stdout.splitlines()[2:] == [
        line.rsplit(" | ", 1)[0] + " |" for line in lines[2:]
    ]
    missing = sentence_starts(str(tmp_path / "missing"))
    assert missing.returncode == 2 and "missing/eval/test.predictions.tsv" in missing.stderr


def test_the_word_order_table_finds_a_run_that_gives_a_bag_of_words_one_output(tmp_path):
    """scripts/scan_word_order.py groups the test commands by their sorted words: run a gives each
    bag of several commands one output (every such command wrong: "I_WALK"), as an order-blind model
    must; run b does not; an order-blind model gets at most one command of each bag right."""
    commands = {  # command: (right in run a, right in run b)
        "jump twice after walk left": (0, 1),
        "walk left twice after jump": (0, 0),
        "walk twice after jump left": (0, 0),
        "jump left after walk twice": (0, 0),
        "walk and jump": (0, 1),
        "jump and walk": (0, 1),
        "jump": (1, 0),
        "run": (1, 1),
        "look": (1, 0),
        "walk twice": (0, 1),
    }
    for run, column in (("a", 0), ("b", 1)):
        outcomes = {command: right[column] for command, right in commands.items()}
        _write_scan_predictions(tmp_path / run, outcomes)
    script = REPOSITORY / "scripts" / "scan_word_order.py"
    runs = [str(tmp_path / "a"), str(tmp_path / "b")]
    result = subprocess.run([sys.executable, str(script), *runs], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "| test commands (test) | a | b |"
    rows = {line.split(" | ")[0].removeprefix("| "): line.split(" | ")[1:] for line in lines[2:]}
    assert rows["bags of words with more than one command"] == ["2/6 (33%)", "2/6 (33%) |"]
    assert rows["... given one output for all their commands"] == ["2/2 (100%)", "0/2 (0%) |"]
    assert rows["exact match"] == ["3/10 (30%)", "5/10 (50%) |"]
    assert rows["the most an order-blind model gets right"] == ["6/10 (60%)", "6/10 (60%) |"]


def test_the_word_order_ceiling_compares_outputs_without_structure_markers(tmp_path):
    """With data.output_markers the targets hold <rep>; exact match ignores them, so one output is
    right for both commands of a bag whose outputs differ only in their markers."""
    from attnlab.tasks.scan import interpret, marked_actions

    commands = ["walk twice and walk thrice", "walk thrice and walk twice", "jump", "run", "look"]
    commands += ["walk", "jump twice", "run twice", "look twice", "walk left"]
    rows = ["example\tsource\ttarget\tprediction\tseq_acc"]
    for index, command in enumerate(commands):
        target = " ".join(marked_actions(command, ["repetition"]))
        rows.append(f"{index}\t{command}\t{target}\t{' '.join(interpret(command))}\t1")
    (tmp_path / "run" / "eval").mkdir(parents=True)
    (tmp_path / "run" / "eval" / "test.predictions.tsv").write_text("\n".join(rows) + "\n")
    script = REPOSITORY / "scripts" / "scan_word_order.py"
    result = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "run")], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    rows = {
        line.split(" | ")[0].removeprefix("| "): line.split(" | ")[1]
        for line in result.stdout.splitlines()[2:]
    }
    assert rows["exact match"] == "10/10 (100%) |"
    assert rows["the most an order-blind model gets right"] == "10/10 (100%) |"


def test_the_clause_table_groups_exact_match_by_the_form_of_each_clause_that_holds_the_word(tmp_path):
    """scripts/scan_clause_accuracy.py reads each run's test predictions and counts its right outputs
    by the form of each clause that holds the word (the word as X; a command with it in both clauses
    counts once under each form it holds) and by where the word is."""

    def clause_accuracy(*arguments: str) -> subprocess.CompletedProcess:
        script = REPOSITORY / "scripts" / "scan_clause_accuracy.py"
        return subprocess.run([sys.executable, str(script), *arguments], capture_output=True, text=True)

    commands = {  # command: (right in run a, right in run b)
        "jump": (1, 1),
        "jump thrice": (0, 1),
        "walk and jump thrice": (1, 0),
        "jump thrice after jump": (1, 1),
        "jump thrice and jump thrice": (0, 0),
        "jump around left after run": (1, 0),
        "walk twice": (1, 1),  # without the word: in no row
        "run": (0, 1),
        "look thrice": (1, 0),
        "walk and run": (1, 1),
    }
    for run, column in (("a", 0), ("b", 1)):
        outcomes = {command: outcome[column] for command, outcome in commands.items()}
        _write_scan_predictions(tmp_path / run, outcomes, given_length=True)
    result = clause_accuracy(str(tmp_path / "a"), str(tmp_path / "b"))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "| seq_acc by the clause with 'jump' (test) | a | b |"
    rows = {line.split(" | ")[0].removeprefix("| "): line.split(" | ")[1:] for line in lines[2:]}
    assert list(rows) == [
        "clause 'X'",
        "clause 'X thrice'",
        "clause 'X around left'",
        "'jump' in the whole command",
        "'jump' in one of two clauses",
        "'jump' in both clauses",
    ]
    assert rows["clause 'X'"] == ["2/2 (100%)", "2/2 (100%) |"]
    assert rows["clause 'X thrice'"] == ["2/4 (50%)", "2/4 (50%) |"]
    assert rows["clause 'X around left'"] == ["1/1 (100%)", "0/1 (0%) |"]
    assert rows["'jump' in the whole command"] == ["1/2 (50%)", "2/2 (100%) |"]
    assert rows["'jump' in one of two clauses"] == ["2/2 (100%)", "0/2 (0%) |"]
    assert rows["'jump' in both clauses"] == ["1/2 (50%)", "1/2 (50%) |"]
    given = clause_accuracy(str(tmp_path / "a"), "--metric", "seq_acc_given_length")
    assert given.returncode == 0 and given.stdout.splitlines()[3] == "| clause 'X thrice' | 4/4 (100%) |"
    for arguments, message in (
        ((str(tmp_path / "a"), "--metric", "bleu_x"), "--metric bleu_x"),
        ((str(tmp_path / "a"), "--word", "dax"), "holds 'dax'"),
        ((str(tmp_path / "missing"),), "missing/eval/test.predictions.tsv"),
    ):
        failed = clause_accuracy(*arguments)
        assert failed.returncode == 2 and message in failed.stderr, failed.stderr


def _train_tiny_scan_transformer(run: Path, files: dict[str, Path], *transformer: str) -> str:
    """Train a tiny ``scan_transformer`` for one epoch on ``files`` (``train``, ``test``) with these
    ``model.transformer`` options into ``run``; returns its ``eval/summary.json``'s text."""
    from attnlab.cli import main as attnlab

    settings = [
        "data.split=files",
        f"data.train_file={files['train']}",
        f"data.test_files={{test: {files['test']}}}",
        *(f"model.transformer.{option}" for option in ("d_model=16", "heads=2", "ff_dim=32", *transformer)),
        "training.epochs=1",
        "training.progress=false",
    ]
    assert attnlab(["train", "scan_transformer", "--run-dir", str(run), *settings]) == 0
    return (run / "eval" / "summary.json").read_text()


def test_peers_read_as_evaluates_a_copy_whose_syntax_reads_the_alone_word_as_one_peer(tmp_path):
    """scripts/transformer_peers_read_as.py: in the copy the syntax's embedding of "jump" (and of
    ``I_JUMP``) is that of "walk" (``I_WALK``) and the word counts as composed, so the model reads it
    as that vector and not as the peers' mean; everything else, the values' own table included, is
    unchanged; the copy is evaluated and the run's own evaluation stays. Bad readings are refused."""
    import random

    from attnlab.attention.syntactic import ComposedWordEmbedding
    from attnlab.experiments.scan.experiment import model_from_checkpoint
    from attnlab.tasks.scan import generate_scan, write_scan_file
    from attnlab.training.checkpoint import load_checkpoint

    examples = generate_scan()  # add-jump in miniature: "jump" only alone in training
    alone = [example for example in examples if len(example.source) == 1]
    composed = [example for example in examples if len(example.source) > 1 and "jump" not in example.source]
    random.Random(0).shuffle(composed)
    files = {"train": tmp_path / "train.txt", "test": tmp_path / "test.txt"}
    write_scan_file(files["train"], alone * 5 + composed[:60])
    write_scan_file(files["test"], [e for e in examples if len(e.source) > 1 and "jump" in e.source][:20])
    run, copy = tmp_path / "run", tmp_path / "copy"
    peered = ["end_marker=true", "semantic_output=true", "semantic_embeddings=separate", "peer_words=both"]
    summary = _train_tiny_scan_transformer(run, files, *peered)
    script = REPOSITORY / "scripts" / "transformer_peers_read_as.py"

    def read_as(*readings: str, out: Path = copy, of: Path = run) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, str(script), str(of), str(out), *readings], capture_output=True, text=True
        )

    result = read_as("--source", "jump=walk", "--target", "I_JUMP=I_WALK")
    assert result.returncode == 0, result.stderr
    original = load_checkpoint(run / "checkpoints" / "best.pt")
    changed = load_checkpoint(copy / "checkpoints" / "best.pt")["model"]
    vocabularies = original["model_spec"]["vocabularies"]
    edits = {}
    for side, word, peer in (("source", "jump", "walk"), ("target", "I_JUMP", "I_WALK")):
        tokens = vocabularies[side]["tokens"]
        edits[side] = (tokens.index(word), tokens.index(peer))
    for name, tensor in changed.items():
        side = name.split("_")[0]
        expected = original["model"][name].clone()
        if (
            side in edits
            and name.endswith(("embedding.weight", "composed"))
            and not name.startswith("semantic")
        ):
            index, peer = edits[side]
            expected[index] = True if name.endswith("composed") else expected[peer]
        torch.testing.assert_close(tensor, expected, rtol=0, atol=0, msg=name)
    model, _, _ = model_from_checkpoint(copy / "checkpoints" / "best.pt", torch.device("cpu"))
    peers = model.source_peers
    assert isinstance(peers, ComposedWordEmbedding)
    words = torch.tensor([list(edits["source"])])
    read = peers(words, torch.zeros_like(words, dtype=torch.bool), torch.tensor([2]))
    torch.testing.assert_close(read[0, 0], read[0, 1], rtol=0, atol=0)  # "jump" reads as "walk"
    assert json.loads((copy / "eval" / "summary.json").read_text())["test"]["examples"] == 20
    assert (run / "eval" / "summary.json").read_text() == summary
    for readings, message in (
        (("--source", "jump=dax"), "'dax' is not in the source vocabulary"),
        (("--target", "I_JUMP=<eos>"), "'<eos>' was never seen composed"),
        (("--source", "jump"), "each reading is WORD=PEER"),
        ((), "give at least one"),
    ):
        refused = read_as(*readings, out=tmp_path / "refused")
        assert refused.returncode == 2 and message in refused.stderr, refused.stderr
        assert not (tmp_path / "refused").exists()


def test_relative_distances_read_at_evaluates_a_copy_whose_tables_read_far_distances_as_k(
    tmp_path, make_scan_files
):
    """scripts/relative_distances_read_at.py: the copy's decoder tables read every distance past K
    as K (both signs), the encoder's and the run's own are unchanged, and the copy is evaluated."""
    from attnlab.training.checkpoint import load_checkpoint

    files = make_scan_files("read_at", 60, 20)
    run, copy = tmp_path / "run", tmp_path / "copy"
    summary = _train_tiny_scan_transformer(run, files, "positional=relative", "max_relative_distance=4")
    script = REPOSITORY / "scripts" / "relative_distances_read_at.py"
    result = subprocess.run(
        [sys.executable, str(script), str(run), str(copy), "--at", "2"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    original = load_checkpoint(run / "checkpoints" / "best.pt")["model"]
    read = load_checkpoint(copy / "checkpoints" / "best.pt")["model"]
    for name, table in read.items():
        if not name.endswith("positions.relative.weight"):
            torch.testing.assert_close(table, original[name], rtol=0, atol=0)
        elif name.startswith("encoder."):
            torch.testing.assert_close(table, original[name], rtol=0, atol=0)
        else:  # rows 0..8 are the distances -4..4
            expected = original[name][[2, 2, 2, 3, 4, 5, 6, 6, 6]]
            torch.testing.assert_close(table, expected, rtol=0, atol=0)
    assert json.loads((copy / "eval" / "summary.json").read_text())["test"]["examples"] == 20
    assert (run / "eval" / "summary.json").read_text() == summary  # the run's own evaluation stays
    again = subprocess.run(
        [sys.executable, str(script), str(run), str(copy), "--at", "2"], capture_output=True, text=True
    )
    assert again.returncode == 2 and "exists: give a new folder" in again.stderr


def test_the_loop_reach_table_counts_how_far_into_the_long_sentence_each_output_is_right(tmp_path):
    """scripts/scan_loop_reach.py: for the test commands with a sentence of >= 24 actions, how many
    of its actions the prediction has right before its first wrong token, by the sentence's place in
    the output ("A after B" is B first); a prediction wrong before the sentence is counted apart."""
    from attnlab.tasks.scan import MARKERS, interpret, marked_actions

    def cut(command: str, keep: int) -> str:  # the gold output, wrong from position `keep` on
        actions = list(interpret(command))
        return " ".join(actions[:keep] + ["I_LOOK" if actions[keep] != "I_LOOK" else "I_RUN"])

    long_first, long_second = "walk around left thrice and run", "walk twice after walk around left thrice"
    rows = [
        ("walk around left thrice", cut("walk around left thrice", 16)),  # first: 16 of 24
        (long_first, " ".join(interpret(long_first))),  # first: all 24
        (
            "jump around right thrice after look",
            cut("jump around right thrice after look", 1 + 21),
        ),  # second: 21
        (long_second, cut(long_second, 24 + 1)),  # first ("after": the long one is output first): all
        (
            "run and jump around left thrice",
            cut("run and jump around left thrice", 0),
        ),  # second: wrong before
        ("walk twice", "I_WALK"),  # no long sentence: not counted
    ]
    lines = ["example\tsource\ttarget\tprediction\tseq_acc"]
    for index, (command, prediction) in enumerate(rows):
        target = " ".join(interpret(command))
        lines.append(f"{index}\t{command}\t{target}\t{prediction}\t{int(prediction == target)}")
    (tmp_path / "run" / "eval").mkdir(parents=True)
    (tmp_path / "run" / "eval" / "test.predictions.tsv").write_text("\n".join(lines) + "\n")
    script = REPOSITORY / "scripts" / "scan_loop_reach.py"
    result = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "run")], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    rows_out = {
        line.split(" | ")[0].removeprefix("| "): line.split(" | ")[1]
        for line in result.stdout.splitlines()[2:]
    }
    assert rows_out == {
        "first sentence: 16–17": "1/3 (33%) |",
        "first sentence: all": "2/3 (67%) |",
        "second sentence: wrong before it": "1/2 (50%) |",
        "second sentence: 20–21": "1/2 (50%) |",
    }
    # from the output's start: the second sentence starts after "look", so its 21 right are 22
    from_start = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "run"), "--from-output-start"],
        capture_output=True,
        text=True,
    )
    assert "the output's actions right" in from_start.stdout.splitlines()[0]
    assert "| second sentence: ≥ 22 | 1/2 (50%) |" in from_start.stdout
    assert "| first sentence: 16–17 | 1/3 (33%) |" in from_start.stdout
    # a run trained with data.output_markers: the same outputs with the markers in, the same table
    marked = ["example\tsource\ttarget\tprediction\tseq_acc"]
    for index, (command, prediction) in enumerate(rows):
        gold = marked_actions(command, ["repetition", "sentence"])
        predicted = iter(prediction.split())
        written = [token if token in MARKERS.values() else next(predicted, None) for token in gold]
        with_markers = [token for token in written if token is not None] + list(predicted)
        marked.append(f"{index}\t{command}\t{' '.join(gold)}\t{' '.join(with_markers)}\t0")
    (tmp_path / "marked" / "eval").mkdir(parents=True)
    (tmp_path / "marked" / "eval" / "test.predictions.tsv").write_text("\n".join(marked) + "\n")
    with_markers_out = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "marked")], capture_output=True, text=True
    )
    assert with_markers_out.stdout.splitlines()[2:] == result.stdout.splitlines()[2:]
    bad = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "run"), "--bins", "16,x"], capture_output=True, text=True
    )
    assert bad.returncode == 2 and "--bins 16,x: expected whole numbers" in bad.stderr
    missing = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "missing")], capture_output=True, text=True
    )
    assert missing.returncode == 2 and "missing/eval/test.predictions.tsv" in missing.stderr


def test_the_counting_heads_table_gives_each_key_token_its_mean_weight_over_the_steps_that_see_it(tmp_path):
    """scripts/transformer_counting_heads.py: for one gold target, a key token at position ``j``
    of the decoder's input (``<sos>`` and the target, ``T`` tokens) is seen by the ``T - j`` steps
    at or after it; each counting head's row for it holds that many pairs and a mean weight in
    (0, 1). A run without counting heads is refused."""
    from attnlab.tasks.scan import generate_scan, write_scan_file

    examples = generate_scan()[:40]
    files = {"train": tmp_path / "train.txt", "test": tmp_path / "test.txt"}
    write_scan_file(files["train"], examples)
    write_scan_file(files["test"], examples[:5])
    script = REPOSITORY / "scripts" / "transformer_counting_heads.py"
    counting, plain = tmp_path / "counting", tmp_path / "plain"
    _train_tiny_scan_transformer(counting, files, "decoder_counting_heads=1")
    result = subprocess.run(
        [sys.executable, str(script), str(counting), "--examples", "1"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    tokens = ["<sos>", *examples[0].target]  # the first test row's gold target
    expected = {
        token: sum(len(tokens) - j for j, name in enumerate(tokens) if name == token) for token in tokens
    }
    rows = [line.strip("|").split("|") for line in result.stdout.splitlines() if line.startswith("| ")]
    table = [[cell.strip() for cell in row] for row in rows if row[0].strip().isdigit()]
    assert sorted({(row[0], row[1]) for row in table}) == [("0", "0"), ("1", "0")]  # 2 layers, 1 head each
    for layer in ("0", "1"):
        pairs = {row[2]: int(row[4].replace(",", "")) for row in table if row[0] == layer}
        assert pairs == expected
        assert all(0.0 < float(row[3]) < 1.0 for row in table if row[0] == layer)
    _train_tiny_scan_transformer(plain, files)
    refused = subprocess.run([sys.executable, str(script), str(plain)], capture_output=True, text=True)
    assert refused.returncode == 2 and "has no counting heads" in refused.stderr, refused.stderr


def test_teacher_forced_ends_find_where_greedy_decoding_first_leaves_each_target(tmp_path):
    """scripts/scan_teacher_forced_ends.py: under teacher forcing a command is right exactly when
    the run's greedy decoding (its eval predictions) is, and a wrong one's first wrong step is where
    the greedy output first leaves the target, an early ``<eos>`` where it is a shorter prefix of
    it; the groups are the commands' sentences in output order, ``A after B`` as B then A."""
    import csv
    import random
    from collections import Counter

    from attnlab.tasks.scan import generate_scan, sentence_actions, write_scan_file

    examples = generate_scan()
    random.Random(0).shuffle(examples)
    two_sentences = [example for example in examples if {"and", "after"} & set(example.source)]
    one_sentence = [example for example in examples if not {"and", "after"} & set(example.source)]
    files = {"train": tmp_path / "train.txt", "test": tmp_path / "test.txt"}
    write_scan_file(files["train"], [*one_sentence, *two_sentences[:300]])
    write_scan_file(files["test"], [*one_sentence[:16], *two_sentences[:8], *two_sentences[-16:]])
    run = tmp_path / "run"
    training = [
        *(
            "data.split=files",
            f"data.train_file={files['train']}",
            f"data.test_files={{test: {files['test']}}}",
        ),
        *("model.transformer.d_model=32", "model.transformer.heads=2", "model.transformer.ff_dim=64"),
        *(
            "training.epochs=12",
            "training.batch_size=16",
            "training.learning_rate=0.003",
            "training.progress=false",
        ),
    ]
    assert main(["train", "scan_transformer", "--run-dir", str(run), *training]) == 0
    expected_rows: dict[str, list[int]] = {}  # group -> [commands, right]
    expected_errors: dict[str, dict[str, Counter]] = {}  # group -> kind -> first wrong position -> commands
    with (run / "eval" / "test.predictions.tsv").open() as predictions:
        for row in csv.DictReader(predictions, delimiter="\t"):
            actions = sentence_actions(row["source"])
            name = " + ".join(
                str(count) for count in (actions[::-1] if " after " in row["source"] else actions)
            )
            counts = expected_rows.setdefault(name, [0, 0])
            counts[0] += 1
            counts[1] += int(row["seq_acc"])
            target, prediction = row["target"].split(), row["prediction"].split()
            if prediction == target:
                continue
            if len(prediction) < len(target) and target[: len(prediction)] == prediction:
                kind, position = "early", len(prediction)
            elif prediction[: len(target)] == target:
                kind, position = "late", len(target)
            else:
                kind = "wrong"
                position = next(i for i, (p, t) in enumerate(zip(prediction, target)) if p != t)
            expected_errors.setdefault(name, {}).setdefault(kind, Counter())[position] += 1
    script = REPOSITORY / "scripts" / "scan_teacher_forced_ends.py"
    result = subprocess.run([sys.executable, str(script), str(run)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    outcome, probabilities = result.stdout.split("\n\n")
    rows = {
        cells[0]: cells[1:]
        for cells in (
            [cell.strip() for cell in line.strip("|").split("|")] for line in outcome.splitlines()[2:]
        )
    }
    assert {name: [int(rows[name][0]), int(rows[name][1])] for name in rows} == expected_rows
    assert any(" + " in name for name in rows) and any(" + " not in name for name in rows)
    right = sum(right for _, right in expected_rows.values())
    assert 0 < right < 40, result.stdout  # some right, some wrong
    assert {kind for errors in expected_errors.values() for kind in errors} == {"early", "wrong", "late"}
    for name, cells in rows.items():
        for column, kind in ((2, "early"), (3, "wrong"), (4, "late")):
            errors = expected_errors.get(name, {}).get(kind, Counter())
            written = (
                f"{sum(errors.values())} (at "
                + ", ".join(f"{p}: {n}" for p, n in sorted(errors.items()))
                + ")"
            )
            assert cells[column] == (written if errors else ""), (name, kind)
        # a wrong action at any step: every command whose first error is one, none that is right
        first_wrong_action = sum(expected_errors.get(name, {}).get("wrong", Counter()).values())
        assert first_wrong_action <= int(cells[5]) <= int(cells[0]) - int(cells[1]), name
    probability_rows = [line.strip("|").split("|") for line in probabilities.splitlines()[2:]]
    assert {row[0].strip() for row in probability_rows} == set(rows)
    assert all(0.0 <= float(cell) <= 1.0 for row in probability_rows for cell in row[1:] if cell.strip())
    refused = subprocess.run(
        [sys.executable, str(script), str(run), "--min-actions", "100"], capture_output=True, text=True
    )
    assert refused.returncode == 2 and "no test command has 100 actions or more" in refused.stderr
    missing = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "missing")], capture_output=True, text=True
    )
    assert missing.returncode == 2 and "missing" in missing.stderr, missing.stderr
