"""Issue 28, past the papers: location attention inside a Transformer, every positional scheme on
Lookup Tables and SCAN, in one set of tables beside the recurrent models and published results.

Dubois et al. (2020, §8) leave open how location attention would work in self-attention models.
:class:`attnlab.models.transformer.TransformerSeq2Seq` takes any attnlab attender as its
cross-attention heads and its positional scheme as a flag; the built-in sweeps train the grid, and
this recipe runs them (finished runs are skipped, interrupted ones resume) and joins their
aggregates into the issue's tables. Parts, each one built-in sweep with its runs in ``OUT/<part>/``:

* ``lookup`` (``lookup_transformer``): Long, Reversed, Noisy × 7 schemes × {dot, shift} heads,
  ``<eos>`` from the output layer, 3 seeds;
* ``lookup_stop`` (``lookup_transformer_stop``): shift heads that only walk, keys from a window of
  three words, ``<eos>`` from the last layer's attention (``model.transformer.stop_from_attention``);
* ``lookup_stop_all_layers`` (``lookup_transformer_stop_all_layers``): the same with ``<eos>`` from
  every decoder layer's heads (``model.transformer.stop_layers=all``), on Noisy-start only, whose
  failures it was built for;
* ``lookup_stop_gate10`` (``lookup_transformer_stop_gate10``): the same with a sharper gate over those
  heads (``model.transformer.stop_gate_scale=10``);
* ``lookup_stop_detached`` (``lookup_transformer_stop_detached``): the same with a stop whose loss
  trains the gate alone, not the heads (``model.transformer.stop_detached``);
* ``lookup_stop_gradient01`` (``lookup_transformer_stop_gradient01``): the gate ×10 stop with a tenth
  of its gradient reaching the heads (``model.transformer.stop_head_gradient=0.1``);
* ``lookup_stop_gradient01_machine_tasks`` (``lookup_transformer_stop_gradient01_machine_tasks``):
  that model on the paper's own data protocol instead of attnlab's generator
  (``data.protocol=machine_tasks``), all five of its variants × 7 schemes, 3 seeds, every test set;
* ``scan`` (``scan_transformer``): SCAN add-jump × 7 schemes × {dot, shift}, 3 seeds;
* ``scan_length`` (``scan_transformer_length``): the length split with ``<eos>`` from the output
  layer, 7 schemes × {dot, shift}, one seed (no output of it is longer than the training outputs);
* ``scan_stop`` (``scan_transformer_stop``): the length split with ``<eos>`` from every layer's
  attention on an end marker through the sharper gate, 7 schemes × {dot, shift}, 3 seeds;
* ``scan_simple`` (``scan_transformer_simple``): the simple split trained to convergence (up to 150
  epochs), 3 seeds;
* ``scan_cutoffs`` (``scan_transformer_length_cutoffs``): the length split cut at 22–40 actions,
  trained to convergence (up to 150 epochs);
* ``scan_semantic`` (``scan_transformer_semantic``): add-jump with the output read from the attended
  words' embeddings (``model.transformer.semantic_output``, Russin et al. 2019's separation);
* ``scan_peers`` (``scan_transformer_peers``): as ``scan_semantic``, with the values' embeddings of
  their own and a word (or output token) seen only alone read by the syntax as its peers
  (``model.transformer.peer_words``);
* ``scan_peers_dropout`` (``scan_transformer_peers_dropout``): as ``scan_peers``, with the decoder's
  inputs read as the peers' mean a tenth of the time in training (``model.transformer.peer_dropout``);
* ``scan_shared_heads`` (``scan_transformer_shared_heads``): as ``scan_peers_dropout``, with one value
  a word read by every head (``model.transformer.semantic_heads=shared``) and ``<eos>`` from every
  layer's attention on the end marker as in ``scan_stop``;
* ``scan_gated_heads`` (``scan_transformer_gated_heads``): as ``scan_shared_heads``, with the heads'
  glimpses weighted by a softmax over the heads from the decoder's state
  (``model.transformer.semantic_heads=gated``);
* ``scan_peers_as_one`` (``scan_transformer_peers_as_one``): as ``scan_gated_heads``, with every peer
  word read as the peers' mean by both sides (``model.transformer.peers_as_one``), the decoder's
  peers the outputs of one-word commands and no peer dropout, up to 100 epochs;
* ``scan_recurrent_shift`` (``scan_gru_shift``): the recurrent Shift Attender beside them, the GRU +
  attention model of Russin et al.'s Table 1 with Dubois et al.'s Shift Attender as its attention and
  ``<eos>`` from the attention on the end marker, on the length, add-jump and simple splits, 3 seeds;
* ``scan_recurrent_shift_cutoffs`` (``scan_gru_shift_cutoffs``): that model on the length split cut at
  the cut-offs of ``scan_cutoffs``, one seed, a row of its table;
* ``scan_recurrent_lstm_shift`` (``scan_lstm_shift``): that model with an LSTM decoder
  (``model.decoder_cell=lstm``, whose cell can count without bound: Weiss et al. 2018) on the length
  split, 5 seeds;
* ``scan_recurrent_shift_markers`` (``scan_gru_shift_markers``): the GRU model on the length split
  with the grammar's structure written into its outputs (``data.output_markers``: ``<rep>`` between
  the copies of a twice / thrice sentence, and ``<sep>`` between sentences as well), extra
  supervision the standard split does not give, rows of their own; 5 seeds.

The add-jump chain (``scan_semantic`` → ``scan_peers`` → ``scan_peers_dropout`` → ``scan_shared_heads``
→ ``scan_gated_heads`` → ``scan_peers_as_one``, each step the one before with one change) runs in the
cell its steps were piloted in, relative positions with shift heads, 3 seeds, and its last step with
dot heads too: the positional schemes are compared on the standard model (``scan``), and a chain
step is a change of the model, not of the positions. Every scheme × heads × 3 seeds for each step
would be 231 runs more, about 230 CPU-hours.

Cost on one CPU thread (docs/results.md, issue 28): a Lookup run about 7–18 minutes (20 epochs), a
SCAN run about 40–70 s an epoch, up to 50 epochs (up to 150 for ``scan_simple`` and ``scan_cutoffs``,
which train to convergence: at the 50-epoch cap most SCAN runs end before their patience rule), a
machine-tasks Lookup run about 6–14 minutes; all twenty-two parts are 766 runs, roughly 230
CPU-hours at the 50-epoch cap and more to convergence, so ``--parts`` and ``--jobs`` matter, and on a
GPU a SCAN epoch takes about 20 s. Sweeps start their runs seed by seed, so a part stopped
halfway has every row at one seed.

Tables (``OUT/results.md``), each cell the test metric as ``mean ± std (n=k)`` over seeds, the
model stopping by itself: Lookup seqAcc at long 5 (and long 1), SCAN exact match (and, to separate
the stop from the rest, with the output length given), SCAN exact match by cut-off, the
length-split cells' exact match on the commands that only join sentences of training length and on
those with a sentence longer than any training output (at Lake & Baroni's 22 actions 80% of the
test set, at every cut-off from 24 up none), and the reference points (attnlab's recurrent models
and published numbers, cited, marked as theirs), and the runs of Csordás et al. 2021's protocol
trained in budget stages outside the sweeps (``OUT/csordas2021``, :func:`budget_table`). A cell
with no finished run is blank.

A table says how each cell's wrong outputs on its headline test set are wrong, summed over its
seeds: stopping too early or too late with every word right (the stop decision), or wrong words.
With ``--failure-plots`` the report also shows where each cell goes wrong: for the first seed of
every finished cell that gets an example of its headline test set (Lookup ``long5``, SCAN
``test``) wrong, the first such example, plotted as ``attnlab plot RUN --test-set SET --index I`` would (the
decoded cross-attention, and for a Transformer every layer's and head's), linked from the table.
"""

