"""Statistics over a configuration's seeds, as rliable defines them ("Deep
Reinforcement Learning at the Edge of the Statistical Precipice", NeurIPS 2021).

One configuration trains on one task, so rliable's stratified bootstrap (runs resampled
with replacement within each task) resamples the seeds; its intervals are percentile
intervals of the statistic over the resamples.
"""

from __future__ import annotations

import numpy as np

REPS = 50_000  # rliable's default number of bootstrap resamples
LEVEL = 0.95


def iqm(scores) -> float:
    """Interquartile mean: the mean of the middle 50% of the sorted scores, after cutting
    floor(n / 4) from each end (scipy's `trim_mean(scores, 0.25)`, which rliable uses)."""
    return float(_iqm_rows(np.asarray(scores, np.float64)[None])[0])


def _iqm_rows(samples: np.ndarray) -> np.ndarray:
    """IQM of each row of `samples` [R, n]."""
    n = samples.shape[1]
    cut = int(0.25 * n)
    return np.sort(samples, axis=1)[:, cut:n - cut].mean(axis=1)


def bootstrap_ci(scores, statistic: str = "iqm", reps: int = REPS, level: float = LEVEL,
                 seed: int = 0) -> tuple[float, float]:
    """The `level` percentile interval of `statistic` ("iqm" or "mean") over `reps` resamples
    of the scores with replacement; a fixed seed makes it repeatable."""
    scores = np.asarray(scores, np.float64)
    rng = np.random.default_rng(seed)
    samples = scores[rng.integers(0, len(scores), size=(reps, len(scores)))]
    values = _iqm_rows(samples) if statistic == "iqm" else samples.mean(axis=1)
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(values, [tail, 100 - tail])
    return float(low), float(high)


def describe(scores, reps: int = REPS) -> dict:
    """mean, std (sample std, ddof 1; 0 for one seed), IQM and its bootstrap interval, min, max
    of the finite scores; `n` counts them (None everywhere when there are none)."""
    scores = np.asarray([s for s in scores if s is not None and np.isfinite(s)], np.float64)
    if scores.size == 0:
        return {"n": 0, "mean": None, "std": None, "iqm": None, "iqm_ci": None, "min": None, "max": None}
    low, high = bootstrap_ci(scores, "iqm", reps)
    return {"n": int(scores.size), "mean": float(scores.mean()),
            "std": float(scores.std(ddof=1)) if scores.size > 1 else 0.0,
            "iqm": iqm(scores), "iqm_ci": [low, high], "min": float(scores.min()), "max": float(scores.max())}
