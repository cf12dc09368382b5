"""The Lookup Tables experiment's data: its ``data:`` config, the splits it reads and their encoding.

:class:`LookupDataConfig` chooses a generator — attnlab's own protocol (:mod:`attnlab.tasks.lookup`,
Long / Reversed / Noisy-start Lookup Tables with interpolation and ``long1`` … ``long5`` test
sets, the default) or the machine-tasks ``LongLookupTables`` protocol the paper's data were made
with (:mod:`attnlab.tasks.lookup_machine_tasks`, ``protocol: machine_tasks``) — or files in the
public machine-tasks TSV format (:mod:`attnlab.tasks.tsv`). :func:`load_splits` gives ``train``,
``validation`` and the test sets (:func:`test_set_names`); :func:`encode_split` encodes one with the
training set's vocabularies, naming its file (or the generated split) in errors.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from attnlab.config import ConfigError, to_dict
from attnlab.tasks.batching import EncodedDataset, encode_examples
from attnlab.tasks.examples import Seq2SeqExample
from attnlab.tasks.lookup import VARIANTS, LookupTablesSpec, generate_lookup_tables
from attnlab.tasks.lookup_machine_tasks import (
    MACHINE_TASKS_VARIANTS,
    MachineTasksLookupSpec,
    generate_machine_tasks_lookup,
    machine_tasks_test_set_names,
)
from attnlab.tasks.splits import random_hold_out
from attnlab.tasks.tsv import read_tsv
from attnlab.tasks.vocab import Vocabulary

LookupVariant = Literal["long", "reversed", "noisy", "noisy-single", "noisy-multi", "intermediate-noise"]
"""``long``, ``reversed``, ``noisy``: protocol ``attnlab``; all but ``noisy``: ``machine_tasks``."""
GENERATED_TEST_SETS = ("interpolation", "long1", "long2", "long3", "long4", "long5")


_PUBLISHED = MachineTasksLookupSpec()
"""The published generation arguments: the one place their values are written is the spec."""


@dataclass
class MachineTasksDataConfig:
    """The generation arguments of ``data.protocol=machine_tasks``; defaults are the published ones
    (see :class:`attnlab.tasks.lookup_machine_tasks.MachineTasksLookupSpec`; ``data.seed`` and
    ``data.variant`` give its seed and variant)."""

    validation_size: float = _PUBLISHED.validation_size
    max_composition_train: int = _PUBLISHED.max_composition_train
    n_unary_tables: int = _PUBLISHED.n_unary_tables
    n_heldout_tables: int = _PUBLISHED.n_heldout_tables
    n_heldout_compositions: int = _PUBLISHED.n_heldout_compositions
    n_heldout_inputs: int = _PUBLISHED.n_heldout_inputs
    n_longer: int = _PUBLISHED.n_longer
    max_noise_tables: int = _PUBLISHED.max_noise_tables
    bound_test: int = _PUBLISHED.bound_test
    alphabet: list[str] = field(default_factory=lambda: list(_PUBLISHED.alphabet))
    n_repeats: int = _PUBLISHED.n_repeats


@dataclass
class LookupDataConfig:
    """Where the examples come from: a generator (default) or machine-tasks TSV files.

    ``protocol`` picks the generator: ``attnlab`` (variants long, reversed, noisy; the sizes
    below) or ``machine_tasks`` (variants long, reversed, noisy-single, noisy-multi,
    intermediate-noise; the arguments in ``machine_tasks``). With ``train_file`` set, no generator
    is used: ``validation_file`` (or, if absent, ``validation_size`` examples held out of the
    training file) validates, and ``test_files`` maps test-set names to files.
    """

    variant: LookupVariant = "long"
    seed: int = 0
    protocol: Literal["attnlab", "machine_tasks"] = "attnlab"
    validation_size: int = 500
    interpolation_size: int = 3000
    long_size: int = 5000
    long_levels: int = 5
    max_noise_tables: int = 10
    train_file: str | None = None
    validation_file: str | None = None
    test_files: dict[str, str] = field(default_factory=dict)
    machine_tasks: MachineTasksDataConfig = field(default_factory=MachineTasksDataConfig)

    def __post_init__(self) -> None:
        variants = VARIANTS if self.protocol == "attnlab" else MACHINE_TASKS_VARIANTS
        if self.train_file is None and self.variant not in variants:
            raise ValueError(
                f"data.variant={self.variant!r} is not a variant of data.protocol={self.protocol}; "
                f"choose one of {list(variants)}"
            )


def load_splits(data: LookupDataConfig) -> dict[str, list[Seq2SeqExample]]:
    """Train, validation and test splits, generated or read from files."""
    if data.train_file is None:
        return _generated_splits(data)
    splits = {"train": read_tsv(data.train_file)}
    if data.validation_file is not None:
        splits["validation"] = read_tsv(data.validation_file)
    else:
        splits["train"], splits["validation"] = _hold_out(splits["train"], data.validation_size, data.seed)
    for name, path in data.test_files.items():
        splits[name] = read_tsv(path)
    return splits


def test_set_names(data: LookupDataConfig) -> list[str]:
    if data.train_file is None and data.protocol == "machine_tasks":
        return machine_tasks_test_set_names(data.machine_tasks.n_longer)
    if data.train_file is None:
        return ["interpolation", *(f"long{level}" for level in range(1, data.long_levels + 1))]
    return list(data.test_files)


def _generated_splits(data: LookupDataConfig) -> dict[str, list[Seq2SeqExample]]:
    if data.protocol == "machine_tasks":
        return generate_machine_tasks_lookup(machine_tasks_spec(data))
    try:
        spec = LookupTablesSpec(
            variant=data.variant,
            seed=data.seed,
            interpolation_size=data.interpolation_size,
            validation_size=data.validation_size,
            long_levels=data.long_levels,
            long_size=data.long_size,
            max_noise_tables=data.max_noise_tables,
        )
    except ValueError as error:
        raise ConfigError(f"data: {error}") from None
    return generate_lookup_tables(spec)


def machine_tasks_spec(data: LookupDataConfig) -> MachineTasksLookupSpec:
    """The machine-tasks generator spec of ``data``; bad arguments raise :class:`ConfigError`."""
    arguments = {**to_dict(data.machine_tasks), "alphabet": tuple(data.machine_tasks.alphabet)}
    try:
        return MachineTasksLookupSpec(variant=data.variant, seed=data.seed, **arguments)
    except ValueError as error:
        raise ConfigError(f"data.machine_tasks: {error}") from None


def _hold_out(
    examples: list[Seq2SeqExample], size: int, seed: int
) -> tuple[list[Seq2SeqExample], list[Seq2SeqExample]]:
    if not 0 < size < len(examples):
        raise ConfigError(
            f"data.validation_size={size} cannot be held out of {len(examples)} training examples; "
            "give data.validation_file or a smaller data.validation_size"
        )
    return random_hold_out(examples, size, seed)


def _split_origin(data: LookupDataConfig, split: str) -> tuple[str, str]:
    """Where a split's examples come from, and what to call one of them in error messages."""
    files = {"train": data.train_file, "validation": data.validation_file, **data.test_files}
    if files.get(split):
        return str(files[split]), "line"
    if data.train_file is not None and split == "validation":
        return f"{data.train_file} (held-out validation)", "example"
    return f"generated {split} split", "example"


def encode_split(
    data: LookupDataConfig, split: str, examples: list[Seq2SeqExample], source: Vocabulary, target: Vocabulary
) -> EncodedDataset:
    """Encode the examples of ``split``; an empty split or an unknown word is an error naming its
    file and line (or the generated split and example)."""
    origin, item_name = _split_origin(data, split)
    if not examples:
        raise ConfigError(f"the {split} split ({origin}) has no examples")
    return encode_examples(examples, source, target, where_prefix=origin, item_name=item_name)
