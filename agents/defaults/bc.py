"""The distillation agents' (bc, bc_rnn) per-env defaults: PPO's sizes there (its envs, unroll,
batch and policy network; ppo_rnn's for a recurrent student on the classic tasks) with a shorter
budget: a student learns from labels, not from returns."""

from __future__ import annotations

from agents.defaults.ppo import DEFAULTS as PPO, RNN as PPO_RNN

_SIZES = ("num_envs", "episode_length", "unroll_length", "batch_size", "num_minibatches", "normalize_observations",
          "num_eval_envs", "policy_hidden_sizes", "activation")


def _from(table: dict, env: str, total_steps: int, **extra) -> dict:
    return {**{k: v for k, v in table[env].items() if k in _SIZES}, "total_steps": total_steps, **extra}


# Cartpole: a recurrent student distilled on cartpole_privileged (tuned as cartpole) solved it first
# at 49k and 98k env steps with the generic learning rate 1e-3 and 4 passes, and at 32k and 49k
# with these, stable to the end of the 200k-step budget (2 seeds each).
_CARTPOLE = dict(learning_rate=3e-3, num_updates_per_batch=8, anneal_lr=True)

# Every env PPO has settings for, with a tenth of its budget.
BC_DEFAULTS: dict[str, dict] = {env: _from(PPO, env, PPO[env]["total_steps"] // 10) for env in PPO}
BC_DEFAULTS["cartpole"] = _from(PPO, "cartpole", 200_000, **_CARTPOLE)
BC_RNN_DEFAULTS: dict[str, dict] = {**BC_DEFAULTS, **{env: _from(PPO_RNN, env, PPO_RNN[env]["total_steps"] // 10)
                                                      for env in PPO_RNN}}
BC_RNN_DEFAULTS["cartpole"] = _from(PPO_RNN, "cartpole", 200_000, **_CARTPOLE)