from __future__ import annotations

import argparse
import itertools
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from attnlab.checks import did_you_mean
from attnlab.config import ConfigError
from attnlab.evaluation.metrics import ERROR_KINDS, WORD_ERROR_KINDS
from attnlab.experiments import sweep
from attnlab.experiments.aggregate import summarize
from attnlab.experiments.base import PlotRequest
from attnlab.experiments.registry import experiment_for
from attnlab.experiments.runner import add_out_argument, add_parallel_arguments, backend_for
from attnlab.experiments.runs import RunDirectory
from attnlab.experiments.unit_scores import (
    ERROR_COUNTS,
    PREDICTIONS_SUFFIX,
    counts_words,
    read_prediction_units,
    read_test_set_errors,
)
from attnlab.io import atomic_write_text
from attnlab.reporting.tables import format_table, stats_text
from attnlab.tasks import scan

PAPER = "location_transformer"
"""The recipe's name: ``attnlab reproduce location_transformer``."""

PARTS: dict[str, str] = {
    "lookup": "lookup_transformer",
    "lookup_stop": "lookup_transformer_stop",
    "lookup_stop_all_layers": "lookup_transformer_stop_all_layers",
    "lookup_stop_gate10": "lookup_transformer_stop_gate10",
    "lookup_stop_detached": "lookup_transformer_stop_detached",
    "lookup_stop_gradient01": "lookup_transformer_stop_gradient01",
    "lookup_stop_gradient01_machine_tasks": "lookup_transformer_stop_gradient01_machine_tasks",
    "scan": "scan_transformer",
    "scan_length": "scan_transformer_length",
    "scan_stop": "scan_transformer_stop",
    "scan_simple": "scan_transformer_simple",
    "scan_cutoffs": "scan_transformer_length_cutoffs",
    "scan_semantic": "scan_transformer_semantic",
    "scan_peers": "scan_transformer_peers",
    "scan_peers_dropout": "scan_transformer_peers_dropout",
    "scan_shared_heads": "scan_transformer_shared_heads",
    "scan_gated_heads": "scan_transformer_gated_heads",
    "scan_peers_as_one": "scan_transformer_peers_as_one",
    "scan_recurrent_shift": "scan_gru_shift",
    "scan_recurrent_shift_cutoffs": "scan_gru_shift_cutoffs",
    "scan_recurrent_lstm_shift": "scan_lstm_shift",
    "scan_recurrent_shift_markers": "scan_gru_shift_markers",
}
"""Part → the built-in sweep that trains it (its runs in ``OUT/<part>/``)."""

HEADLINE_TEST_SETS: dict[str, str] = {
    "lookup": "long5",
    "lookup_stop": "long5",
    "lookup_stop_all_layers": "long5",
    "lookup_stop_gate10": "long5",
    "lookup_stop_detached": "long5",
    "lookup_stop_gradient01": "long5",
    "lookup_stop_gradient01_machine_tasks": "longer_seen_5",
    "scan": "test",
    "scan_length": "test",
    "scan_stop": "test",
    "scan_simple": "test",
    "scan_cutoffs": "test",
    "scan_semantic": "test",
    "scan_peers": "test",
    "scan_peers_dropout": "test",
    "scan_shared_heads": "test",
    "scan_gated_heads": "test",
    "scan_peers_as_one": "test",
    "scan_recurrent_shift": "test",
    "scan_recurrent_shift_cutoffs": "test",
    "scan_recurrent_lstm_shift": "test",
    "scan_recurrent_shift_markers": "test",
}
"""Part → the test set its main table reports, where ``--failure-plots`` looks for a wrong example."""

POSITIONAL = "model.transformer.positional"
HEADS = "model.transformer.cross_attention"
VARIANT = "data.variant"
SPLIT = "data.split"
CUTOFF = "data.max_train_actions"
MARKERS = "data.output_markers"

VARIANT_NAMES = {
    "long": "Long",
    "reversed": "Reversed",
    "noisy": "Noisy-start",
    "noisy-single": "Noisy single (the paper's Noisy start)",
    "noisy-multi": "Noisy multi",
    "intermediate-noise": "Intermediate noise",
}
"""Lookup Tables variant (attnlab's generator and the machine-tasks protocol) → the name its table
is shown under."""

