"""FastTD3's (`FASTTD3`) and FastSAC's (`FASTSAC`) per-env defaults: their reference's MuJoCo
Playground configs, and small CPU configs for the classic tasks."""

from __future__ import annotations

from envs import PLAYGROUND_ENVS
from envs.robot_tasks import ROBOT_TASKS


# FastTD3's published configs (its hyperparams.py): MuJoCo Playground tasks take 1024 envs,
# discount 0.97, support +-10, 10,240 ring rows per env, batch 32,768 and 2 updates per step;
# CheetahRun (its DM Control example) n-step 3, support +-500, std_min 0.1 and smoothing 0.1.
_PLAYGROUND = dict(num_envs=1024, num_eval_envs=1024, max_replay_size=1024 * 10_240, min_replay_size=10 * 1024,
                   normalize_observations=True, activation="relu", episode_length=1000, total_steps=100_000_000)
FASTTD3: dict[str, dict] = {name: dict(_PLAYGROUND) for name in PLAYGROUND_ENVS}
FASTTD3["CheetahRun"].update(n_step=3, v_min=-500.0, v_max=500.0, std_min=0.1, target_noise=0.1)
# Playground's robots: its MuJoCo Playground default for every task (1024 envs, 2 updates per
# step), the critic reading "privileged_state" where the task has one (its reference's asymmetric
# observations), and its per-task configs (its `total_timesteps` counts vector steps of 1,024
# envs); episode length and action repeat are the env's own. LEAP's `use_cdq=False` (the mean of
# the twin critics, not their minimum) has no counterpart here: the clipped double Q stays.
_ROBOT = {k: v for k, v in _PLAYGROUND.items() if k != "episode_length"}
_HUMANOIDS = ("G1JoystickFlatTerrain", "G1JoystickRoughTerrain", "T1JoystickFlatTerrain", "T1JoystickRoughTerrain")
_GO1 = ("Go1JoystickFlatTerrain", "Go1JoystickRoughTerrain", "Go1Getup")
# Its reference trains without the task's domain randomiser, and without the humanoids' pushes.
_ROBOT["domain_randomization"] = False
_NO_PUSHES = ("push_config.enable=false", "push_config.magnitude_range=[0.0, 0.0]")
FASTTD3.update({name: dict(_ROBOT, privileged_critic=task.privileged) for name, task in ROBOT_TASKS.items()})
for _name in _HUMANOIDS:
    FASTTD3[_name].update(total_steps=100_000 * 1024, env_config=_NO_PUSHES)
for _name in _GO1:
    FASTTD3[_name].update(total_steps=50_000 * 1024, std_min=0.2, std_max=0.8, target_noise=0.2, grad_updates_per_step=8)
FASTTD3["LeapCubeReorient"].update(n_step=3, discounting=0.99, target_noise=0.2, v_min=-50.0, v_max=50.0)
FASTTD3["LeapCubeRotateZAxis"].update(discounting=0.99, target_noise=0.2)
# Brax humanoid and ant (not in the reference's configs): the Playground recipe with a support
# wide enough for their returns at discount 0.97 (about 5 reward a step: values near 170),
# as its HumanoidBench default (+-250), and n-step 3 as its DM Control example.
for _name in ("humanoid", "ant"):
    FASTTD3[_name] = dict(_PLAYGROUND, v_min=-250.0, v_max=250.0, n_step=3)
# Small CPU configs for the classic tasks (learning tests): on a CPU a gradient step costs
# as much as many env steps, so these take SAC's few envs and many updates per step (64
# envs at 2 updates a step make too few updates in a small budget: -1,356 on pendulum after
# 40k steps, where this config reaches -130 by 6k).
_CLASSIC = dict(num_envs=16, num_eval_envs=32, batch_size=256, grad_updates_per_step=8, max_replay_size=100_000,
                min_replay_size=1024, normalize_observations=False, activation="relu",
                policy_hidden_sizes=(128, 128), value_hidden_sizes=(128, 128), discounting=0.97)
FASTTD3["pendulum"] = dict(_CLASSIC, total_steps=20_000, episode_length=200, v_min=-600.0, v_max=0.0, n_step=3,
                            std_min=0.05, std_max=0.4, target_noise=0.1)
FASTTD3["inverted_pendulum"] = dict(_CLASSIC, total_steps=30_000, episode_length=1000, v_min=0.0, v_max=40.0,
                                     n_step=3, std_min=0.05, std_max=0.4, target_noise=0.1)

# Its reference's MuJoCo Playground setting (as FastTD3's: 1024 envs, 10,240 ring rows per
# env), and the same small CPU configs as FastTD3's for the classic tasks.
_SAC_PLAYGROUND = dict(num_envs=1024, num_eval_envs=1024, max_replay_size=1024 * 10_240,
                       min_replay_size=10 * 1024, normalize_observations=True, episode_length=1000, total_steps=100_000_000)
FASTSAC: dict[str, dict] = {name: dict(_SAC_PLAYGROUND) for name in PLAYGROUND_ENVS}
FASTSAC["CheetahRun"].update(n_step=3, v_min=-500.0, v_max=500.0)
for _name in ("humanoid", "ant"):
    FASTSAC[_name] = dict(_SAC_PLAYGROUND, v_min=-250.0, v_max=250.0, n_step=3)
# Playground's robots, as FastTD3's above: its reference's per-task configs (Go1: 8 updates per
# step; LEAP reorientation: n-step 3; its exploration-noise settings are TD3's and do not apply).
_SAC_ROBOT = {k: v for k, v in _SAC_PLAYGROUND.items() if k != "episode_length"}
_SAC_ROBOT["domain_randomization"] = False
FASTSAC.update({name: dict(_SAC_ROBOT, privileged_critic=task.privileged) for name, task in ROBOT_TASKS.items()})
for _name in _HUMANOIDS:
    FASTSAC[_name].update(total_steps=100_000 * 1024, env_config=_NO_PUSHES)
for _name in _GO1:
    FASTSAC[_name].update(total_steps=50_000 * 1024, grad_updates_per_step=8)
FASTSAC["LeapCubeReorient"].update(n_step=3)
_SAC_CLASSIC = dict(num_envs=16, num_eval_envs=32, batch_size=256, grad_updates_per_step=8, policy_delay=2,
                    max_replay_size=100_000, min_replay_size=1024, normalize_observations=False,
                    policy_hidden_sizes=(128, 128), value_hidden_sizes=(128, 128), init_alpha=0.1)
FASTSAC["pendulum"] = dict(_SAC_CLASSIC, total_steps=20_000, episode_length=200, v_min=-600.0, v_max=0.0, n_step=3)
FASTSAC["inverted_pendulum"] = dict(_SAC_CLASSIC, total_steps=30_000, episode_length=1000, v_min=0.0, v_max=40.0,
                                     n_step=3)
