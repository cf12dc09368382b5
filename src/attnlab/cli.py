"""The ``attnlab`` command line: train, evaluate, compare, plot, generate, translate, multiseed, sweep,
report, data, configs, reproduce, archive.

Configs are YAML files (or the name of a built-in config, see ``attnlab configs``) followed by
``key=value`` overrides, e.g. ``attnlab train lookup training.epochs=5 model.attender=location``.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import re
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from attnlab.config import ConfigError
from attnlab.experiments.base import (
    Capability,
    Experiment,
    GenerationRequest,
    PlotRequest,
    TranslationRequest,
)
from attnlab.experiments.registry import (
    builtin_configs,
    experiment_for,
    experiments_with,
    recipes,
    resolve_config,
    resume_config,
    train_or_resume,
)
from attnlab.experiments.runner import LOCK_FILE, add_seeds_argument, training_lock
from attnlab.experiments.runs import CHECKPOINTS, RunDirectory
from attnlab.logs import LOG_FORMAT, log_to, log_to_run

EXIT_USAGE = 2


def _default_run_dir(config_arg: str) -> Path:
    return Path("runs") / Path(config_arg).stem


def cmd_train(args: argparse.Namespace) -> None:
    run_dir = Path(args.run_dir) if args.run_dir else _default_run_dir(args.config)
    if args.resume and args.overwrite:
        raise ConfigError(
            "--resume continues the run in RUN_DIR and --overwrite deletes it: give one of them"
        )
    if args.resume:  # the run's own config; the overrides may only change what it has not trained yet
        data = resume_config(run_dir, args.config, args.overrides)
    else:
        data = resolve_config(args.config, args.overrides)
    experiment = experiment_for(data)
    config = experiment.parse_config(data)
    if args.overwrite:
        _check_removable(run_dir)
    else:  # before the lock and train.log are written into a folder that is not a run's
        RunDirectory(run_dir).check_free(args.resume)
    with training_lock(run_dir):  # no other process trains the run while it is deleted and retrained
        if args.overwrite:
            _remove_run(run_dir)
        with log_to_run(run_dir):
            results = experiment.train(config, run_dir, resume=args.resume)
    _print_results(results, run_dir, experiment)


def _run_contents(run_dir: Path) -> list[Path]:
    """What ``run_dir`` holds besides its lock file."""
    return [path for path in run_dir.iterdir() if path.name != LOCK_FILE] if run_dir.exists() else []


def _check_removable(run_dir: Path) -> None:
    """Refuse ``--overwrite`` of a folder that is not a run directory: one without ``config.yaml``,
    or one that holds nothing a run writes (:meth:`RunDirectory.check_run_folder`)."""
    if _run_contents(run_dir) and not (run_dir / "config.yaml").is_file():
        raise ConfigError(
            f"--overwrite: {run_dir} exists but is not a run directory (no config.yaml); not deleting it"
        )
    RunDirectory(run_dir).check_run_folder("deleting anything (--overwrite)")


def _remove_run(run_dir: Path) -> None:
    """Delete an earlier run (the caller holds its lock, whose file stays)."""
    for path in _run_contents(run_dir):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()


def _run_experiment(run_dir: str) -> Experiment:
    """The experiment of a trained run (its ``config.yaml``'s ``experiment`` key)."""
    return experiment_for(RunDirectory(Path(run_dir)).load_config_data())


def _runs_with(capability: Capability) -> str:
    """The kinds of runs that have ``capability``, for messages (``language-model``)."""
    return " and ".join(experiment.label for experiment in experiments_with(capability))


def cmd_evaluate(args: argparse.Namespace) -> None:
    from attnlab.experiments.runs import EVALUATION_RECORD

    experiment = _run_experiment(args.run_dir)  # it refuses --data unless it evaluates given files
    results = experiment.evaluate(
        args.run_dir,
        data_files=args.data,
        checkpoint=args.checkpoint,
        device_name=args.device,
        overrides=args.overrides,
        out=args.out,
    )
    _print_results(results, Path(args.run_dir), experiment)
    if args.out:
        print(f"results: {args.out} (what was evaluated: {Path(args.out) / EVALUATION_RECORD})")


def cmd_plot(args: argparse.Namespace) -> None:
    experiment = _run_experiment(args.run_dir)
    if args.steps is not None and not experiment.supports(Capability.PLOT_STEPS):
        raise ConfigError(f"--steps applies to {_runs_with(Capability.PLOT_STEPS)} runs only")
    request = PlotRequest(
        args.test_set, args.data, tuple(args.index), args.device, args.steps, args.checkpoint
    )
    for path in experiment.plot_run(args.run_dir, request):
        print(path)


def cmd_generate(args: argparse.Namespace) -> None:
    from attnlab.io import atomic_write_json

    experiment = _run_experiment(args.run_dir)
    if not experiment.supports(Capability.GENERATE):
        raise ConfigError(
            f"generate applies to {_runs_with(Capability.GENERATE)} runs; {args.run_dir} is a "
            f"{experiment.name} run"
        )
    _check_sampling_options(args)
    request = GenerationRequest(
        prompt=args.prompt,
        words=args.words,
        temperature=args.temperature,
        top_k=args.top_k,
        samples=args.samples,
        seed=args.seed,
        checkpoint=args.checkpoint,
        device_name=args.device,
    )
    result = experiment.generate_text(args.run_dir, request)
    if result["unknown"]:
        print(
            f"attnlab: prompt words not in the vocabulary, read as <unk>: {result['unknown']}",
            file=sys.stderr,
        )
    for index, sample in enumerate(result["samples"]):
        if len(result["samples"]) > 1:
            print(f"--- sample {index}")
        print(experiment.as_text([*result["prompt"], *sample["words"]]))
    if args.out:
        atomic_write_json(args.out, result)
        print(f"\nwords and attention weights: {args.out}")


def cmd_translate(args: argparse.Namespace) -> None:
    from attnlab.io import atomic_write_json

    experiment = _run_experiment(args.run_dir)
    if not experiment.supports(Capability.TRANSLATE):
        raise ConfigError(
            f"translate applies to {_runs_with(Capability.TRANSLATE)} runs; {args.run_dir} is a "
            f"{experiment.name} run"
        )
    sources, origin = _translation_sources(args)
    request = TranslationRequest(tuple(sources), origin, args.checkpoint, args.device, tuple(args.overrides))
    result = experiment.translate(args.run_dir, request)
    if result["unknown"]:
        print(
            f"attnlab: source words not in the vocabulary, read as <unk>: {result['unknown']}",
            file=sys.stderr,
        )
    unstopped = sum(not translation["stopped"] for translation in result["translations"])
    for translation in result["translations"]:
        print(" ".join(translation["output"]))
    if unstopped:
        print(
            f"attnlab: {unstopped} of {len(sources)} outputs reached the decoding budget without <eos> "
            "(evaluation.max_length; for Lookup Tables runs without it, 2 × the source's length + 10)",
            file=sys.stderr,
        )
    if args.out:
        atomic_write_json(args.out, result)
        print(f"attnlab: sources, outputs and attention weights: {args.out}", file=sys.stderr)


def _translation_sources(args: argparse.Namespace) -> tuple[list[str], str | None]:
    """``translate``'s sources, from ``--sources``, ``--file`` or standard input, and the file they
    are the lines of (``None`` for ``--sources``), which errors name."""
    from attnlab.tasks.tsv import lines_of_bytes, read_lines_of_text

    if args.sources and args.file:
        raise ConfigError("give the sources with --sources or --file, not both")
    if args.sources:
        for number, source in enumerate(args.sources, start=1):
            if _OVERRIDE_AS_SOURCE.match(source):
                raise ConfigError(
                    f"source {number} ({source!r}) is a key=value override read as a source: "
                    "put the overrides before --sources"
                )
        return list(args.sources), None
    content = "sources, one a line"
    if args.file:
        origin, lines = args.file, read_lines_of_text(args.file, "a text file", content)
    else:  # bytes, decoded as a file is: not the locale's lenient decoding, nor splitlines()'s breaks
        origin = "standard input"
        lines = lines_of_bytes(sys.stdin.buffer.read(), origin, f"nothing to read; expected {content}")
    sources = [line.rstrip("\r") for line in lines]
    sources[0] = sources[0].removeprefix("\ufeff")  # a byte-order mark
    return sources, origin


def _check_sampling_options(args: argparse.Namespace) -> None:
    for flag, value in (("--words", args.words), ("--samples", args.samples), ("--top-k", args.top_k)):
        if value is not None and value < 1:
            raise ConfigError(f"{flag} must be >= 1, got {value}")
    if not 0 <= args.temperature < math.inf:
        raise ConfigError(
            f"--temperature must be a finite number >= 0 (0: the most probable word), got {args.temperature}"
        )


def run_sweep_command(args: argparse.Namespace) -> int:
    """``attnlab sweep``: progress and the aggregate on stdout, failed runs on stderr; returns 0
    when every run asked for (all, or those of ``--only`` and ``--seeds``) is done, 1 when some failed or are
    missing."""
    from attnlab.experiments import runner, sweep

    spec = sweep.load_spec(args.spec)
    out_dir = Path(args.out) if args.out else Path("runs") / Path(args.spec).stem
    if args.status:
        progress = sweep.sweep_progress(spec, out_dir, args.only, args.seeds)
        # --seeds 1 is estimated from the done seeds of the same cells
        reference = sweep.sweep_progress(spec, out_dir, args.only) if args.seeds else None
        print(sweep.progress_markdown(progress, reference))
        return 0
    if args.report_only:
        if args.only or args.seeds:
            raise sweep.SweepError("--report-only aggregates every finished run: drop --only and --seeds")
        cells = sweep.report_only(spec, out_dir)["cells"]
        print(_sweep_table(cells, args.metric, out_dir))
        written = f"aggregate_{args.metric}.md and " if args.metric else ""
        print(f"\n{written}aggregate.{{json,csv,md}} in {out_dir}")
        return 0
    backend = runner.make_backend(args.backend, args.jobs, args.address, args.connect_timeout)
    report = sweep.run_sweep(
        spec, out_dir, backend, retry_failed=args.retry_failed, only=args.only, seeds=args.seeds, log=print
    )
    print()
    counts = report.counts()
    cells = json.loads((out_dir / "aggregate.json").read_text())["cells"]
    print(_sweep_table(cells, args.metric if counts["done"] else None, out_dir))
    print()
    if args.only or args.seeds:
        chosen = report.counts(selected_only=True)
        asked = " ".join(flag for flag, given in (("--only", args.only), ("--seeds", args.seeds)) if given)
        print(
            f"{asked}: {chosen['done']} of {len(report.selected)} runs done, {chosen['failed']} failed, "
            f"{chosen['missing']} missing"
        )
    busy = (
        f" ({len(report.busy)} of them trained by another process meanwhile; the sweep that finishes last, "
        "or this command again, aggregates them)"
        if report.busy
        else ""
    )
    print(
        f"{counts['done']} done, {counts['failed']} failed, {counts['missing']} missing{busy}; "
        f"results in {out_dir}"
    )
    if report.failures:
        print(
            f"failed runs (tracebacks in <run>/{runner.ERROR_FILE}, list in {out_dir / 'failures.json'}):",
            file=sys.stderr,
        )
        for name, error in report.failures.items():
            print(f"  {name}: {error}", file=sys.stderr)
        print("rerun them with --retry-failed, or one with --only RUN", file=sys.stderr)
    return 0 if report.ok else 1


def _sweep_table(cells: dict[str, Any], metric: str | None, out_dir: Path) -> str:
    """A sweep's cells as its ``aggregate.md`` has them, or with ``metric`` as that metric's grid
    (also written to ``aggregate_<metric>.md``), and the runs the epoch cap ended unconverged."""
    from attnlab.experiments import sweep

    table = sweep.write_metric_table(cells, metric, out_dir) if metric else sweep.sweep_markdown(cells)
    return sweep.with_unconverged(table, cells)


def cmd_sweep(args: argparse.Namespace) -> None:
    """CLI handler: exits with status 1 when some runs failed or are still missing (bad input raises
    ``SweepError``)."""
    code = run_sweep_command(args)
    if code:
        raise SystemExit(code)


def cmd_multiseed(args: argparse.Namespace) -> None:
    from attnlab.experiments.aggregate import markdown_summary
    from attnlab.experiments.runner import run_seeds

    data = resolve_config(args.config, args.overrides)
    experiment_for(data).parse_config(data)  # fail on a bad config before the first seed runs
    out_dir = Path(args.out) if args.out else _default_run_dir(args.config)
    aggregate = run_seeds(data, args.seeds, out_dir, train_or_resume)
    print(markdown_summary(aggregate))
    print(f"\nper-seed runs and aggregate.{{json,csv,md}} in {out_dir}")


def cmd_data(args: argparse.Namespace) -> None:
    from attnlab.tasks import lookup, lookup_machine_tasks
    from attnlab.tasks.tsv import write_tsv

    out = Path(args.out)
    machine_tasks = args.protocol == "machine_tasks"
    variants = lookup_machine_tasks.MACHINE_TASKS_VARIANTS if machine_tasks else lookup.VARIANTS
    if args.variant not in variants:
        raise ConfigError(
            f"--variant {args.variant} is not a variant of --protocol {args.protocol}; "
            f"choose one of {list(variants)}"
        )
    if machine_tasks:
        machine_spec = lookup_machine_tasks.MachineTasksLookupSpec(
            variant=args.variant, seed=_or(args.seed, 123)
        )
        for path, rows in lookup_machine_tasks.write_machine_tasks_lookup(machine_spec, out).items():
            print(f"{path}: {rows} examples")
        print(f"{out / lookup_machine_tasks.ARGUMENTS_FILE}: the generation arguments")
        return
    spec = lookup.LookupTablesSpec(variant=args.variant, seed=_or(args.seed, 0))
    for name, examples in lookup.generate_lookup_tables(spec).items():
        write_tsv(out / f"{name}.tsv", examples)
        print(f"{out / f'{name}.tsv'}: {len(examples)} examples")


def _or(value: int | None, default: int) -> int:
    return default if value is None else value


def cmd_configs(args: argparse.Namespace) -> None:
    configs = builtin_configs()
    if args.name is None:
        for name, path in sorted(configs.items()):
            print(f"{name:30s} {config_summary(path)}")
        print(f"\nfiles in {next(iter(configs.values())).parent}; one in full: attnlab configs NAME")
        return
    if args.name not in configs:
        raise ConfigError(f"no built-in config {args.name!r}; built-in: {', '.join(sorted(configs))}")
    print(f"# {configs[args.name]}")
    print(configs[args.name].read_text().rstrip())


_SENTENCE_END = re.compile(r"(?<!\bal)(?<!e\.g)(?<!i\.e)(?<!\bcf)(?<!\bvs)\.\s")


def config_summary(path: Path, width: int = 100) -> str:
    """The first sentence of a config file's leading comment, cut to ``width`` characters."""
    words = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        words += line.lstrip("#").split()
    text = " ".join(words) + " "
    end = _SENTENCE_END.search(text)  # not the period of "et al." or "e.g."
    sentence = (text if end is None else text[: end.start() + 1]).strip()
    return sentence if len(sentence) <= width else sentence[: width - 1].rstrip() + "…"


def cmd_archive(args: argparse.Namespace) -> str:
    from attnlab.experiments.runs import archive_results

    count = archive_results(
        Path(args.source), Path(args.destination), unfinished_checkpoints=args.unfinished_checkpoints
    )
    return f"{count} files (configs, histories, evaluations, race records, aggregates) in {args.destination}"


def _recipe_handler(
    paper: str, run: Callable[[argparse.Namespace], str]
) -> Callable[[argparse.Namespace], str]:
    """A recipe's ``main`` (its report), then one line that says where its files are."""

    def handler(args: argparse.Namespace) -> str:
        if args.report_only and not Path(args.out).is_dir():
            raise ConfigError(
                f"--out {args.out}: no such folder; --report-only rebuilds the tables of the runs an "
                f"earlier 'attnlab reproduce {paper} --out DIR' trained there"
            )
        report = run(args)
        if getattr(args, "status", False):  # a recipe's --status reads, and writes nothing
            return report
        out = Path(args.out).resolve()
        tables = sorted(path.name for path in out.glob("*.md"))
        figures = sorted(out.glob("*.png"))
        written = f"tables {', '.join(tables)}; " if tables else ""
        written += f"{len(figures)} figures (*.png); " if figures else ""
        return f"{report}\n\nattnlab reproduce {paper}: {written}runs and everything else in {out}"

    return handler


def _compact_choices(parser: argparse.ArgumentParser) -> None:
    """List each option's choices once, in its help, instead of argparse's ``{a,b,...}`` in the
    usage line and again beside the option (twice more for ``nargs="+"``); recursively."""
    for action in parser._actions:  # noqa: SLF001 - argparse has no public API for this
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            for subparser in action.choices.values():
                _compact_choices(subparser)
        elif action.choices and action.metavar is None:
            action.metavar = action.dest.upper()
            listed = f"one of: {', '.join(str(choice) for choice in action.choices)}"
            action.help = f"{action.help}; {listed}" if action.help else listed


def _first_paragraph(docstring: str) -> str:
    """A docstring's first paragraph on one line, without its ``literal`` markup: a help description."""
    return " ".join(docstring.strip().split("\n\n")[0].split()).replace("``", "")


DEVICE_HELP = "auto (CUDA when available, else the CPU), cpu, cuda, cuda:N or mps (default: auto)"


_OVERRIDE_AS_SOURCE = re.compile(r"^(evaluation|data)\.[\w.]+=\S*$")
"""An ``evaluation.*`` or ``data.*`` override after ``translate --sources``: argparse takes it for one."""

_OVERRIDE_TAKEN_AS_VALUE = re.compile(r"^argument (?P<option>-[^:]+): invalid [^:]*: '[^'=]+=[^']*'")


class _ArgumentParser(argparse.ArgumentParser):
    """argparse's parser (every subcommand's too), whose usage errors also say where ``key=value``
    overrides go when an option taking several values (``--seeds 0 1 2``, ``--tasks ...``) of a
    command that takes overrides read one as its value: argparse gives such an option every word up
    to the next option."""

    def error(self, message: str) -> NoReturn:
        taken = _OVERRIDE_TAKEN_AS_VALUE.match(message)
        option = self._option_string_actions.get(taken["option"]) if taken is not None else None
        takes_overrides = any(action.dest == "overrides" for action in self._actions)
        if taken is not None and option is not None and option.nargs in ("+", "*") and takes_overrides:
            message += (
                f"; a key=value override after {taken['option']} is read as one of its values: "
                f"put the overrides before {taken['option']}"
            )
        super().error(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _ArgumentParser(prog="attnlab", description=_first_paragraph(__doc__))
    commands = parser.add_subparsers(dest="command", required=True)

    train = commands.add_parser(
        "train",
        help="train a model from a YAML config, then evaluate it",
        description="Train a model from a YAML config (a file, or a built-in name: attnlab configs) "
        "with key=value overrides, then evaluate it on its test sets. RUN_DIR gets the config, "
        "train.log, metrics.jsonl, checkpoints/ and eval/. Example: attnlab train lookup "
        "training.epochs=5 --run-dir runs/try",
    )
    train.add_argument("config", help="YAML file or built-in config name")
    train.add_argument("overrides", nargs="*", help="key=value overrides, e.g. training.epochs=5")
    train.add_argument("--run-dir", help="output directory (default runs/<config name>)")
    train.add_argument("--resume", action="store_true", help="continue from RUN_DIR/checkpoints/last.pt")
    train.add_argument(
        "--overwrite",
        action="store_true",
        help="delete an earlier run in RUN_DIR first (a folder that holds files but nothing a run "
        "writes is refused, never emptied)",
    )
    train.set_defaults(handler=cmd_train)

    evaluate = commands.add_parser(
        "evaluate",
        help="evaluate a trained run on its test sets or on TSV files, with its or other evaluation settings",
        description="Evaluate a trained run's checkpoint on its test sets (or on --data files). The "
        "results go to RUN_DIR/eval/, unless evaluation.KEY=VALUE overrides change the run's "
        "evaluation settings: their results go to --out DIR (required then), with DIR/evaluation.yaml "
        "saying which run, checkpoint and overrides they are of; RUN_DIR/eval/ is left alone.",
    )
    evaluate.add_argument("run_dir", metavar="RUN_DIR", help="a run directory that attnlab train wrote")
    evaluate.add_argument(
        "overrides",
        nargs="*",
        help="key=value: where the run's data lives now, if it moved (data.corpus, data.root, "
        "data.train_file, data.validation_file, data.test_files, data.vocabulary_file, data.cbt_files), "
        "or any key of the run's evaluation section (evaluation.stop_threshold=0.8, "
        "evaluation.batch_size=100, ...; needs --out); the trained model's keys cannot change",
    )
    evaluate.add_argument(
        "--data",
        nargs="+",
        help="files in the run's data format to evaluate on instead of its test sets: machine-tasks TSV, "
        "SCAN IN/OUT, corpus text (results: RUN_DIR/eval/files/<file name>.json, or --out DIR)",
    )
    evaluate.add_argument(
        "--out",
        metavar="DIR",
        help="write the results (the files of RUN_DIR/eval/) and evaluation.yaml to this folder "
        "instead of RUN_DIR/eval/; required with evaluation.* overrides",
    )
    evaluate.add_argument(
        "--checkpoint",
        choices=CHECKPOINTS,
        help="default: the run's evaluation.checkpoint; trained: a run with training.ema_decay, its "
        "trained weights instead of their average",
    )
    evaluate.add_argument("--device", default="auto", help=DEVICE_HELP)
    evaluate.set_defaults(handler=cmd_evaluate)

    from attnlab.experiments import compare

    compare_parser = commands.add_parser(
        "compare",
        help="paired bootstrap: is each run better than a baseline on the same test set?",
        description="Is each run better than the baseline (the first RUN_DIR) on the same test set, "
        "beyond the noise of the test set's sample? A paired bootstrap over the per-unit scores "
        "attnlab train / evaluate write beside a run's metrics: perplexity by sentence or document "
        "(language models), seq_acc, seq_acc_be, seq_acc_given_length or corpus BLEU by example "
        "(sequence-to-sequence runs). The runs must be evaluated on the same data. Example: attnlab "
        "compare runs/lstm runs/attention --unit document",
    )
    compare.add_arguments(compare_parser)
    compare_parser.set_defaults(handler=compare.main)

    plot = commands.add_parser(
        "plot",
        help="a run's attention (heatmaps, Dubois Fig. 9, Daniluk Fig. 3, α_t over time) and curves",
        description="Plot a run's attention on test examples (heatmaps, every layer and head, Dubois "
        "et al.'s Figure 9 view, Daniluk et al.'s Figure 3, α_t over time) and its training curves, "
        "as PNG files in RUN_DIR/plots/.",
    )
    plot.add_argument("run_dir", metavar="RUN_DIR", help="a run directory that attnlab train wrote")
    plot.add_argument("--test-set", default=None, help="one of the run's test sets (default: its main one)")
    plot.add_argument(
        "--data", help="a file in the run's data format instead: machine-tasks TSV, SCAN IN/OUT, corpus text"
    )
    plot.add_argument(
        "--index",
        type=int,
        nargs="+",
        default=[0],
        help="example (language models: document; memory problems: sequence) indices (default: 0)",
    )
    plot.add_argument("--steps", type=int, help="language-model runs: words per heatmap (default 40)")
    plot.add_argument(
        "--checkpoint",
        choices=CHECKPOINTS,
        help="default: the run's evaluation.checkpoint; another one's attention plots go to "
        "RUN_DIR/plots/<checkpoint>/",
    )
    plot.add_argument("--device", default="auto", help=DEVICE_HELP)
    plot.set_defaults(handler=cmd_plot)

    generate = commands.add_parser(
        "generate",
        help="sample text from a trained language model",
        description="Sample text from a trained language model run, with each step's attention.",
    )
    generate.add_argument("run_dir", metavar="RUN_DIR", help="a language-model run directory")
    generate.add_argument(
        "--prompt",
        default="",
        help="words to continue; a line break ends a sentence (default: a new document)",
    )
    generate.add_argument("--words", type=int, default=100, help="how many words to sample (default: 100)")
    generate.add_argument(
        "--temperature",
        type=float,
        default=1.0,
        help="divides the logits before sampling; 0: always the most probable word (default: 1.0)",
    )
    generate.add_argument("--top-k", type=int, help="sample among the k most probable words only")
    generate.add_argument("--samples", type=int, default=1, help="independent continuations (default: 1)")
    generate.add_argument("--seed", type=int, default=0, help="the sampling's random seed (default: 0)")
    generate.add_argument(
        "--checkpoint", choices=CHECKPOINTS, help="default: the run's evaluation.checkpoint"
    )
    generate.add_argument("--device", default="auto", help=DEVICE_HELP)
    generate.add_argument("--out", help="also write the words and attention weights to this JSON file")
    generate.set_defaults(handler=cmd_generate)

    translate = commands.add_parser(
        "translate",
        help="decode given sources with a trained sequence-to-sequence run, as its evaluation decodes",
        description="Decode sources with a trained Lookup Tables or SCAN / English-French run, exactly as "
        "its evaluation decodes its test sets (its stop rules and length budget), and print each output "
        "on a line. Sources are whitespace-separated tokens ('000 t1 t2 .', 'jump twice after walk'), "
        "from --sources, --file (one a line) or standard input.",
    )
    translate.add_argument("run_dir", metavar="RUN_DIR", help="a sequence-to-sequence run directory")
    translate.add_argument(
        "overrides",
        nargs="*",
        help="evaluation.KEY=VALUE: decode with other evaluation settings than the run's "
        "(evaluation.max_length=80, evaluation.stop_threshold=0.8, ...)",
    )
    translate.add_argument(
        "--sources", nargs="+", metavar="SOURCE", help="the sources, each one quoted string of tokens"
    )
    translate.add_argument("--file", help="a text file of sources, one a line (default: standard input)")
    translate.add_argument(
        "--checkpoint", choices=CHECKPOINTS, help="default: the run's evaluation.checkpoint"
    )
    translate.add_argument("--device", default="auto", help=DEVICE_HELP)
    translate.add_argument(
        "--out",
        help="also write each source, output, whether it stopped, and its attention weights (a "
        "Transformer's: every decoder layer's and head's too) to this JSON file",
    )
    translate.set_defaults(handler=cmd_translate)

    multiseed = commands.add_parser(
        "multiseed",
        help="train one config over several seeds; mean ± std",
        description="Train one config once per seed (OUT/seed<N>/, one after the other; finished seeds "
        "are skipped) and write the metrics' mean ± std over the seeds to OUT/aggregate.{json,csv,md}.",
    )
    multiseed.add_argument("config", help="YAML file or built-in config name")
    multiseed.add_argument("overrides", nargs="*", help="key=value overrides, e.g. training.epochs=5")
    add_seeds_argument(multiseed, [0, 1, 2])
    multiseed.add_argument("--out", help="output directory (default runs/<config name>)")
    multiseed.set_defaults(handler=cmd_multiseed)

    from attnlab.experiments import sweep
    from attnlab.reporting import html as html_report

    sweep_parser = commands.add_parser(
        "sweep",
        help="run a grid × seeds sweep (local processes or Ray)",
        description="Run a sweep spec (YAML: config, overrides, grid, seeds; or a built-in sweep's name) "
        "into OUT/<key>=<value>,.../seed<N>/: finished runs are skipped, interrupted ones resume, and "
        "each cell's mean ± std goes to its aggregate.{json,csv,md}.",
    )
    sweep.add_arguments(sweep_parser)
    sweep_parser.set_defaults(handler=cmd_sweep)

    report_parser = commands.add_parser(
        "report",
        help="a static, self-contained HTML report of a runs directory",
        description="Write one self-contained HTML file (no server, no script; images embedded) of a "
        "folder of runs: the recipes' and sweeps' tables and figures, and per run its status, test "
        "metrics, learning curve, attention plots (attnlab plot's) and how its wrong outputs are wrong.",
    )
    html_report.add_arguments(report_parser)
    report_parser.set_defaults(handler=html_report.main)

    data = commands.add_parser(
        "data",
        help="write generated Lookup Tables splits as machine-tasks TSV files",
        description="Generate Lookup Tables splits (attnlab's protocol or the machine-tasks one) and "
        "write them as machine-tasks TSV files, the format attnlab train and evaluate --data read.",
    )
    data.add_argument(
        "--protocol",
        choices=["attnlab", "machine_tasks"],
        default="attnlab",
        help="attnlab: interpolation and long1-5 test sets; machine_tasks: the LongLookupTables files "
        "of machine-tasks (train, validation, heldout_*, new_compositions, longer_*)",
    )
    data.add_argument(
        "--variant",
        choices=["long", "reversed", "noisy", "noisy-single", "noisy-multi", "intermediate-noise"],
        default="long",
        help="attnlab: long, reversed, noisy; machine_tasks: long, reversed, noisy-single, noisy-multi, "
        "intermediate-noise",
    )
    data.add_argument("--seed", type=int, help="default 0 (attnlab), 123 (machine_tasks, the published one)")
    data.add_argument("--out", required=True, metavar="DIR", help="the folder the TSV files go to")
    data.set_defaults(handler=cmd_data)

    configs = commands.add_parser(
        "configs",
        help="list the built-in configs, or show one",
        description="List the built-in configs (what attnlab train NAME starts from), or print one's "
        "YAML file, comments included.",
    )
    configs.add_argument("name", nargs="?", help="a built-in config to print in full")
    configs.set_defaults(handler=cmd_configs)

    archive = commands.add_parser(
        "archive",
        help="copy a run tree's results (no checkpoints) where a report can be rebuilt from them",
        description="Copy what reports read from a run tree (configs, metrics.jsonl, eval/*.json, race "
        "records, sweep aggregates; no checkpoints, logs or predictions) to DESTINATION, keeping the "
        "layout: attnlab reproduce PAPER --out DESTINATION --report-only (or attnlab sweep SPEC --out "
        "DESTINATION --report-only) then rebuilds the tables, but for what reads the runs' predictions "
        "or checkpoints (daniluk2017's bootstrap column against the LSTM and Figure 3a).",
    )
    archive.add_argument("source", help="a run tree: a recipe's or a sweep's --out, or one run directory")
    archive.add_argument("destination", help="where the archive goes (files there are replaced)")
    archive.add_argument(
        "--unfinished-checkpoints",
        action="store_true",
        help="also keep the checkpoints (last.pt; best.pt and trained.pt where there) of the runs that "
        "have not finished, so they resume from the archive and are evaluated as their config says",
    )
    archive.set_defaults(handler=cmd_archive)

    reproduce = commands.add_parser("reproduce", help="reproduce a paper's tables and figures")
    papers = reproduce.add_subparsers(dest="paper", required=True)
    for paper, recipe in recipes().items():
        summary = _first_paragraph(recipe.__doc__ or paper)
        recipe.add_arguments(papers.add_parser(paper, help=summary, description=summary))
        papers.choices[paper].set_defaults(handler=_recipe_handler(paper, recipe.main))
    _compact_choices(parser)
    return parser


def _print_results(results: dict[str, dict[str, float]], run_dir: Path, experiment: Experiment) -> None:
    from attnlab.reporting.tables import results_table

    print(results_table(results, experiment.percent_metrics))
    print(f"\nrun directory: {run_dir}")


def _parse(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """Parse ``argv``, also taking ``key=value`` overrides that come after the options
    (``attnlab train lookup --run-dir runs/a --resume training.epochs=8``)."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        if not isinstance(getattr(args, "overrides", None), list) or any(
            item.startswith("-") or "=" not in item for item in extra
        ):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        args.overrides = [*args.overrides, *extra]
    return args


def main(argv: list[str] | None = None) -> int:
    from attnlab.errors import USER_ERRORS
    from attnlab.training.allocator import keep_freed_memory

    args = _parse(build_parser(), argv)
    keep_freed_memory()
    console = logging.StreamHandler(sys.stderr)
    console.setFormatter(LOG_FORMAT)
    try:
        with log_to(console):
            output = args.handler(args)  # what a command shows on stdout, or None (it printed)
        if output is not None:
            print(output)
    except USER_ERRORS as error:
        print(f"attnlab: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("attnlab: interrupted; resume a training run with --resume", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the output went to a reader that stopped early (`| head`)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the Python docs' recipe
        return 141
    return 0


if __name__ == "__main__":
    sys.exit(main())