MACHINE_TASKS_TEST_SETS: tuple[str, ...] = (
    "heldout_inputs",
    "heldout_compositions",
    "longer_seen_1",
    "longer_seen_5",
    "heldout_tables",
    "new_compositions",
    "longer_incremental_5",
    "longer_new_5",
)
"""The columns of the machine-tasks tables: the protocol's test sets of tables seen composed in
training (new inputs, new compositions, one and five compositions longer), then those with tables seen
only alone, which no model of attnlab's solves (issue 26)."""

SPLIT_NAMES = {"length": "length", "addprim_jump": "add-jump", "simple": "simple"}
"""SCAN split → its column name, in the tables' order."""

REFERENCE_POINTS: tuple[tuple[str, str, str, str], ...] = (
    (
        "Lookup Long / Reversed / Noisy, long 5",
        "recurrent seq2seq, Shift Attender (attnlab, `lookup_shift`, 5 seeds)",
        "100.0 ± 0.0 / 99.98 ± 0.04 / 100.0 ± 0.0",
        "docs/results.md, issue 6, session 6",
    ),
    (
        "Lookup Long, three tokens past training",
        "recurrent seq2seq with Transformer (sinusoidal) attention (theirs)",
        "100% → 0%",
        "Dubois et al. 2020, §6 and Fig. 6",
    ),
    (
        "SCAN length (cut at 22 actions)",
        "Syntactic Attention (theirs, the output length given)",
        "15.2 ± 0.7",
        "Russin et al. 2019, Table 1",
    ),
    (
        "SCAN length (cut at 22 actions)",
        "Syntactic Attention, `scan_robust` (attnlab, stopping by itself; length given)",
        "10.4; 52.3 (seed 0)",
        "docs/results.md, issue 29, session 24",
    ),
    (
        "SCAN add-jump",
        "Syntactic Attention (theirs, the output length given, 25 seeds)",
        "median 91.0 ± 27.4 (mean 78.4)",
        "Russin et al. 2019, §4 and Table 1",
    ),
    (
        "SCAN add-jump",
        "Syntactic Attention, `scan_robust` (attnlab, stopping by itself, 5 seeds)",
        "99.27 ± 0.73",
        "docs/results.md, issue 29, session 23",
    ),
    (
        "SCAN length (cut at 22 actions)",
        "CGPS (theirs)",
        "20.3 ± 1.1",
        "Li et al. 2019, as listed in Russin et al. 2019, Table 1",
    ),
    (
        "SCAN length (cut at 22 actions)",
        "Neural QCFG (theirs)",
        "95.7",
        "Kim 2021, Sequence-to-Sequence Learning with Latent Neural Grammars",
    ),
    (
        "SCAN length, cut at 26 actions",
        "Universal Transformer (one layer's weights at every depth), relative positions (theirs)",
        "100%",
        "Csordás et al. 2021, abstract; their results table's column Rel. Uni. Trafo "
        "(RobertCsordas/transformer_generalization, paper/plot_big_result_table.py)",
    ),
)
"""(task, model, number, source) of the reference table; published numbers are marked "theirs"."""


def spec_of(part: str) -> sweep.SweepSpec:
    """The built-in sweep of ``part``; an unknown part is a :class:`ConfigError` listing the parts."""
    if part not in PARTS:
        raise ConfigError(f"unknown part {part!r}; choose from {', '.join(PARTS)}{did_you_mean(part, PARTS)}")
    return sweep.load_spec(sweep.builtin_sweeps()[PARTS[part]])


def reproduce(
    out_dir: Path,
    parts: Sequence[str],
    *,
    jobs: int = 1,
    backend: str = "local",
    address: str | None = None,
    failure_plots: bool = False,
) -> str:
    """Train what is missing of each part's sweep into ``out_dir/<part>``, then :func:`report`."""
    runner = backend_for(backend, jobs, address)
    for part in parts:
        sweep.run_sweep(spec_of(part), out_dir / part, runner)
    return report(out_dir, failure_plots=failure_plots)


def status(out_dir: Path, parts: Sequence[str]) -> str:
    """Each part's progress under ``out_dir/<part>`` (:func:`sweep.progress_totals`: the runs in
    each state, training time, the time left), read from the run directories; nothing is trained
    or written."""
    lines = [f"# {PAPER}: progress in {out_dir}", ""]
    for part in parts:
        progress = sweep.sweep_progress(spec_of(part), out_dir / part)
        lines.append(f"- {part} (`attnlab sweep {PARTS[part]}`): {sweep.progress_totals(progress)}")
    return "\n".join(lines)


def collect(out_dir: Path) -> dict[str, dict[str, Any]]:
    """Part → the cells of its aggregate (rebuilt from its run directories), for the parts with at
    least one finished run."""
    found: dict[str, dict[str, Any]] = {}
    for part in PARTS:
        if not (out_dir / part).is_dir():
            continue
        try:
            found[part] = sweep.report_only(spec_of(part), out_dir / part)["cells"]
        except sweep.SweepError:
            continue
    return found


NO_RUNS = "(no finished runs)"
"""What a table with no finished run shows."""

Label = Callable[[Mapping[str, Any]], str]
"""A row's or a column's label from a sweep cell's grid values."""


def pivot(
    cells: Mapping[str, Any], row: Label, column: Label, test_set: str, metric: str
) -> dict[str, dict[str, str]]:
    """``row label → column label → "mean ± std (n=k)"`` of ``metric`` on ``test_set`` over the
    sweep's cells (those without the metric are left out)."""
    table: dict[str, dict[str, str]] = {}
    for entry in cells.values():
        stats = entry["results"].get(test_set, {}).get(metric)
        if stats is not None:
            table.setdefault(row(entry["params"]), {})[column(entry["params"])] = stats_text(
                stats, count=True
            )
    return table


