"""The continuous-action replay agents' (SAC, TD3, DDPG) per-env defaults: Brax's published
SAC configs and MuJoCo Playground's DM Control Suite SAC config."""

from __future__ import annotations

from envs import PLAYGROUND_ENVS


# Published Brax SAC settings (brax training colab), in brax.training names.
_BRAX_SAC = dict(episode_length=1000, normalize_observations=True, action_repeat=1, num_envs=128,
                 batch_size=512, grad_updates_per_step=64, max_replay_size=1_048_576, min_replay_size=8192,
                 activation="relu", policy_hidden_sizes=(256, 256), value_hidden_sizes=(256, 256),
                 discounting=0.99, learning_rate=6e-4, num_eval_envs=128)
DEFAULTS: dict[str, dict] = {
    "pendulum": dict(num_envs=16, total_steps=20_000, episode_length=200, batch_size=256, grad_updates_per_step=8,
                     max_replay_size=100_000, min_replay_size=1024, activation="relu",
                     policy_hidden_sizes=(256, 256), value_hidden_sizes=(256, 256), discounting=0.99,
                     learning_rate=1e-3, normalize_observations=False, num_eval_envs=32),
    "mountain_car_continuous": dict(num_envs=16, total_steps=100_000, episode_length=999, batch_size=256,
                                    grad_updates_per_step=8, max_replay_size=100_000, min_replay_size=4096,
                                    activation="relu", policy_hidden_sizes=(256, 256),
                                    value_hidden_sizes=(256, 256), learning_rate=1e-3,
                                    normalize_observations=False, num_eval_envs=32),
    "inverted_pendulum": dict(_BRAX_SAC, total_steps=100_000, reward_scaling=1.0),
    "hopper": dict(_BRAX_SAC, total_steps=6_553_600, reward_scaling=30, discounting=0.997),
    "walker2d": dict(_BRAX_SAC, total_steps=7_864_320, reward_scaling=5, discounting=0.997, batch_size=128,
                     grad_updates_per_step=32),
    "halfcheetah": dict(_BRAX_SAC, total_steps=5_000_000, reward_scaling=1.0, grad_updates_per_step=32),
}
for _name in ("ant", "humanoid", "humanoidstandup", "inverted_double_pendulum", "pusher", "reacher", "swimmer"):
    DEFAULTS[_name] = dict(_BRAX_SAC, total_steps=5_000_000, reward_scaling=1.0)
# MuJoCo Playground's DM Control Suite: its published Brax SAC config
# (mujoco_playground/config/dm_control_suite_params.py, `brax_sac_config`), with the budgets
# it raises per task, as that function returns them for each task's name (its pendulum
# exceptions are written for "PendulumSwingUp", a name no task has).
_DMC_SAC = dict(_BRAX_SAC, total_steps=5_000_000, episode_length=1000, reward_scaling=1.0, discounting=0.99,
                learning_rate=1e-3, num_envs=128, batch_size=512, grad_updates_per_step=8,
                max_replay_size=4 * 1_048_576, min_replay_size=8192, q_network_layer_norm=True)
_DMC_SAC_LONGER = ("AcrobotSwingup", "AcrobotSwingupSparse", "SwimmerSwimmer6", "FingerSpin", "FingerTurnEasy",
                   "FingerTurnHard", "HopperHop", "HopperStand", "CheetahRun", "HumanoidWalk", "WalkerRun")
for _name in PLAYGROUND_ENVS:
    DEFAULTS[_name] = dict(_DMC_SAC, total_steps=10_000_000 if _name in _DMC_SAC_LONGER else 5_000_000)
