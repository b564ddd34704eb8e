"""The compiled epoch's metric records: loss sums and counts, non-finite flags."""

from __future__ import annotations

import jax.numpy as jnp

NONFINITE = "nonfinite/"  # metric prefix: first iteration of the epoch a quantity was NaN or Inf
COUNT = "count/"  # per-iteration metric prefix: gradient steps that computed a loss
WEIGHT = "weight/"  # agent metric prefix: 1 where the update computed that loss, 0 where it skipped it


def loss_sums(losses: dict) -> dict:
    """An update's losses [steps] -> their sums and counts over the steps that computed them
    (an agent marks a skipped loss with a `weight/<name>` of 0; default: every step)."""
    out = {}
    for name, value in losses.items():
        if name.startswith(WEIGHT):
            continue
        weight = losses.get(WEIGHT + name, jnp.ones_like(value))
        out[f"loss/{name}"] = jnp.sum(jnp.where(weight > 0, value, 0.0))
        out[f"{COUNT}loss/{name}"] = jnp.sum(weight)
    return out