def joined_table(
    found: Mapping[str, Mapping[str, Any]],
    sources: Sequence[tuple[str, Label]],
    row: Label,
    rows: Sequence[str],
    columns: Sequence[str],
    test_set: str,
    metric: str = "seq_acc",
) -> str:
    """One markdown table of ``metric`` (default seqAcc) on ``test_set`` from several parts
    (``sources``: part and how its cells name their column), rows and columns in the given order."""
    table: dict[str, dict[str, str]] = {}
    for part, column in sources:
        for label, values in pivot(found.get(part, {}), row, column, test_set, metric).items():
            table.setdefault(label, {}).update(values)
    if not table:
        return NO_RUNS
    ordered = {label: table[label] for label in rows if label in table}
    return format_table(ordered, columns, markdown=True)


def _grid_values(part: str, key: str) -> list[str]:
    return [str(value) for value in spec_of(part).grid[key]]


def _scheme(params: Mapping[str, Any]) -> str:
    return str(params[POSITIONAL])


LOOKUP_STOP_PARTS: dict[str, str] = {
    "lookup_stop": "shift + stop",
    "lookup_stop_all_layers": "shift + stop, all layers",
    "lookup_stop_gate10": "shift + stop, all layers, gate ×10",
    "lookup_stop_detached": "shift + stop, all layers, gate ×10, detached",
    "lookup_stop_gradient01": "shift + stop, all layers, gate ×10, gradient ×0.1",
}
"""The Lookup parts with the stop from the attention → their column: from the last layer's
attention; + all layers: from every layer's; + gate ×10: from every layer's through the sharper
gate; + detached: that stop's loss training the gate alone; + gradient ×0.1: a tenth of it reaching
the heads."""

LOOKUP_COLUMNS: tuple[str, ...] = ("dot", "shift", *LOOKUP_STOP_PARTS.values())
"""A Lookup table's columns, the kinds of model (dot and shift heads of the ``lookup`` part, with
``<eos>`` from the output layer, then :data:`LOOKUP_STOP_PARTS`)."""

LOOKUP_SOURCES: tuple[tuple[str, Label], ...] = (
    ("lookup", lambda params: str(params[HEADS])),
    *((part, lambda params, column=column: column) for part, column in LOOKUP_STOP_PARTS.items()),
)
"""The parts of the Lookup tables and how their cells name their column in :data:`LOOKUP_COLUMNS`."""


def lookup_table(found: Mapping[str, Mapping[str, Any]], test_set: str) -> str:
    """One table per variant with a finished run (Long, Reversed, Noisy-start), each under its name
    in bold: rows positional schemes, columns :data:`LOOKUP_COLUMNS` but those of the parts whose
    grid leaves the variant out (``lookup_stop_all_layers`` runs on Noisy-start only)."""
    tables = []
    schemes = _grid_values("lookup", POSITIONAL)
    stop_variants = {column: _grid_values(part, VARIANT) for part, column in LOOKUP_STOP_PARTS.items()}
    for variant in _grid_values("lookup", VARIANT):
        of_variant = {
            part: {cell: entry for cell, entry in cells.items() if str(entry["params"][VARIANT]) == variant}
            for part, cells in found.items()
            if part == "lookup" or part in LOOKUP_STOP_PARTS
        }
        columns = [column for column in LOOKUP_COLUMNS if variant in stop_variants.get(column, [variant])]
        table = joined_table(of_variant, LOOKUP_SOURCES, _scheme, schemes, columns, test_set)
        if table != NO_RUNS:
            tables.append(f"**{VARIANT_NAMES.get(variant, variant)} Lookup Tables**\n\n{table}")
    return "\n\n".join(tables) or NO_RUNS


def machine_tasks_table(found: Mapping[str, Mapping[str, Any]]) -> str:
    """One table per machine-tasks variant with a finished ``lookup_stop_gradient01_machine_tasks`` run,
    each under its name in bold: rows positional schemes, columns :data:`MACHINE_TASKS_TEST_SETS`
    (seqAcc)."""
    part = "lookup_stop_gradient01_machine_tasks"
    tables, cells = [], found.get(part, {})
    for variant in _grid_values(part, VARIANT):
        of_variant = {
            cell: entry for cell, entry in cells.items() if str(entry["params"][VARIANT]) == variant
        }
        table: dict[str, dict[str, str]] = {}
        for test_set in MACHINE_TASKS_TEST_SETS:
            for label, values in pivot(of_variant, _scheme, _named(test_set), test_set, "seq_acc").items():
                table.setdefault(label, {}).update(values)
        if table:
            rows = {label: table[label] for label in _grid_values(part, POSITIONAL) if label in table}
            text = format_table(rows, list(MACHINE_TASKS_TEST_SETS), markdown=True)
            tables.append(f"**{VARIANT_NAMES.get(variant, variant)}**\n\n{text}")
    return "\n\n".join(tables) or NO_RUNS


def _named(name: str) -> Label:
    """The label of a column that one name heads for every cell."""
    return lambda params: name


def _split(params: Mapping[str, Any]) -> str:
    return SPLIT_NAMES.get(params[SPLIT], params[SPLIT])


SCAN_COLUMNS: tuple[str, ...] = (
    "length · dot",
    "length · shift",
    "length · dot + stop",
    "length · shift + stop",
    "add-jump · dot",
    "add-jump · shift",
    "add-jump · dot + semantic",
    "add-jump · shift + semantic",
    "add-jump · dot + peers",
    "add-jump · shift + peers",
    "add-jump · dot + peers, dropout",
    "add-jump · shift + peers, dropout",
    "add-jump · dot + shared heads, stop",
    "add-jump · shift + shared heads, stop",
    "add-jump · dot + gated heads, stop",
    "add-jump · shift + gated heads, stop",
    "add-jump · dot + peers as one, gated heads, stop",
    "add-jump · shift + peers as one, gated heads, stop",
    "simple · dot",
    "simple · shift",
)
"""A SCAN table's columns: split · heads, ``<eos>`` from the output layer (parts ``scan`` and
``scan_simple``) or, with ``+ stop``, from every layer's attention on the end marker (``scan_stop``);
``+ semantic``: the output from the attended words' embeddings (``scan_semantic``); ``+ peers``: and
a word seen only alone read by the syntax as its peers (``scan_peers``); ``+ peers, dropout``: and the
decoder's inputs read as the peers' mean a tenth of the time in training (``scan_peers_dropout``);
``+ shared heads, stop``: and one value a word for every head, ``<eos>`` from every layer's attention
(``scan_shared_heads``); ``+ gated heads, stop``: and the heads' glimpses weighted by a gate from the
decoder's state (``scan_gated_heads``); ``+ peers as one, gated heads, stop``: and every peer word
read as the peers' mean by both sides, in training and at test (``scan_peers_as_one``)."""


