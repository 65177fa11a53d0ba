"""Paired statistics of the study's comparisons: replicate i of one row against replicate i of
another, each replicate having drawn its own world and trained its own networks.

- `t_interval`: mean of the paired differences and its t confidence interval (Student's t with
  n - 1 degrees of freedom), with the two-sided P of the paired t-test;
- `sign_flip_p`: the exact sign-flip (permutation) P of the mean difference, a check that does
  not assume normal differences;
- `holm`: Holm's step-down procedure over a family of P values: each comparison's step and
  the level its interval is read at (1 - alpha / (m - step + 1)), the step where it stopped,
  and the adjusted P values;
- `verdict`: the words of a conclusion, read from an interval only; no verdict below
  `MIN_REPLICATES` replicates.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

MIN_REPLICATES = 5
ALPHA = 0.05
EXACT_SIGN_FLIPS = 16  # up to 2 ** 16 sign patterns enumerated; more are sampled (seed 0)


@dataclass(frozen=True)
class Interval:
    """The mean paired difference, its confidence interval at `level`, and the paired
    t-test's two-sided P (0 when every difference is the same non-zero value)."""
    mean: float
    low: float
    high: float
    level: float
    p: float
    n: int


def t_interval(diffs: Sequence[float], level: float = 1 - ALPHA) -> Interval:
    """The t interval of the mean of `diffs` (at least 2 finite values) at `level`."""
    from scipy.stats import t as student
    d = np.asarray(diffs, dtype=float)
    if d.ndim != 1 or d.size < 2 or not np.isfinite(d).all():
        raise ValueError(f'a paired interval needs at least 2 finite differences, got {diffs!r}')
    if not 0 < level < 1:
        raise ValueError(f'level={level}: expected a confidence level in (0, 1)')
    n, mean = d.size, float(d.mean())
    se = float(d.std(ddof=1)) / math.sqrt(n)
    if se == 0:  # every replicate gives the same difference
        return Interval(mean, mean, mean, level, 1.0 if mean == 0 else 0.0, n)
    half = float(student.ppf(0.5 + level / 2, n - 1)) * se
    p = float(2 * student.sf(abs(mean) / se, n - 1))
    return Interval(mean, mean - half, mean + half, level, p, n)


def sign_flip_p(diffs: Sequence[float]) -> float:
    """Two-sided P of the mean difference under random signs: the share of sign patterns whose
    |mean| is at least the observed one (every pattern up to 2 ** EXACT_SIGN_FLIPS, else that
    many drawn with seed 0, the observed one counted)."""
    d = np.asarray(diffs, dtype=float)
    if d.size == 0 or not np.isfinite(d).all():
        raise ValueError(f'a sign-flip test needs finite differences, got {diffs!r}')
    if d.size <= EXACT_SIGN_FLIPS:
        bits = np.arange(2 ** d.size)[:, None] >> np.arange(d.size) & 1
    else:
        draws = np.random.default_rng(0).integers(0, 2, (2 ** EXACT_SIGN_FLIPS - 1, d.size))
        bits = np.vstack([np.zeros((1, d.size), dtype=int), draws])
    means = np.abs(((1 - 2 * bits) * d).mean(axis=1))
    observed = abs(d.mean())
    return float((means >= observed - 1e-12 * max(1.0, observed)).mean())


@dataclass(frozen=True)
class HolmStep:
    """One comparison's place in Holm's procedure: its step (1 = smallest P), the level its
    interval is read at in that step, the step where the procedure stopped (None: it never
    stopped) and its adjusted P."""
    step: int
    level: float
    stopped_at: int | None
    adjusted_p: float

    @property
    def tested(self) -> bool:
        """Whether the procedure reached this comparison (every earlier step excluded 0)."""
        return self.stopped_at is None or self.step <= self.stopped_at


