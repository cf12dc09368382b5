"""Paired bootstrap tests: is system B better than system A on the same test set, beyond the noise
of which test examples happened to be drawn?

Both systems are scored on the same units (sentences of a corpus, examples of a test set). A
statistic here is a function of *additive* per-unit statistics: unit ``u`` contributes a row
``s_u`` of ``k`` numbers (:class:`UnitScores`), and the statistic of a test set is ``g(Σ_u s_u)``
(:class:`Statistic`). A *ratio statistic* (:class:`RatioStatistic`) is the special case ``k = 2``,
``g(x, n) = f(x / n)`` with per-unit numerators ``x_u`` and denominators ``n_u``:

* perplexity: ``x_u`` the summed negative log-likelihood of sentence ``u``, ``n_u`` its token
  count, ``f = exp``;
* accuracy: ``x_u`` 1 if example ``u`` is right, ``n_u = 1``, ``f(r) = 100·r``.

Corpus BLEU is another: ``s_u`` holds sentence ``u``'s matching and total n-grams for
n = 1…4, its hypothesis and its reference length, and ``g`` is BLEU of those sums
(:data:`attnlab.evaluation.bleu.BLEU_STATISTIC`).

:func:`paired_bootstrap` draws ``samples`` test sets of the same size from the units with
replacement, the *same* draw for both systems (Koehn 2004, "Statistical Significance Tests for
Machine Translation Evaluation"), and computes the difference ``δ* = stat_B − stat_A`` on each.
The confidence interval is the percentile interval of ``δ*``. The p-value tests "no difference"
against the bootstrap distribution shifted to mean zero (Berg-Kirkpatrick et al. 2012, "An
Empirical Investigation of Statistical Significance in NLP", §2; the test sacrebleu's
``--paired-bs`` uses): ``p = (1 + #{|δ* − mean(δ*)| ≥ |δ|}) / (samples + 1)``.

It measures how much the result depends on the test set, not on the training seed: two runs of
one model with different seeds can differ significantly by this test. Seeds are compared with
mean ± std over runs (``attnlab multiseed``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import numpy as np

from attnlab.checks import check_int

Transform = Callable[[np.ndarray], np.ndarray]


class Statistic(Protocol):
    """A statistic of a test set computed from the sums of its units' additive statistics."""

    @property
    def name(self) -> str: ...

    @property
    def lower_is_better(self) -> bool: ...

    def of_sums(self, sums: np.ndarray) -> np.ndarray:
        """The statistic of each test set, ``sums`` ``[draws, k]`` its units' statistics summed."""
        ...


@dataclass(frozen=True)
class RatioStatistic:
    """``transform(Σ numerator / Σ denominator)`` over units: a :class:`Statistic` of units with
    two statistics each (:meth:`UnitScores.ratio`); see the module docstring."""

    name: str
    transform: Transform
    lower_is_better: bool

    def of_sums(self, sums: np.ndarray) -> np.ndarray:
        if sums.shape[1] != 2:
            raise ValueError(
                f"{self.name} is a ratio statistic: its units need 2 statistics each (numerator, "
                f"denominator; UnitScores.ratio), got {sums.shape[1]}"
            )
        with np.errstate(divide="ignore", invalid="ignore"):  # paired_bootstrap names a non-finite result
            return self.transform(sums[:, 0] / sums[:, 1])


PERPLEXITY = RatioStatistic("perplexity", np.exp, lower_is_better=True)
ACCURACY = RatioStatistic("accuracy", lambda ratio: 100.0 * ratio, lower_is_better=False)


@dataclass(frozen=True)
class UnitScores:
    """One system's additive statistics per unit: ``values[u]`` are unit ``u``'s ``k`` statistics
    (e.g. a sentence's NLL sum and length, or its BLEU n-gram counts)."""

    values: np.ndarray

    def __post_init__(self) -> None:
        if self.values.ndim != 2:
            raise ValueError("the statistics must be a [units, k] array")
        if self.values.shape[0] == 0:
            raise ValueError("no units to compare")
        finite = np.isfinite(self.values).all(axis=1)
        if not finite.all():
            rows = np.flatnonzero(~finite)
            raise ValueError(
                f"the statistics must be finite numbers; units {rows[:10].tolist()} "
                f"({len(rows)} in all) hold NaN or infinity"
            )

    @classmethod
    def ratio(cls, numerator: np.ndarray, denominator: np.ndarray) -> UnitScores:
        """The units of a :class:`RatioStatistic`: per-unit numerators and denominators."""
        if numerator.shape != denominator.shape or numerator.ndim != 1:
            raise ValueError("numerator and denominator must be 1-D arrays of the same length")
        return cls(np.stack([numerator, denominator], axis=1))

    @property
    def units(self) -> int:
        return int(self.values.shape[0])


