"""PPO's per-env defaults: Brax's published PPO configs, MuJoCo Playground's DM Control Suite,
locomotion and manipulation configs, and small configs for the classic tasks; recurrent PPO's
(`RNN`)."""

from __future__ import annotations

from envs import PLAYGROUND_ENVS, ROBOT_LOCOMOTION


# Published Brax PPO settings (brax training colab), in brax.training names.
_BRAX = dict(episode_length=1000, normalize_observations=True, action_repeat=1, learning_rate=3e-4,
             activation="swish", policy_hidden_sizes=(32, 32, 32, 32), value_hidden_sizes=(256,) * 5,
             gae_lambda=0.95, clipping_epsilon=0.3, value_loss_coef=0.5, num_eval_envs=128)
DEFAULTS: dict[str, dict] = {
    "cartpole": dict(num_envs=32, total_steps=500_000, episode_length=500, unroll_length=32, batch_size=64,
                     num_minibatches=4, num_updates_per_batch=4, learning_rate=2.5e-3, entropy_cost=0.01,
                     discounting=0.99, max_grad_norm=0.5, anneal_lr=True, normalize_observations=False),
    "acrobot": dict(num_envs=32, total_steps=500_000, episode_length=500, unroll_length=32, batch_size=64,
                    num_minibatches=4, num_updates_per_batch=4, learning_rate=2.5e-3, max_grad_norm=0.5,
                    anneal_lr=True),
    "pendulum": dict(num_envs=64, total_steps=2_000_000, episode_length=200, unroll_length=32, batch_size=64,
                     num_minibatches=32, num_updates_per_batch=8, learning_rate=1e-3, entropy_cost=1e-3,
                     discounting=0.95, gae_lambda=0.95, reward_scaling=0.1, max_grad_norm=0.5, anneal_lr=True,
                     activation="swish"),
    "mountain_car_continuous": dict(num_envs=64, total_steps=2_000_000, episode_length=999, unroll_length=32,
                                    batch_size=64, num_minibatches=8, num_updates_per_batch=4, entropy_cost=0.01,
                                    discounting=0.99, max_grad_norm=0.5),
    "inverted_pendulum": dict(_BRAX, num_envs=2048, total_steps=2_000_000, reward_scaling=10, unroll_length=5,
                              num_minibatches=32, num_updates_per_batch=4, discounting=0.97, entropy_cost=1e-2,
                              batch_size=1024),
    "inverted_double_pendulum": dict(_BRAX, num_envs=2048, total_steps=20_000_000, reward_scaling=10,
                                     unroll_length=5, num_minibatches=32, num_updates_per_batch=4,
                                     discounting=0.97, entropy_cost=1e-2, batch_size=1024),
    "ant": dict(_BRAX, num_envs=4096, total_steps=50_000_000, reward_scaling=10, unroll_length=5,
                num_minibatches=32, num_updates_per_batch=4, discounting=0.97, entropy_cost=1e-2, batch_size=2048),
    # Advantages recomputed in every minibatch, as the Brax PPO this config was tuned with does: on
    # a TPU at 4096 envs it walks (7,062 at 19.7M steps) where advantages computed once per
    # batch stall near 360 at 4M (benchmarks/results/tpu_v5e/ppo_humanoid_ablation.md).
    "humanoid": dict(_BRAX, num_envs=2048, total_steps=50_000_000, reward_scaling=0.1, unroll_length=10,
                     num_minibatches=32, num_updates_per_batch=8, discounting=0.97, entropy_cost=1e-3,
                     batch_size=1024, gae_per_minibatch=True),
    "humanoidstandup": dict(_BRAX, num_envs=2048, total_steps=100_000_000, reward_scaling=0.1,
                            unroll_length=15, num_minibatches=32, num_updates_per_batch=8, discounting=0.97,
                            learning_rate=6e-4, entropy_cost=1e-2, batch_size=1024),
    "halfcheetah": dict(_BRAX, num_envs=2048, total_steps=50_000_000, reward_scaling=1, unroll_length=20,
                        num_minibatches=32, num_updates_per_batch=8, discounting=0.95, entropy_cost=1e-3,
                        batch_size=512),
    "reacher": dict(_BRAX, num_envs=2048, total_steps=50_000_000, reward_scaling=5, action_repeat=4,
                    unroll_length=50, num_minibatches=32, num_updates_per_batch=8, discounting=0.95,
                    entropy_cost=1e-3, batch_size=256),
    "pusher": dict(_BRAX, num_envs=2048, total_steps=50_000_000, reward_scaling=5, unroll_length=30,
                   num_minibatches=16, num_updates_per_batch=8, discounting=0.95, entropy_cost=1e-2,
                   batch_size=512),
}
# Envs without a published PPO config start from ant's.
for _name in ("hopper", "walker2d", "swimmer"):
    DEFAULTS[_name] = dict(DEFAULTS["ant"], reward_scaling=1.0)
