"""What the continuous-action replay agents (SAC, TD3, DDPG) share: their network sizes,
their per-env defaults (the published Brax SAC settings) and a dummy input for their Q networks."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from agents.base import ReplayConfig, agent_config
from envs import PLAYGROUND_ENVS
from envs.base import EnvSpec


@agent_config
class ActorCriticReplayConfig(ReplayConfig):
    """A policy network and Q networks learned from the replay ring."""

    policy_hidden_sizes: tuple[int, ...] = (64, 64)
    """Hidden layer sizes of the policy network."""
    value_hidden_sizes: tuple[int, ...] = (64, 64)
    """Hidden layer sizes of each Q network."""
    critic_obs: str = ""
    """The parts of a structured (dict) observation the Q networks read, comma-separated (e.g. privileged_state for a critic that sees what the policy cannot); empty: as --actor-obs."""
    q_network_layer_norm: bool = False
    """LayerNorm after each hidden activation of the Q networks (brax.training's q_network_layer_norm; on in MuJoCo Playground's DM Control Suite SAC config)."""


def q_example(spec: EnvSpec):
    """Dummy (obs [1, O], action [1, A]) to initialise networks."""
    return jnp.zeros((1,) + spec.obs_shape, jnp.float32), jnp.zeros((1, spec.action_size), jnp.float32)


def init_networks(key, policy_net, q_net, spec: EnvSpec):
    """(policy parameters, Q parameters) of a policy network on observations and a Q network
    on (observation, action), from one key."""
    policy_key, q_key = jax.random.split(key)
    obs, action = q_example(spec)
    return policy_net.init(policy_key, obs), q_net.init(q_key, obs, action)


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


def q_regression_loss(q_params, apply_q, obs, action, target):
    """Every Q head regressed on the same target y.

    obs [M, O], action [M, A], target [M] (no gradient flows into it).
    loss = 0.5 * mean_m sum_k (Q_k(s_m, a_m) - y_m)^2. Returns (loss, mean Q).
    """
    q = apply_q(q_params, obs, action)  # [M, K]
    error = q - jax.lax.stop_gradient(target)[:, None]
    return 0.5 * jnp.mean(jnp.sum(jnp.square(error), axis=-1)), jnp.mean(q)