def scan_table(found: Mapping[str, Mapping[str, Any]], metric: str = "seq_acc") -> str:
    """Rows: positional schemes; columns :data:`SCAN_COLUMNS`; exact match on the test set
    (``metric`` ``seq_acc``: stopping by itself; ``seq_acc_given_length``: decoded to the target's
    length)."""
    sources: list[tuple[str, Label]] = [
        ("scan_length", lambda params: f"length · {params[HEADS]}"),
        ("scan", lambda params: f"{_split(params)} · {params[HEADS]}"),
        ("scan_stop", lambda params: f"length · {params[HEADS]} + stop"),
        ("scan_semantic", lambda params: f"add-jump · {params[HEADS]} + semantic"),
        ("scan_peers", lambda params: f"add-jump · {params[HEADS]} + peers"),
        ("scan_peers_dropout", lambda params: f"add-jump · {params[HEADS]} + peers, dropout"),
        ("scan_shared_heads", lambda params: f"add-jump · {params[HEADS]} + shared heads, stop"),
        ("scan_gated_heads", lambda params: f"add-jump · {params[HEADS]} + gated heads, stop"),
        ("scan_peers_as_one", lambda params: f"add-jump · {params[HEADS]} + peers as one, gated heads, stop"),
        ("scan_simple", lambda params: f"simple · {params[HEADS]}"),
    ]
    schemes = _grid_values("scan", POSITIONAL)
    return joined_table(found, sources, _scheme, schemes, SCAN_COLUMNS, "test", metric)


RECURRENT_ROWS: dict[str, str] = {
    "seq_acc": "exact match, stopping by itself",
    "seq_acc_given_length": "exact match, the length given",
}
"""The rows of :func:`recurrent_scan_table` for each decoder: metric → its label."""

RECURRENT_PARTS: dict[str, str] = {
    "scan_recurrent_shift": "GRU decoder",
    "scan_recurrent_lstm_shift": "LSTM decoder",
    "scan_recurrent_shift_markers": "GRU decoder",
}
"""The parts of :func:`recurrent_scan_table`: part → its decoder, in the table's order."""


def recurrent_scan_table(found: Mapping[str, Mapping[str, Any]]) -> str:
    """The recurrent Shift Attender on SCAN (parts :data:`RECURRENT_PARTS`): rows each decoder's
    :data:`RECURRENT_ROWS` (a cell trained with output markers its own rows, "GRU decoder +
    repetition markers: …"), columns the splits (:data:`SPLIT_NAMES`), test exact match."""
    table: dict[str, dict[str, str]] = {}
    for part, decoder in RECURRENT_PARTS.items():
        for metric, label in RECURRENT_ROWS.items():

            def row(params: Mapping[str, Any], decoder: str = decoder, label: str = label) -> str:
                return f"{decoder}{_markers_text(params)}: {label}"

            table.update(pivot(found.get(part, {}), row, _split, "test", metric))
    if not table:
        return NO_RUNS
    return format_table(table, list(SPLIT_NAMES.values()), markdown=True)


def _markers_text(params: Mapping[str, Any]) -> str:
    """`` + repetition, sentence markers`` for a cell trained with ``data.output_markers``, else ``""``."""
    markers = params.get(MARKERS)
    if not markers:
        return ""
    kinds = ", ".join(markers) if isinstance(markers, list) else str(markers)
    return f" + {kinds} markers"


RECURRENT_CUTOFF_ROW = "recurrent Shift Attender (GRU)"
"""The cut-off table's row of part ``scan_recurrent_shift_cutoffs``."""


def cutoff_table(found: Mapping[str, Mapping[str, Any]]) -> str:
    """Rows: the Transformer's scheme · heads, then the recurrent Shift Attender
    (:data:`RECURRENT_CUTOFF_ROW`); columns: the most actions a training output has (N); exact
    match on every longer command, stopping by itself."""
    rows = [
        f"{scheme} · {heads}"
        for scheme, heads in itertools.product(
            _grid_values("scan_cutoffs", POSITIONAL), _grid_values("scan_cutoffs", HEADS)
        )
    ]

    def row(params: Mapping[str, Any]) -> str:
        return _scheme_heads(params) if POSITIONAL in params else RECURRENT_CUTOFF_ROW

    def cutoff(params: Mapping[str, Any]) -> str:
        return str(params[CUTOFF])

    sources: list[tuple[str, Label]] = [("scan_cutoffs", cutoff), ("scan_recurrent_shift_cutoffs", cutoff)]
    columns = _grid_values("scan_cutoffs", CUTOFF)
    return joined_table(found, sources, row, [*rows, RECURRENT_CUTOFF_ROW], columns, "test")


SENTENCE_COLUMNS: tuple[str, ...] = (
    "N",
    "commands, every sentence ≤ N",
    "exact match (%), every sentence ≤ N",
    "length given (%), every sentence ≤ N",
    "commands with a sentence > N",
    "exact match (%), a sentence > N",
    "length given (%), a sentence > N",
)
"""The columns of :func:`sentence_table`."""


