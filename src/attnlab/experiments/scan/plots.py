"""``attnlab plot`` for SCAN and English–French runs: attention heatmaps, the words' translations
and training curves.

Each attention heatmap is the alignment attention of the greedy decoding of one command (Russin et
al. 2019, Figure 3): rows are the output actions, columns the command's words. For Syntactic
Attention ``translations.png`` shows what each word says when attended alone (eq. 1). For a
Transformer ``attention_<set>_<i>_heads.png`` beside it shows every decoder layer's and head's
cross-attention. The heatmaps of a test set's (or ``--data`` file's) commands say in their title
whether the decoding is right, or where it stops or first leaves the gold actions.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from attnlab.config import ConfigError
from attnlab.evaluation.seq2seq import decode_greedily, decoded_steps
from attnlab.experiments.base import PlotRequest
from attnlab.experiments.driver import load_trained
from attnlab.experiments.registry import check_plot_indices
from attnlab.experiments.runs import RunDirectory
from attnlab.experiments.scan import experiment
from attnlab.experiments.seq2seq_common import decoded_cross_attention_maps
from attnlab.models.stepwise import StepwiseSeq2Seq
from attnlab.models.syntactic_attention import SyntacticAttentionSeq2Seq
from attnlab.plotting import plot_attention_heads, plot_attention_heatmap, plot_run_history
from attnlab.tasks import scan, scan_data
from attnlab.tasks.batching import collate
from attnlab.tasks.examples import Seq2SeqExample
from attnlab.tasks.vocab import EOS_TOKEN, Vocabulary

END_MARKER_LABEL = "<end>"
"""The heatmap column of the end-of-command position (``model.end_marker: true``)."""


def plot_attention(
    run_dir: str | Path,
    commands: Sequence[str],
    *,
    device_name: str = "auto",
    out_dir: str | Path | None = None,
) -> list[Path]:
    """Heatmaps of the greedy decoding's attention for each command (words separated by spaces).

    Files go to ``RUN_DIR/plots/attention_<i>.png`` (or ``out_dir``; for a Transformer also
    ``attention_<i>_heads.png``); returns their paths. Words
    outside the vocabulary are an error (or ``<unk>`` with ``data.unknown_words: unk``).
    """
    run, config, model, vocabularies = _load(run_dir, device_name)
    folder = Path(out_dir) if out_dir is not None else run.plots_dir
    written = []
    for index, command in enumerate(commands):
        written += _plot_command(
            model, vocabularies, config, tuple(command.split()), folder / f"attention_{index}.png"
        )
    return written


def plot_run(run_dir: str | Path, request: PlotRequest) -> list[Path]:
    """Heatmaps for examples ``request.indices`` of a test set (default: the run's first) or of an
    ``IN: … OUT: …`` file, and the training curves; returns the files written."""
    run, config, model, vocabularies = _load(run_dir, request.device_name, request.checkpoint)
    name, examples = _examples(config, request.test_set, request.data_file)
    written = []
    for index in check_plot_indices(list(request.indices), len(examples), name):
        path = request.attention_folder(run.plots_dir) / f"attention_{name}_{index}.png"
        example = examples[index]
        written += _plot_command(model, vocabularies, config, example.source, path, example.target)
    if isinstance(model, SyntacticAttentionSeq2Seq) and model.translates_words_alone:
        translations = request.attention_folder(run.plots_dir) / "translations.png"
        written.append(plot_word_translations(model, vocabularies, translations))
    curves = plot_run_history(run.metrics_file, run.plots_dir / "training_curves.png")
    written += [curves] if curves else []
    return written


def plot_word_translations(
    model: SyntacticAttentionSeq2Seq, vocabularies: tuple[Vocabulary, Vocabulary], path: Path
) -> Path:
    """What each word says when attended alone (:meth:`SyntacticAttentionSeq2Seq.word_translations`):
    one row per source word, one column per output token, the special tokens left out except ``<eos>``."""
    source_vocab, target_vocab = vocabularies
    table = model.word_translations().cpu().numpy()
    rows = [index for index, word in enumerate(source_vocab.tokens) if word not in source_vocab.specials]
    words = [source_vocab.tokens[index] for index in rows]
    if model.end_marker_id is not None:
        rows.append(model.end_marker_id)
        words.append(END_MARKER_LABEL)
    kept = {target_vocab.eos_id} | {
        index for index, token in enumerate(target_vocab.tokens) if token not in target_vocab.specials
    }
    columns = sorted(kept)
    outputs = [target_vocab.tokens[index] for index in columns]
    return plot_attention_heatmap(
        table[rows][:, columns],
        outputs,
        words,
        path,
        title="readout of each word's translation, softmax(W_y m_w + b)",
        axis_labels=("output token", "source word"),
        value_label="probability",
        vmax=1.0,
    )


def _load(
    run_dir: str | Path, device_name: str, checkpoint: str | None = None
) -> tuple[RunDirectory, experiment.ScanExperimentConfig, StepwiseSeq2Seq, tuple[Vocabulary, Vocabulary]]:
    trained = load_trained(experiment.EXPERIMENT, run_dir, device_name, checkpoint)
    model, source_vocab, target_vocab = trained.loaded
    return trained.run, trained.config, model, (source_vocab, target_vocab)


def _examples(
    config: experiment.ScanExperimentConfig, test_set: str | None, data_file: str | None
) -> tuple[str, list[Seq2SeqExample]]:
    if data_file is not None:
        return Path(data_file).stem, scan.read_scan_file(data_file)
    names = scan_data.test_set_names(config.data)
    name = test_set or names[0]
    if name not in names:
        raise ConfigError(f"--test-set {name!r} is not a test set of this run; choose one of {names}")
    return name, scan_data.load_splits(config.data)[name].examples


def _plot_command(
    model: StepwiseSeq2Seq,
    vocabularies: tuple[Vocabulary, Vocabulary],
    config: experiment.ScanExperimentConfig,
    words: tuple[str, ...],
    path: Path,
    target: Sequence[str] | None = None,
) -> list[Path]:
    """The heatmap of the greedy decoding of ``words`` at ``path``; for a Transformer also the grid
    of every decoder layer and head (``<stem>_heads.png``). With the gold ``target``, the titles
    say whether the decoding is right, or where it leaves the target."""
    source_vocab, target_vocab = vocabularies
    command = " ".join(words)
    example = scan_data.Split([Seq2SeqExample(words, target_vocab.tokens[-1:])], f"command {command!r}")
    encoded = scan_data.encode_split(example, source_vocab, target_vocab, "plot")
    device = next(model.parameters()).device
    batch = collate(encoded.dataset, [0]).to(device)
    decoded = decode_greedily(model, batch.source, batch.source_padding_mask, config.evaluation)
    assert decoded.tokens is not None
    steps = decoded_steps(decoded.tokens, model.pad_id)[0]
    outputs = target_vocab.decode(decoded.tokens[0, :steps])
    weights = decoded.attention[0, : len(outputs)].cpu().numpy()
    columns = list(words) + [END_MARKER_LABEL] * (weights.shape[1] - len(words))  # model.end_marker
    title = command if target is None else f"{command}\n{decoding_outcome(outputs, target)}"
    written = [plot_attention_heatmap(weights, columns, outputs, path, title=title)]
    heads = decoded_cross_attention_maps(model, batch.source, batch.source_padding_mask, decoded)
    if heads is not None:
        maps, head_names = heads
        written.append(
            plot_attention_heads(
                maps[0, :, :, : len(outputs), : len(columns)].cpu().numpy(),
                columns,
                outputs,
                path.with_name(f"{path.stem}_heads{path.suffix}"),
                head_names=head_names,
                title=f"{title}\ncross-attention of every decoder layer and head",
            )
        )
    return written


def decoding_outcome(outputs: Sequence[str], target: Sequence[str]) -> str:
    """How a decoding (its tokens up to and including ``<eos>``, if any) compares with the gold
    actions: right, or how many actions it gives, how many the target has, and the first step
    where they differ."""
    actions = list(outputs[:-1]) if outputs and outputs[-1] == EOS_TOKEN else list(outputs)
    ended = len(actions) < len(outputs)
    if ended and actions == list(target):
        return f"right: {len(target)} actions"
    first_difference = next(
        (step for step, (got, gold) in enumerate(zip(actions, target)) if got != gold),
        min(len(actions), len(target)),
    )
    stop = "stops after" if ended else "no <eos> in"
    count = f"{len(actions)} action{'' if len(actions) == 1 else 's'}"
    return f"wrong: {stop} {count} of {len(target)}; first difference at action {first_difference + 1}"
