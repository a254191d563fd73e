"""The statistics every reproduction uses, pure: the 95 % confidence interval of a mean (Student t) and Welch's
test of two samples. One definition for the sweep analysis, the paper figures and the virtual-time checks."""
from __future__ import annotations

import math
import statistics
from typing import Any

from scipy.stats import t as _t


def t975(df: int) -> float:
    """The two-sided 95 % Student t quantile (the 0.975 quantile) for `df` >= 1 degrees of freedom, exact
    (scipy.stats.t), for every df: 2.042 at 30, 1.984 at 100, tending to the normal's 1.960."""
    if df < 1:
        raise ValueError(f"t975: degrees of freedom must be >= 1, not {df}")
    return float(_t.ppf(0.975, df))


def mean_ci(xs: list[float]) -> tuple[float | None, float | None]:
    """Mean and the half-width of its 95 % confidence interval (Student t); (None, None) for no values, half-width
    None for a single value."""
    xs = [x for x in xs if x is not None and math.isfinite(x)]
    if not xs:
        return None, None
    m = statistics.fmean(xs)
    if len(xs) < 2:
        return m, None
    return m, t975(len(xs) - 1) * statistics.stdev(xs) / math.sqrt(len(xs))


def welch(a: list[float], b: list[float]) -> dict[str, Any]:
    """Welch's unequal-variance t-test of two samples (scipy.stats.ttest_ind, equal_var=False): the difference of
    the means (a - b), t, the Welch-Satterthwaite df and the two-sided p; t, df and p None with fewer than 2 values
    on a side or both variances zero."""
    out: dict[str, Any] = {"n_a": len(a), "n_b": len(b),
                           "diff": statistics.fmean(a) - statistics.fmean(b) if a and b else None,
                           "t": None, "df": None, "p": None}
    if len(a) < 2 or len(b) < 2:
        return out
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    if va + vb == 0:
        return out
    from scipy.stats import ttest_ind
    res = ttest_ind(a, b, equal_var=False)
    out["t"], out["p"] = float(res.statistic), float(res.pvalue)
    out["df"] = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    return out
