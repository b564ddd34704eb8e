"""The Q-learning agents' per-env defaults: PQN's (`PQN`, its paper's reference settings)
and DQN's (`DQN`)."""

from __future__ import annotations

# The CartPole and Acrobot settings of the paper's reference code, in this trainer's names:
# 32 envs x 64 steps per iteration, 16 minibatches x 4 passes, 2 x 256 LayerNorm MLP.
_CLASSIC = dict(num_envs=32, unroll_length=64, batch_size=2, num_minibatches=16, num_updates_per_batch=4,
                value_hidden_sizes=(256, 256), activation="relu", learning_rate=1e-4, anneal_lr=True,
                max_grad_norm=10.0, reward_scaling=0.1, discounting=0.99, td_lambda=0.95, epsilon_start=1.0,
                epsilon_finish=0.2, epsilon_decay=0.2, normalize_observations=False, total_steps=500_000,
                episode_length=500)
PQN = {"cartpole": _CLASSIC, "acrobot": _CLASSIC}

# DQN on the classic tasks.
_DQN_CLASSIC = dict(num_envs=8, total_steps=200_000, episode_length=500, batch_size=64, grad_updates_per_step=4,
                    max_replay_size=100_000, min_replay_size=1000, value_hidden_sizes=(256, 256), activation="relu",
                    learning_rate=5e-4, anneal_lr=True, discounting=0.99, tau=0.005, epsilon_start=1.0,
                    epsilon_finish=0.04, epsilon_decay=0.16, max_grad_norm=10.0, normalize_observations=False,
                    num_eval_envs=32)
DQN = {"cartpole": _DQN_CLASSIC, "acrobot": _DQN_CLASSIC}