# MuJoCo Playground's DM Control Suite: its published Brax PPO config
# (mujoco_playground/config/dm_control_suite_params.py, `brax_ppo_config`) with its per-task
# exceptions, as that function returns them for each task's name (its pendulum exception is
# written for "PendulumSwingUp", a name no task has, so PendulumSwingup keeps the base config).
_DMC_PPO = dict(_BRAX, num_envs=2048, total_steps=60_000_000, episode_length=1000, reward_scaling=10.0,
                unroll_length=30, num_minibatches=32, num_updates_per_batch=16, discounting=0.995, learning_rate=1e-3,
                entropy_cost=1e-2, batch_size=1024)
_DMC_PPO_EXCEPTIONS = {"AcrobotSwingup": dict(total_steps=100_000_000),
                       "AcrobotSwingupSparse": dict(total_steps=100_000_000), "BallInCup": dict(discounting=0.95),
                       "SwimmerSwimmer6": dict(total_steps=100_000_000), "WalkerRun": dict(total_steps=100_000_000),
                       "FingerSpin": dict(discounting=0.95)}
for _name in PLAYGROUND_ENVS:
    DEFAULTS[_name] = dict(_DMC_PPO, **_DMC_PPO_EXCEPTIONS.get(_name, {}))

# MuJoCo Playground's robots: its published Brax PPO configs (mujoco_playground/config/
# locomotion_params.py and manipulation_params.py, `brax_ppo_config`), as those functions return
# them for each task (tests/test_robots.py compares the two). Where Playground's critic reads
# "privileged_state" (its `value_obs_key`), the privileged critic is on. Their episode length and
# action repeat are the env's own (envs/robot_tasks.py).
_ROBOT_PPO = {k: v for k, v in _BRAX.items() if k not in ("episode_length", "action_repeat")}
_LOCOMOTION_PPO = dict(_ROBOT_PPO, num_envs=8192, total_steps=100_000_000, reward_scaling=1.0, unroll_length=20,
                       num_minibatches=32, num_updates_per_batch=4, discounting=0.97, entropy_cost=1e-2,
                       batch_size=256, max_grad_norm=1.0, policy_hidden_sizes=(128,) * 4)