def sentence_table(found: Mapping[str, Mapping[str, Any]]) -> str:
    """One row per finished length-split cell (parts ``scan_length``, ``scan_stop``, ``scan_cutoffs``,
    ``scan_recurrent_shift_cutoffs``, and :data:`RECURRENT_PARTS` on the length split): its test
    commands in two groups, those whose every sentence has at most N actions (N the most actions of
    a training output) and those with a longer sentence, with each group's size and exact match,
    stopping by itself and with the length given, mean ± std over seeds
    (:func:`~attnlab.experiments.scan.experiment.sentence_length_metrics`; runs evaluated before it
    existed have no row). A model that can join the sentences it was trained on but not lengthen
    one gets only the first group right: at N = 22 that is 776 of 3,920 commands (19.8%), at every
    N from 24 up all of them."""
    rows = {}
    for part, cells in found.items():
        for entry in cells.values():
            cutoff = _length_cutoff(part, entry["params"])
            test = entry["results"].get("test", {})
            if cutoff is None or "long_sentence_examples" not in test:
                continue
            longer = int(test["long_sentence_examples"]["mean"])
            text = (
                str(cutoff),
                f"{int(test['examples']['mean']) - longer:,}",
                _stats(test.get("seq_acc_short_sentences")),
                _stats(test.get("seq_acc_given_length_short_sentences")),
                f"{longer:,}",
                _stats(test.get("seq_acc_long_sentence")),
                _stats(test.get("seq_acc_given_length_long_sentence")),
            )
            rows[cell_label(part, entry["params"])] = dict(zip(SENTENCE_COLUMNS, text))
    if not rows:
        return NO_RUNS
    return format_table(rows, list(SENTENCE_COLUMNS), markdown=True)


def _length_cutoff(part: str, params: Mapping[str, Any]) -> int | None:
    """The most actions a training output of a length-split cell has (``None``: not a length split)."""
    if part in ("scan_cutoffs", "scan_recurrent_shift_cutoffs"):
        return int(params[CUTOFF])
    if part in ("scan_length", "scan_stop") or part in RECURRENT_PARTS and params[SPLIT] == "length":
        return scan.LENGTH_SPLIT_MAX_TRAIN_ACTIONS
    return None


def _stats(stats: Mapping[str, float] | None) -> str:
    return "" if stats is None else stats_text(stats, count=True)


def cell_label(part: str, params: Mapping[str, Any]) -> str:
    """A row label for a sweep cell: its part and grid values in the grid's order, e.g.
    ``scan_stop · relative, dot`` for the run directory ``scan_stop/model.transformer.positional=
    relative,model.transformer.cross_attention=dot``."""
    return f"{part} · " + ", ".join(
        "+".join(map(str, value)) if isinstance(value, list) else str(value) for value in params.values()
    )


def _scheme_heads(params: Mapping[str, Any]) -> str:
    return f"{params[POSITIONAL]} · {params[HEADS]}"


def reference_table() -> str:
    rows = {
        f"{task}: {model}": {"number": number, "source": source}
        for task, model, number, source in REFERENCE_POINTS
    }
    return format_table(rows, ["number", "source"], markdown=True)


BUDGET_RUNS = "csordas2021"
"""The folder of the recipe's output (``OUT/csordas2021/<name>/seed<k>``) that holds runs trained in
budget stages by ``scripts/epoch_budget.sh``, each stage's evaluation in ``eval_at/epoch<N>/``: Csordás
et al. 2021's protocol (``scan_transformer_csordas2021``, the last weights evaluated) and its
variants, trained outside the sweeps (docs/results.md, issue 28, sessions 37–57)."""


TRAINED_STAGE = "trained"
"""The folder of a budget stage (``eval_at/epoch<N>/``) where ``scripts/epoch_budget.sh`` keeps the
evaluation of a weight-averaging run's trained weights (``checkpoints/trained.pt``)."""


def budget_table(out_dir: Path) -> str:
    """Rows: the runs under ``out_dir/``:data:`BUDGET_RUNS` (``<name> · seed<k>``); columns: the
    epochs each has trained so far, then every budget ``N`` any of them was evaluated at; a cell
    is the test exact match after ``N`` epochs with the output length given in brackets, from
    ``eval_at/epoch<N>/test.json``. A run that averages its weights (``training.ema_decay``) has
    two rows: ``· average`` (those records, the average evaluated) and ``· trained`` (its trained
    weights, ``eval_at/epoch<N>/trained/test.json``, what Csordás et al. evaluate). Below a name's
    seeds, a row ``<name> · mean ± std`` (``· average`` / ``· trained`` each their own) gives, at
    every budget that two or more of its seeds reached, the mean ± sample std of both numbers and
    the seed count; a seed trained twice (``seed1`` and ``seed1_rerun``) counts once at a budget,
    by the run whose folder name sorts last among those evaluated there. A record that is not
    such JSON is a :class:`ConfigError` naming the file."""
    runs = sorted(path for path in (out_dir / BUDGET_RUNS).glob("*/seed*") if (path / "eval_at").is_dir())
    stages = {
        int(stage.name.removeprefix("epoch"))
        for run in runs
        for stage in (run / "eval_at").glob("epoch*")
        if stage.name.removeprefix("epoch").isdigit() and (stage / "test.json").is_file()
    }
    if not stages:
        return NO_RUNS
    budgets = sorted(stages)
    columns = ["epochs trained", *(f"{budget} epochs" for budget in budgets)]
    rows: dict[str, dict[str, str]] = {}
    for name, named_runs in itertools.groupby(runs, key=lambda run: run.parent.name):
        # (suffix, budget) -> seed -> the numbers of the run of that seed whose name sorts last
        by_seed: dict[tuple[str, int], dict[int, tuple[float, float]]] = {}
        for run in named_runs:
            epochs = str(RunDirectory(run).trained_epochs())
            averaged = any((run / "eval_at").glob(f"epoch*/{TRAINED_STAGE}/test.json"))
            weights = ((" · average", "."), (" · trained", TRAINED_STAGE)) if averaged else (("", "."),)
            for suffix, folder in weights:
                row = {"epochs trained": epochs}
                for budget in budgets:
                    record = run / "eval_at" / f"epoch{budget}" / folder / "test.json"
                    if record.is_file():
                        numbers = _stage_numbers(record)
                        row[f"{budget} epochs"] = f"{numbers[0]:.1f} ({numbers[1]:.1f})"
                        if (seed := _run_seed(run)) is not None:
                            by_seed.setdefault((suffix, budget), {})[seed] = numbers
                rows[f"{name} · {run.name}{suffix}"] = row
        for suffix in dict.fromkeys(suffix for suffix, _ in by_seed):
            row = {}
            for budget in budgets:
                seeds = by_seed.get((suffix, budget), {})
                if len(seeds) >= 2:
                    exact, given = zip(*seeds.values(), strict=True)
                    row[f"{budget} epochs"] = (
                        f"{stats_text(summarize(exact))} ({stats_text(summarize(given))}), {len(seeds)} seeds"
                    )
            if row:
                rows[f"{name} · mean ± std{suffix}"] = row
    return format_table(rows, columns, markdown=True)


