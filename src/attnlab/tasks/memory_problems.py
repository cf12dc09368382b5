"""The addition and multiplication long-term memory problems (Raffel & Ellis 2015, §2).

Raffel & Ellis follow the original definitions of Hochreiter & Schmidhuber (1997). Each sequence is
``T`` steps of a 2-channel input ``x_t = (value_t, marker_t)``:

* values: i.i.d. ``U(-1, 1)`` for *addition*, ``U(0, 1)`` for *multiplication*;
* markers: ``1`` at exactly two positions ``p1 < p2``, ``-1`` at the first and last step, ``0``
  elsewhere;
* target: ``0.5 + (x_{p1} + x_{p2}) / 4`` for addition (so it lies in ``[0, 1]``), ``x_{p1} · x_{p2}``
  for multiplication;
* a prediction is correct when ``|prediction - target| < 0.04`` (:data:`TOLERANCE`).

Raffel & Ellis's own text (§2) describes the addition problem differently: values "sampled
uniformly from [0, 1]" and the goal "to perform addition … on the two values", i.e. the target
``x_{p1} + x_{p2}`` in ``[0, 2]``, with the same tolerance. Both are available
(``addition="hochreiter_schmidhuber"``, the default, or ``addition="paper_text"``; see
:data:`ADDITION_DEFINITIONS`), since the paper says it follows [3] but states the other.

Choices where the papers are silent (0-based indices throughout):

* first marker ``p1``: uniform over indices ``0 … 8`` (the paper's "positions 1–9");
* "before the midpoint" means ``p2 < T // 2`` (the first half of the sequence); ``p2`` is uniform
  over ``p1 + 1 … T // 2 - 1`` given ``p1``;
* so every length must be at least :data:`MIN_LENGTH` ``= 20``: then ``T // 2 >= 10`` and a second
  marker fits after any first marker in ``0 … 8``;
* when ``p1 = 0`` the first step carries the marker ``1`` (the marked value wins over the ``-1``
  boundary marker; the value is kept). The last step can never be marked (``p2 < T // 2 <= T - 1``),
  so it always carries ``-1``. Every sequence thus has exactly two ``+1`` markers.
* padded positions (right padding, ``t >= length``) are ``0`` in both channels, and masked; the
  authors' code pools them instead (:func:`pool_the_padding`, ``data.padding=pooled``).

Length settings (:func:`sample_lengths`): ``"fixed"`` draws integers uniformly from
``[T0, floor(1.1 · T0)]`` (§2.2); ``"variable"`` draws them uniformly from ``[50, 10000]`` (§2.3).

The two-symbol temporal order problem (Hochreiter & Schmidhuber 1997, experiment 6a; Raffel &
Ellis §3) is here too, as :func:`generate_temporal_order_batch`: it is the task on which a model
that pools over time without order information must fail.

Generation is fully vectorised over the batch and draws from a ``torch.Generator``, so a batch is
reproducible from the generator's seed (for a given device).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from attnlab.checks import check_int, did_you_mean
from attnlab.tasks.examples import tensors_to

Problem = Literal["addition", "multiplication"]
LengthSetting = Literal["fixed", "variable"]

PROBLEMS: tuple[str, ...] = ("addition", "multiplication")
AdditionDefinition = Literal["hochreiter_schmidhuber", "paper_text"]
ADDITION_DEFINITIONS: tuple[str, ...] = ("hochreiter_schmidhuber", "paper_text")
"""The addition problem as Hochreiter & Schmidhuber (1997) define it (values ``U(-1, 1)``, target
``0.5 + (x1 + x2) / 4``) or as Raffel & Ellis's §2 text states it (values ``U(0, 1)``, target
``x1 + x2``)."""
LENGTH_SETTINGS: tuple[str, ...] = ("fixed", "variable")
Padding = Literal["masked", "pooled"]
PADDINGS: tuple[str, ...] = ("masked", "pooled")
"""How a fixed-length batch treats the steps after each sequence's end: ``"masked"`` (each sequence is
pooled over its own steps, as eqs. 1-2 state) or ``"pooled"`` (every sequence is zero-padded to
``ceil(1.1 T0)`` steps, which are pooled like the others, as in the authors' released code);
see :func:`pool_the_padding`."""

TOLERANCE = 0.04
"""A sequence counts as correct when ``|prediction - target| < TOLERANCE`` (§2)."""

FIRST_MARKER_POSITIONS = 9
"""The first marker is at an index in ``0 … FIRST_MARKER_POSITIONS - 1`` (1-based positions 1–9)."""

MIN_LENGTH = 2 * (FIRST_MARKER_POSITIONS + 1)
"""Shortest length for which a second marker fits after any first marker and before ``T // 2``."""

VARIABLE_LENGTH_RANGE = (50, 10_000)
"""Inclusive length range of the variable-length experiment (§2.3)."""


TEMPORAL_ORDER_SYMBOLS: tuple[str, ...] = ("a", "b", "c", "d", "X", "Y", "B", "E")
"""Input alphabet of the temporal order problem, in one-hot channel order: distractors a–d, the
relevant symbols X and Y, the start symbol B and the end symbol E."""

TEMPORAL_ORDER_CLASSES: tuple[str, ...] = ("XX", "XY", "YX", "YY")
"""Target classes (H&S's Q, R, S, U): which relevant symbols appear, in which order."""

TEMPORAL_ORDER_MIN_LENGTH = 10
"""Shortest temporal-order sequence: then ``T // 10 >= 1`` and the first relevant symbol follows B."""


@dataclass
class MemoryBatch:
    """A batch of the addition / multiplication problem.

    ``inputs``: float ``[B, T_max, 2]`` (channel 0 values, channel 1 markers); ``padding_mask``: bool
    ``[B, T_max]``, ``True`` = padding; ``targets``: float ``[B]``; ``lengths``: long ``[B]``;
    ``marker_positions``: long ``[B, 2]``, the indices ``p1 < p2`` of the two marked steps.
    """

    inputs: torch.Tensor
    padding_mask: torch.Tensor
    targets: torch.Tensor
    lengths: torch.Tensor
    marker_positions: torch.Tensor

    def to(self, device: torch.device | str) -> MemoryBatch:
        """The same batch with every tensor on ``device``."""
        return tensors_to(self, device)


def is_correct(predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Bool ``[B]``: ``|prediction - target| < 0.04`` (Raffel & Ellis §2); ``predictions`` and
    ``targets`` are both ``[B]`` (a model's ``[B, 1]`` output would broadcast to ``[B, B]``)."""
    if predictions.shape != targets.shape or predictions.dim() != 1:
        raise ValueError(
            f"predictions and targets must both be [batch], got {tuple(predictions.shape)} and "
            f"{tuple(targets.shape)}"
        )
    return (predictions - targets).abs() < TOLERANCE


def _check_generator_and_dtype(generator: object, dtype: torch.dtype) -> None:
    """The batch is drawn from a ``torch.Generator`` (a seed would not say which device draws) as
    floating-point values (uniform numbers in integers are not defined)."""
    if not isinstance(generator, torch.Generator):
        raise ValueError(
            f"generator must be a torch.Generator (e.g. torch.Generator().manual_seed(0)), got {generator!r}"
        )
    if not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating-point dtype, got {dtype}")


_MARKER_RULE = (
    f"the first marker is at index 0..{FIRST_MARKER_POSITIONS - 1} and the second must come after it "
    "and before the midpoint (index < T // 2)"
)


def _batch_lengths(
    lengths: torch.Tensor | int, batch_size: int, device: torch.device, minimum: int, rule: str
) -> torch.Tensor:
    """``lengths`` (one int or a ``[batch_size]`` integer tensor) as a long tensor, each >= ``minimum``."""
    if isinstance(lengths, bool):
        raise ValueError(f"lengths must be an int or an integer tensor, got {lengths!r}")
    if isinstance(lengths, int):
        lengths = torch.full((batch_size,), lengths, dtype=torch.long, device=device)
    elif isinstance(lengths, torch.Tensor):
        if lengths.shape != (batch_size,) or lengths.dtype.is_floating_point or lengths.dtype == torch.bool:
            raise ValueError(
                f"lengths must be an integer tensor of shape ({batch_size},), "
                f"got {lengths.dtype} {tuple(lengths.shape)}"
            )
        lengths = lengths.to(device=device, dtype=torch.long)
    else:
        raise ValueError(f"lengths must be an int or an integer tensor, got {type(lengths).__name__}")
    too_short = lengths < minimum
    if bool(too_short.any()):
        rows = too_short.nonzero().flatten().tolist()
        raise ValueError(
            f"sequence length(s) {lengths[too_short].tolist()} (batch rows {rows}) too short: "
            f"{rule}, which needs a length of at least {minimum}"
        )
    return lengths


def _uniform_integers(
    low: torch.Tensor, high: torch.Tensor, generator: torch.Generator, device: torch.device
) -> torch.Tensor:
    """Integers uniform in ``[low, high]`` (inclusive, per row), from one draw of ``generator``."""
    u = torch.rand(low.shape, generator=generator, device=device, dtype=torch.float64)
    choices = high - low + 1
    return low + torch.minimum((u * choices).long(), choices - 1)


def sample_lengths(
    setting: LengthSetting,
    batch_size: int,
    generator: torch.Generator,
    t0: int | None = None,
) -> torch.Tensor:
    """Draw ``batch_size`` sequence lengths (long, on the generator's device).

    ``"fixed"``: uniform integers in ``[t0, floor(1.1 · t0)]`` (Raffel & Ellis §2.2; ``t0`` required).
    ``"variable"``: uniform integers in ``[50, 10000]`` (§2.3; ``t0`` must be ``None``).
    """
    check_int("batch_size", batch_size)
    if setting == "fixed":
        if t0 is None:
            raise ValueError(
                "sample_lengths: the 'fixed' setting needs t0 (lengths are uniform in [T0, 1.1 T0])"
            )
        check_int("T0 (t0)", t0)
        low, high = t0, t0 + t0 // 10  # floor(1.1 t0), exactly, in integers
    elif setting == "variable":
        if t0 is not None:
            raise ValueError(
                f"sample_lengths: the 'variable' setting draws lengths from {list(VARIABLE_LENGTH_RANGE)}; "
                f"t0 must be None, got {t0!r}"
            )
        low, high = VARIABLE_LENGTH_RANGE
    else:
        raise ValueError(
            f"unknown length setting {setting!r}; expected one of {list(LENGTH_SETTINGS)}"
            f"{did_you_mean(setting, LENGTH_SETTINGS)}"
        )
    return torch.randint(low, high + 1, (batch_size,), generator=generator, device=generator.device)


def generate_memory_batch(
    problem: Problem,
    batch_size: int,
    lengths: torch.Tensor | int,
    generator: torch.Generator,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
    addition: AdditionDefinition = "hochreiter_schmidhuber",
) -> MemoryBatch:
    """Generate one batch of the addition or multiplication problem (see the module docstring;
    ``addition`` picks the definition of the addition problem, :data:`ADDITION_DEFINITIONS`).

    ``lengths`` is one int (all sequences that long) or a ``[batch_size]`` integer tensor; every
    length must be at least :data:`MIN_LENGTH`. Sequences are right-padded to the longest length.
    Random numbers are drawn from ``generator`` on ``device`` (default: the generator's device,
    which must be the device the tensors are created on).
    """
    if problem not in PROBLEMS:
        raise ValueError(
            f"unknown problem {problem!r}; expected one of {list(PROBLEMS)}{did_you_mean(problem, PROBLEMS)}"
        )
    if addition not in ADDITION_DEFINITIONS:
        raise ValueError(
            f"unknown addition definition {addition!r}; expected one of {list(ADDITION_DEFINITIONS)}"
            f"{did_you_mean(addition, ADDITION_DEFINITIONS)}"
        )
    symmetric = problem == "addition" and addition == "hochreiter_schmidhuber"
    check_int("batch_size", batch_size)
    _check_generator_and_dtype(generator, dtype)
    device = generator.device if device is None else torch.device(device)

    lengths = _batch_lengths(lengths, batch_size, device, MIN_LENGTH, _MARKER_RULE)
    t_max = int(lengths.max())
    steps = torch.arange(t_max, device=device)
    padding_mask = steps.unsqueeze(0) >= lengths.unsqueeze(1)  # [B, T_max]

    # Marker positions: p1 uniform in 0..8, p2 uniform in p1+1 .. T//2 - 1 (both inclusive).
    first = torch.randint(0, FIRST_MARKER_POSITIONS, (batch_size,), generator=generator, device=device)
    second = _uniform_integers(first + 1, lengths // 2 - 1, generator, device)
    positions = torch.stack([first, second], dim=1)  # [B, 2]

    values = torch.rand(batch_size, t_max, generator=generator, device=device, dtype=dtype)
    if symmetric:
        values.mul_(2.0).sub_(1.0)  # U(-1, 1)
    values.masked_fill_(padding_mask, 0.0)

    markers = torch.zeros(batch_size, t_max, device=device, dtype=dtype)
    rows = torch.arange(batch_size, device=device)
    markers[rows, 0] = -1.0
    markers[rows, lengths - 1] = -1.0
    markers[rows.unsqueeze(1), positions] = 1.0  # after the -1s: a mark at step 0 wins

    marked = values.gather(1, positions)  # [B, 2]
    if symmetric:
        targets = 0.5 + (marked[:, 0] + marked[:, 1]) / 4.0
    elif problem == "addition":
        targets = marked[:, 0] + marked[:, 1]
    else:
        targets = marked[:, 0] * marked[:, 1]

    inputs = torch.stack([values, markers], dim=-1)  # [B, T_max, 2]
    return MemoryBatch(
        inputs=inputs,
        padding_mask=padding_mask,
        targets=targets,
        lengths=lengths,
        marker_positions=positions,
    )


def padded_length(t0: int) -> int:
    """``ceil(1.1 · T0)``, in integers: the width the authors' code pads every fixed-length batch to."""
    return (11 * t0 + 9) // 10


def pool_the_padding(batch: MemoryBatch, width: int) -> MemoryBatch:
    """The batch zero-padded on the right to ``width`` steps, with no step marked as padding.

    This is what the authors' released code computes (``craffel/lstm_problems`` pads every sequence
    of a ``T0`` batch with ``(0, 0)`` steps to ``ceil(1.1 T0)``; ``craffel/ff-attention`` gives the
    network no mask), so the attention or mean runs over ``width`` steps for every sequence. The
    difference matters: with the padding masked, a marked step's share of the context varies by up
    to 10% with the sequence's length in ``[T0, 1.1 T0]``, which the network must undo; pooled over a
    constant width, it does not vary. ``lengths`` and ``marker_positions`` are kept.
    """
    extra = width - batch.inputs.shape[1]
    if extra < 0:
        raise ValueError(
            f"pool_the_padding: width {width} is shorter than the batch ({batch.inputs.shape[1]} steps)"
        )
    inputs = torch.nn.functional.pad(batch.inputs, (0, 0, 0, extra))
    no_padding = torch.zeros(inputs.shape[:2], dtype=torch.bool, device=inputs.device)
    return MemoryBatch(inputs, no_padding, batch.targets, batch.lengths, batch.marker_positions)


def generate_temporal_order_batch(
    batch_size: int,
    lengths: torch.Tensor | int,
    generator: torch.Generator,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> MemoryBatch:
    """One batch of the two-symbol temporal order problem (Hochreiter & Schmidhuber 1997, exp. 6a).

    A sequence of length ``T`` starts with ``B`` and ends with ``E``; every other step is a random
    distractor ``a``–``d`` except two, at indices ``t1`` uniform in ``[T // 10, T // 5]`` and ``t2``
    uniform in ``[T // 2, 6 T // 10]``, which hold ``X`` or ``Y`` (each with probability 1/2). For
    ``T`` in ``[100, 110]`` these are H&S's ranges (10–20 and 50–60 of a length-100 sequence),
    scaled with the length. The target is the class of the pair in order (:data:`TEMPORAL_ORDER_CLASSES`:
    0 = XX, 1 = XY, 2 = YX, 3 = YY). Inputs are one-hot over :data:`TEMPORAL_ORDER_SYMBOLS`
    (``[B, T_max, 8]``, zeros on padding); ``targets`` are long class indices; ``marker_positions``
    are ``(t1, t2)``.

    Raffel & Ellis (§3): a model that pools over time without order information can tell XX from YY
    but not XY from YX — swapping the two relevant symbols leaves the multiset of inputs unchanged.
    """
    check_int("batch_size", batch_size)
    _check_generator_and_dtype(generator, dtype)
    device = generator.device if device is None else torch.device(device)
    lengths = _batch_lengths(
        lengths,
        batch_size,
        device,
        TEMPORAL_ORDER_MIN_LENGTH,
        "the start symbol B must come before the first relevant symbol at index >= T // 10",
    )
    t_max = int(lengths.max())
    padding_mask = torch.arange(t_max, device=device).unsqueeze(0) >= lengths.unsqueeze(1)
    first = _uniform_integers(lengths // 10, lengths // 5, generator, device)
    second = _uniform_integers(lengths // 2, 6 * lengths // 10, generator, device)
    positions = torch.stack([first, second], dim=1)
    relevant = torch.randint(0, 2, (batch_size, 2), generator=generator, device=device)  # 0 = X, 1 = Y

    symbols = torch.randint(0, 4, (batch_size, t_max), generator=generator, device=device)
    rows = torch.arange(batch_size, device=device)
    symbols[rows.unsqueeze(1), positions] = 4 + relevant
    symbols[rows, 0] = TEMPORAL_ORDER_SYMBOLS.index("B")
    symbols[rows, lengths - 1] = TEMPORAL_ORDER_SYMBOLS.index("E")
    inputs = torch.nn.functional.one_hot(symbols, len(TEMPORAL_ORDER_SYMBOLS)).to(dtype)
    inputs.masked_fill_(padding_mask.unsqueeze(-1), 0.0)
    return MemoryBatch(
        inputs=inputs,
        padding_mask=padding_mask,
        targets=2 * relevant[:, 0] + relevant[:, 1],
        lengths=lengths,
        marker_positions=positions,
    )