def holm(pvalues: Sequence[float], alpha: float = ALPHA) -> list[HolmStep]:
    """Holm's step-down procedure, in the order of `pvalues`: sorted by P (ties in the given
    order), step k tests at alpha / (m - k + 1), and the first step that fails stops it; the
    adjusted P of step k is the running maximum of min(1, (m - j + 1) P_j) over j <= k."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: (pvalues[i], i))
    steps: list[HolmStep | None] = [None] * m
    stopped, running = None, 0.0
    for k, i in enumerate(order, start=1):
        running = max(running, min(1.0, (m - k + 1) * pvalues[i]))
        if stopped is None and pvalues[i] > alpha / (m - k + 1):
            stopped = k
        steps[i] = HolmStep(k, 1 - alpha / (m - k + 1), None, running)
    return [HolmStep(s.step, s.level, stopped, s.adjusted_p) for s in steps]


def verdict(diffs: Sequence[float], expect: int, level: float = 1 - ALPHA) -> str:
    """What the interval of `diffs` at `level` says, for a paper that expects their sign to be
    `expect` (+1 / -1; 0: no direction): 'excludes 0 in the paper's direction', 'includes 0'
    or 'excludes 0 against the paper' ('excludes 0' where the paper expects no direction).
    Refuses fewer than MIN_REPLICATES differences."""
    if len(diffs) < MIN_REPLICATES:
        raise ValueError(f'too few replicates for a verdict: {len(diffs)} paired values, '
                         f'{MIN_REPLICATES} needed')
    iv = t_interval(diffs, level)
    if iv.low <= 0 <= iv.high:
        return 'includes 0'
    if expect == 0:
        return 'excludes 0'
    side = 1 if iv.low > 0 else -1
    return "excludes 0 in the paper's direction" if side == expect else \
        'excludes 0 against the paper'


def tost(diffs: Sequence[float], margin: float, alpha: float = ALPHA) -> tuple[float, bool]:
    """Two one-sided t-tests of equivalence within +-`margin` (> 0): (P, equivalent). P is the
    larger of the one-sided P of `mean <= -margin` and of `mean >= margin`; equivalence is
    shown when P < `alpha`, i.e. when the (1 - 2 alpha) interval lies inside (-margin, margin).
    The only way a report may call two rows equal."""
    from scipy.stats import t as student
    if not margin > 0:
        raise ValueError(f'margin={margin!r}: an equivalence margin must be a positive number')
    d = np.asarray(diffs, dtype=float)
    if d.ndim != 1 or d.size < 2 or not np.isfinite(d).all():
        raise ValueError(f'an equivalence test needs at least 2 finite differences, got {diffs!r}')
    mean, se = float(d.mean()), float(d.std(ddof=1)) / math.sqrt(d.size)
    if se == 0:
        p = 0.0 if abs(mean) < margin else 1.0
    else:
        p = max(float(student.sf((mean + margin) / se, d.size - 1)),   # H0: mean <= -margin
                float(student.cdf((mean - margin) / se, d.size - 1)))  # H0: mean >= margin
    return p, p < alpha


def detectable_difference(sd: float, n: int, alpha: float = ALPHA, power: float = 0.8) -> float:
    """The smallest true mean paired difference that a two-sided paired t-test at `alpha` over
    `n` replicates detects with probability `power`, when the differences' standard deviation
    is `sd` (noncentral t; in the units of `sd`)."""
    from scipy.optimize import brentq
    from scipy.stats import nct
    from scipy.stats import t as student
    if n < 2 or not sd > 0:
        raise ValueError(f'n={n}, sd={sd}: a power computation needs n >= 2 and sd > 0')
    df, crit = n - 1, float(student.ppf(1 - alpha / 2, n - 1))

    def shortfall(delta: float) -> float:  # power at a true difference delta, less the goal
        nc = delta * math.sqrt(n) / sd
        return float(nct.sf(crit, df, nc) + np.nan_to_num(nct.cdf(-crit, df, nc))) - power
    return float(brentq(shortfall, 0.0, 12 * sd / math.sqrt(n)))  # power(nc = 12) is ~1