def _run_seed(run: Path) -> int | None:
    """The training seed a budget run's folder names: ``seed1`` and ``seed1_rerun`` → 1."""
    digits = run.name.removeprefix("seed").split("_")[0]
    return int(digits) if digits.isdigit() else None


def _stage_numbers(record: Path) -> tuple[float, float]:
    """The exact match and the exact match with the length given of a stage's ``test.json``."""
    try:
        metrics = json.loads(record.read_text())
        return float(metrics["seq_acc"]), float(metrics["seq_acc_given_length"])
    except (ValueError, KeyError, TypeError):
        raise ConfigError(
            f"{record}: expected an evaluation record (JSON with numbers 'seq_acc' and "
            "'seq_acc_given_length')"
        ) from None


def report(out_dir: Path, *, failure_plots: bool = False) -> str:
    """The recipe's tables from the finished runs under ``out_dir``, also written to
    ``out_dir/results.md``; with ``failure_plots`` also :func:`failure_table`. An error if no part
    has a finished run."""
    found = collect(out_dir)
    if not found:
        raise ConfigError(
            f"{out_dir}: no finished run of any part ({', '.join(PARTS)}); "
            f"train with 'attnlab reproduce {PAPER} --out {out_dir}'"
        )
    sections = [
        "### Lookup Tables: seqAcc (%) at long 5, the model stopping by itself",
        lookup_table(found, "long5"),
        "### Lookup Tables: seqAcc (%) at long 1",
        lookup_table(found, "long1"),
        "### Lookup Tables on the paper's data protocol (machine-tasks): seqAcc (%) by test set, "
        "the model of the last Lookup column stopping by itself",
        machine_tasks_table(found),
        "### SCAN: test exact match (%), the model stopping by itself",
        scan_table(found),
        "### SCAN: test exact match (%) with the output length given (what is wrong besides the stop)",
        scan_table(found, "seq_acc_given_length"),
        "### SCAN: the recurrent Shift Attender (GRU or LSTM decoder + attention, `<eos>` from the "
        "attention on the end marker), test exact match (%)",
        recurrent_scan_table(found),
        "### SCAN length split cut at N actions: exact match (%) on all longer commands",
        cutoff_table(found),
        "### SCAN length splits: exact match (%) of the commands that only join training-length "
        "sentences and of those with a sentence longer than any training output",
        sentence_table(found),
        "### Reference points (attnlab's recurrent models; published numbers marked theirs)",
        reference_table(),
        "### Csordás et al. 2021's protocol (`scan_transformer_csordas2021`, the last weights; with "
        "`training.ema_decay` their average and the trained weights, a row each), trained in budget "
        "stages: test exact match (%) after N epochs (with the length given)",
        budget_table(out_dir),
        "### How the wrong outputs are wrong (headline test set, summed over each cell's seeds)",
        error_table(out_dir, found),
        "### How training ended: the finished runs of each part by the rule that stopped them, and "
        "those the epoch cap ended before they converged by their own rule",
        training_end_table(found),
    ]
    if failure_plots:
        sections += [
            "### Where each cell goes wrong: the attention of the first wrong example (first seed with one)",
            failure_table(out_dir, found),
        ]
    text = "\n\n".join(sections) + "\n"
    atomic_write_text(out_dir / "results.md", text)
    return text.rstrip()


def training_end_table(found: Mapping[str, Mapping[str, Any]]) -> str:
    """Rows: the parts with finished runs; columns :data:`~attnlab.experiments.sweep.TRAINING_END_COLUMNS`
    (:func:`~attnlab.experiments.sweep.training_end_counts`); below it, the runs the cap ended before
    they converged, by name, up to :data:`NAMED_UNCONVERGED` a part (all of them in the part's
    ``aggregate.md``)."""
    if not found:
        return NO_RUNS
    rows = {
        part: {column: str(count) for column, count in sweep.training_end_counts(cells).items()}
        for part, cells in found.items()
    }
    named = []
    for part, cells in found.items():
        runs = sweep.unconverged_runs(cells)
        if len(runs) > NAMED_UNCONVERGED:
            named.append(f"- {part}: {len(runs)} runs (each named in {part}/aggregate.md)")
        else:
            named += [f"- {part}: {run}" for run in runs]
    table = format_table(rows, list(sweep.TRAINING_END_COLUMNS), markdown=True)
    return table + ("\n\nEnded by the cap before converging:\n" + "\n".join(named) if named else "")


NAMED_UNCONVERGED = 5
"""How many of a part's runs ended by the cap before converging :func:`training_end_table` names."""


