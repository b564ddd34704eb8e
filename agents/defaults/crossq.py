"""CrossQ's per-env defaults. Its paper trains one env at one gradient step per env step
(batch 256, 2 x 2048 critics, 5,000 random steps first); here every env steps once per
iteration and the iteration takes as many gradient steps as there are envs (one per env
step), a multiple of the policy delay so that the delayed actor step comes at a fixed place.
The classic tasks take 256-wide critics on a CPU."""

from __future__ import annotations

from envs import PLAYGROUND_ENVS

# The paper's recipe for the MuJoCo tasks, 24 envs at a time (Brax's and Playground's).
_PAPER = dict(num_envs=24, grad_updates_per_step=24, batch_size=256, max_replay_size=1_000_000,
              min_replay_size=5000, episode_length=1000, total_steps=1_000_000, num_eval_envs=128,
              normalize_observations=False, discounting=0.99)
DEFAULTS: dict[str, dict] = {name: dict(_PAPER) for name in ("ant", "halfcheetah", "hopper", "humanoid",
                                                             "humanoidstandup", "walker2d", "swimmer", "pusher",
                                                             "reacher", "inverted_double_pendulum")}
DEFAULTS.update({name: dict(_PAPER) for name in PLAYGROUND_ENVS})
# Small CPU configs: 6 envs, 6 gradient steps an iteration (the policy every 3rd).
_CLASSIC = dict(num_envs=6, grad_updates_per_step=6, batch_size=256, max_replay_size=100_000, min_replay_size=1200,
                value_hidden_sizes=(256, 256), normalize_observations=False, num_eval_envs=32)
DEFAULTS["pendulum"] = dict(_CLASSIC, total_steps=6_000, episode_length=200, discounting=0.99)
DEFAULTS["inverted_pendulum"] = dict(_CLASSIC, total_steps=8_000, episode_length=1000, discounting=0.99)
