"""The differentiable agents' (APG, SHAC) per-env defaults: chosen here, on this project's
differentiable tasks (Brax publishes no APG config for them; SHAC's paper trains its own
envs, whose Ant settings the ant defaults follow: 64 envs, a horizon of 32, a 128-64-32 policy).
Brax's inverted pendulum runs on its generalized backend: its MJX model solves constraints in a
loop JAX cannot differentiate (ant's MJX model, solved in one iteration, can be)."""

from __future__ import annotations

_PENDULUM = dict(num_envs=64, total_steps=1_000_000, episode_length=200, horizon_length=32, num_eval_envs=32)
_BRAX = dict(num_envs=64, horizon_length=32, episode_length=1000, normalize_observations=True, num_eval_envs=128)
APG_DEFAULTS: dict[str, dict] = {
    "pendulum": dict(_PENDULUM, learning_rate=3e-3),
    "inverted_pendulum": dict(_BRAX, total_steps=2_000_000, backend="generalized"),
    "ant": dict(_BRAX, total_steps=10_000_000),
}
SHAC_DEFAULTS: dict[str, dict] = {
    "pendulum": dict(_PENDULUM),
    "inverted_pendulum": dict(_BRAX, total_steps=2_000_000, backend="generalized"),
    "ant": dict(_BRAX, total_steps=10_000_000, policy_hidden_sizes=(128, 64, 32)),
}