def error_table(out_dir: Path, found: Mapping[str, Mapping[str, Any]]) -> str:
    """One row per finished cell: how many outputs of its headline test set
    (:data:`HEADLINE_TEST_SETS`) are wrong, summed over its finished seeds, and how
    (:func:`~attnlab.evaluation.metrics.error_kind`: a stop too early or too late with every word
    right, or wrong words; :func:`~attnlab.evaluation.metrics.word_error_kind`: of the wrong words,
    those all of one target word), read from each run's ``eval/<set>.errors.json`` (what the archive
    keeps) or its predictions file (:func:`~attnlab.experiments.unit_scores.read_test_set_errors`).
    Runs archived before evaluation wrote errors files have neither; the ``seeds`` column then says
    how many of the cell's finished seeds were counted ("1 of 3"). The one-word columns read "–"
    where a counted seed's errors file predates them and its predictions file is gone."""
    rows = {}
    for part, cells in found.items():
        test_set = HEADLINE_TEST_SETS[part]
        for cell, entry in cells.items():
            totals, counted, words_counted = dict.fromkeys((*ERROR_COUNTS, *WORD_ERROR_KINDS), 0), 0, True
            for seed in entry["seeds"]:
                run = RunDirectory(out_dir / part / cell / f"seed{seed}")
                counts = read_test_set_errors(run.eval_dir, test_set)
                if counts is not None:
                    counted += 1
                    words_counted &= counts_words(counts)
                    for name, count in counts.items():
                        totals[name] += count
            if counted:
                finished = len(entry["seeds"])
                seeds = str(counted) if counted == finished else f"{counted} of {finished}"
                row = {"test set": test_set, "seeds": seeds}
                row["wrong"] = f"{totals['wrong']:,} / {totals['examples']:,}"
                row |= {kind: f"{totals[kind]:,}" for kind in ERROR_KINDS}
                row |= {kind: f"{totals[kind]:,}" if words_counted else "–" for kind in WORD_ERROR_KINDS}
                rows[cell_label(part, entry["params"])] = row
    if not rows:
        return "(no errors or predictions files)"
    return format_table(rows, ["test set", "seeds", "wrong", *ERROR_KINDS, *WORD_ERROR_KINDS], markdown=True)


def failure_table(out_dir: Path, found: Mapping[str, Mapping[str, Any]]) -> str:
    """One row per finished cell: the first wrong example on the part's headline test set
    (:data:`HEADLINE_TEST_SETS`) of its first seed that has one (else its first seed, "none
    wrong"), and links (relative to ``out_dir``) to that example's attention plots, written into the
    run's ``plots/`` by its experiment's ``plot_run``."""
    rows = {}
    for part, cells in found.items():
        test_set = HEADLINE_TEST_SETS[part]
        for cell, entry in cells.items():
            seed = next(
                (
                    seed
                    for seed in entry["seeds"]
                    if _has_wrong_example(out_dir / part / cell / f"seed{seed}", test_set)
                ),
                entry["seeds"][0],
            )
            run_dir = out_dir / part / cell / f"seed{seed}"
            rows[f"{cell_label(part, entry['params'])} · seed {seed}"] = _failure_plots(
                out_dir, run_dir, test_set
            )
    return format_table(rows, ["test set", "example", "attention"], markdown=True)


def _predictions_file(run_dir: Path, test_set: str) -> Path:
    return RunDirectory(run_dir).eval_dir / f"{test_set}{PREDICTIONS_SUFFIX}"


def _has_wrong_example(run_dir: Path, test_set: str) -> bool:
    predictions = _predictions_file(run_dir, test_set)
    return predictions.is_file() and first_wrong_example(predictions) is not None


def first_wrong_example(predictions: Path) -> int | None:
    """The index of the first example of a predictions file whose ``seq_acc`` is 0, or ``None``."""
    right = read_prediction_units(predictions, metric="seq_acc").scores.values[:, 0]
    wrong = np.flatnonzero(right == 0)
    return int(wrong[0]) if wrong.size else None


def _failure_plots(out_dir: Path, run_dir: Path, test_set: str) -> dict[str, str]:
    run = RunDirectory(run_dir)
    predictions = _predictions_file(run_dir, test_set)
    row = {"test set": test_set}
    if not predictions.is_file():
        return {**row, "attention": f"no {predictions.name}"}
    index = first_wrong_example(predictions)
    if index is None:
        return {**row, "example": "none wrong"}
    data = run.load_config_data()
    experiment = experiment_for(data)
    checkpoint = run.checkpoint(experiment.evaluation_checkpoint(experiment.parse_config(data)))
    if not checkpoint.is_file():
        return {**row, "example": f"#{index}", "attention": f"no {checkpoint.name} to plot"}
    request = PlotRequest(test_set=test_set, indices=(index,), device_name="cpu")
    # the example's own plots (named <test set>_<index>…), not the run's training curves
    plots = [path for path in experiment.plot_run(run_dir, request) if f"{test_set}_{index}" in path.stem]
    links = ", ".join(f"[{path.stem}]({path.relative_to(out_dir).as_posix()})" for path in plots)
    return {**row, "example": f"#{index}", "attention": links}


# ------------------------------------------------------------------------------------- CLI


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_out_argument(parser, PAPER)
    add_parallel_arguments(parser, "runs")
    parser.add_argument("--report-only", action="store_true", help="rebuild the tables from finished runs")
    parser.add_argument(
        "--status",
        action="store_true",
        help="each part's runs by state (attnlab sweep --status) and the time left; trains nothing",
    )
    parser.add_argument(
        "--failure-plots",
        action="store_true",
        help="also plot the attention of each cell's first wrong test example (first seed with one)",
    )
    parser.add_argument(
        "--parts",
        nargs="+",
        default=list(PARTS),
        choices=list(PARTS),
        help="which sweeps to train (default: all; the report covers every part found)",
    )


def main(args: argparse.Namespace) -> str:
    """The recipe's command: train what is missing (unless ``--report-only``); return the report."""
    out = Path(args.out)
    if args.status:
        return status(out, args.parts)
    if args.report_only:
        return report(out, failure_plots=args.failure_plots)
    return reproduce(
        out,
        args.parts,
        jobs=args.jobs,
        backend=args.backend,
        address=args.address,
        failure_plots=args.failure_plots,
    )