_PRIVILEGED = dict(policy_hidden_sizes=(512, 256, 128), value_hidden_sizes=(512, 256, 128), privileged_critic=True)
_HUMANOID = dict(_PRIVILEGED, clipping_epsilon=0.2, entropy_cost=0.005)
# Go1's joystick tasks recompute advantages in every minibatch, as the Brax PPO their config was
# tuned with does: so trained on a TPU (8,192 envs, 196M steps) Go1 walks, in MJX and in native
# MuJoCo (benchmarks/results/go1_walk/). Advantages once per batch were not run that far.
_LOCOMOTION_EXCEPTIONS = {
    **dict.fromkeys(("Go1JoystickFlatTerrain", "Go1JoystickRoughTerrain"),
                    dict(_PRIVILEGED, total_steps=200_000_000, gae_per_minibatch=True)),
    **dict.fromkeys(("Go1Handstand", "Go1Footstand"), _PRIVILEGED),
    "Go1Getup": dict(_PRIVILEGED, total_steps=50_000_000),
    **dict.fromkeys(("G1JoystickFlatTerrain", "G1JoystickRoughTerrain", "T1JoystickFlatTerrain",
                     "T1JoystickRoughTerrain", "ApolloJoystickFlatTerrain"), dict(_HUMANOID, total_steps=200_000_000)),
    **dict.fromkeys(("BerkeleyHumanoidJoystickFlatTerrain", "BerkeleyHumanoidJoystickRoughTerrain"),
                    dict(_HUMANOID, total_steps=150_000_000)),
}
for _name in ROBOT_LOCOMOTION:
    DEFAULTS[_name] = dict(_LOCOMOTION_PPO, **_LOCOMOTION_EXCEPTIONS.get(_name, {}))
_MANIPULATION_PPO = dict(_ROBOT_PPO, reward_scaling=1.0, policy_hidden_sizes=(32,) * 4)
_PANDA = dict(_MANIPULATION_PPO, num_envs=2048, total_steps=20_000_000, unroll_length=10, num_minibatches=32,
              num_updates_per_batch=8, discounting=0.97, learning_rate=1e-3, entropy_cost=2e-2, batch_size=512)
_HAND = dict(_MANIPULATION_PPO, **_PRIVILEGED, num_envs=8192, total_steps=100_000_000, unroll_length=40,
             num_minibatches=32, num_updates_per_batch=4, discounting=0.97, entropy_cost=1e-2, batch_size=256)
DEFAULTS.update(
    AlohaHandOver=dict(_PANDA, total_steps=100_000_000, unroll_length=15, max_grad_norm=1.0,
                       policy_hidden_sizes=(256,) * 3),
    AlohaSinglePegInsertion=dict(_MANIPULATION_PPO, num_envs=1024, total_steps=150_000_000, unroll_length=40,
                                 num_minibatches=32, num_updates_per_batch=8, discounting=0.97, entropy_cost=1e-2,
                                 batch_size=512, policy_hidden_sizes=(256,) * 4),
    PandaPickCube=dict(_PANDA),
    PandaPickCubeOrientation=dict(_PANDA),
    PandaOpenCabinet=dict(_PANDA, total_steps=40_000_000),
    PandaPickCubeCartesian=dict(_PANDA, num_envs=1024, total_steps=5_000_000, num_minibatches=8,
                                learning_rate=5e-4, entropy_cost=7.5e-3, batch_size=256, reward_scaling=0.1,
                                max_grad_norm=1.0, policy_hidden_sizes=(256, 256)),
    PandaRobotiqPushCube=dict(_MANIPULATION_PPO, num_envs=8192, total_steps=1_800_000_000, unroll_length=100,
                              num_minibatches=32, num_updates_per_batch=8, discounting=0.994, learning_rate=6e-4,
                              entropy_cost=1e-2, batch_size=512, num_eval_envs=32, policy_hidden_sizes=(64,) * 4),
    LeapCubeReorient=dict(_HAND, total_steps=200_000_000, discounting=0.99),
    LeapCubeRotateZAxis=dict(_HAND),
    AeroCubeRotateZAxis=dict(_HAND, total_steps=300_000_000),
)


# PPO's settings for the classic tasks (the velocity-less ones are tuned as those they come
# from). Pendulum: minibatches of 16 trajectories instead of 64 and 16 per iteration instead of
# 32, so as many gradient steps of a quarter of the size (the same compute) come 4x as often per
# env step; measured on pendulum_no_vel, best evaluation -666 with PPO's sizes in 2M steps,
# -200 at 320k with these.
RNN = {env: dict(DEFAULTS[env]) for env in ("cartpole", "acrobot", "pendulum")}
RNN["pendulum"].update(batch_size=16, num_minibatches=16)