@dataclass(frozen=True)
class PairedComparison:
    """The observed statistics of A and B, ``difference = B − A``, its confidence interval
    ``[low, high]`` and the two-sided p-value of "no difference"."""

    statistic: str
    a: float
    b: float
    difference: float
    low: float
    high: float
    confidence: float
    p_value: float
    samples: int
    units: int
    b_is_better: bool

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def paired_bootstrap(
    a: UnitScores,
    b: UnitScores,
    statistic: Statistic,
    *,
    samples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    chunk: int = 100,
) -> PairedComparison:
    """Compare B with A on the same units by the paired bootstrap (see the module docstring).

    Units are resampled ``samples`` times (in chunks of ``chunk`` draws, to bound memory); the
    result is reproducible for a given ``seed``.
    """
    if a.values.shape != b.values.shape:
        raise ValueError(
            f"the systems were scored on different units ({a.units} vs {b.units}, "
            f"{a.values.shape[1]} vs {b.values.shape[1]} statistics each)"
        )
    if a.units < 2:
        raise ValueError(
            "the paired bootstrap needs at least 2 units: one unit resampled is always itself, "
            "so every difference would count as significant"
        )
    check_int("samples", samples)
    check_int("chunk", chunk)
    check_int("seed", seed, minimum=None)
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    units = a.units
    observed_a = _resampled(statistic, a, np.ones((1, units)))[0]
    observed_b = _resampled(statistic, b, np.ones((1, units)))[0]
    if not (np.isfinite(observed_a) and np.isfinite(observed_b)):
        raise ValueError(
            f"{statistic.name} of the whole test set is not a finite number (A: {observed_a}, B: "
            f"{observed_b}): a zero denominator? The test compares two finite statistics"
        )
    differences = np.concatenate(
        [
            _resampled(statistic, b, counts) - _resampled(statistic, a, counts)
            for counts in _resampling_counts(units, samples, seed, chunk)
        ]
    )
    if not np.isfinite(differences).all():
        raise ValueError(
            f"{statistic.name} is not a finite number on {int((~np.isfinite(differences)).sum())} of "
            f"{samples} resampled test sets (units whose statistics sum to a zero denominator?)"
        )
    observed = observed_b - observed_a
    tail = (1.0 - confidence) / 2
    low, high = np.quantile(differences, [tail, 1.0 - tail])
    extreme = np.abs(differences - differences.mean()) >= abs(observed)
    return PairedComparison(
        statistic=statistic.name,
        a=float(observed_a),
        b=float(observed_b),
        difference=float(observed),
        low=float(low),
        high=float(high),
        confidence=confidence,
        p_value=float((1 + extreme.sum()) / (samples + 1)),
        samples=samples,
        units=units,
        b_is_better=bool(observed < 0) if statistic.lower_is_better else bool(observed > 0),
    )


def _resampled(statistic: Statistic, scores: UnitScores, counts: np.ndarray) -> np.ndarray:
    """The statistic of each resampled test set; ``counts`` ``[draws, units]`` says how often each
    unit was drawn, so ``counts @ values`` are the draws' summed statistics (one column at a time:
    a matrix-vector product per statistic)."""
    sums = np.stack([counts @ np.ascontiguousarray(column) for column in scores.values.T], axis=1)
    return statistic.of_sums(sums)


def _resampling_counts(units: int, samples: int, seed: int, chunk: int) -> Iterator[np.ndarray]:
    """``[draws, units]`` counts of ``samples`` resampled test sets, ``chunk`` draws at a time."""
    rng = np.random.default_rng(seed)
    uniform = np.full(units, 1.0 / units)
    for start in range(0, samples, chunk):
        yield rng.multinomial(units, uniform, size=min(chunk, samples - start)).astype(np.float64)
