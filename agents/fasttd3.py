"""FastTD3 (2025, "FastTD3: Simple, Fast, and
Capable Reinforcement Learning for Humanoid Control", arXiv:2505.22642): TD3 made for
thousands of parallel envs and very large batches.

What it changes in TD3 (`agents/td3.py`), as its reference implementation does:
- Twin distributional critics (C51, `agents/distributional.py`): each Q network outputs
  `num_atoms` logits on the support [v_min, v_max]. The target is the projected distribution
  of G + discount_n * Z(s', a'), taken from the twin whose expected value is lower (clipped
  double Q), and both critics minimise its cross-entropy.
- n-step returns (`n_step`): the replay loop samples `n_step` consecutive steps of one env
  from the ring; the sum stops at an episode's end, bootstraps from the true final
  observation after a truncation and not at all after a termination
  (`returns.n_step_target`).
- Exploration noise per env: each env's noise std is drawn uniformly in [std_min, std_max]
  and redrawn when its episode ends (the agent's per-env `carry`).
- No target policy: the next action is the current policy's, with target policy smoothing;
  the target critics follow the critics by Polyak averaging (`tau`) after every critic step;
  the actor steps every `policy_delay` critic steps on -min of the twins' expected values.
- AdamW (`weight_decay`), observation normalisation, wide tapering MLPs (critic 1024-512-256,
  actor 512-256-128: the reference's hidden_dim, hidden_dim / 2, hidden_dim / 4), and the
  policy's last layer started near zero.
Mixed precision is the existing `--matmul-dtype bfloat16`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from flax import struct

from agents import distributional as dist
from agents import networks as nets
from sim.core.contract import Agent, AgentDef, Budget, ConfigError, Transition
from agents.common import explore_continuous, gradient_step, obs_inputs, pmean, polyak, prep_fn, sharded_normal
from agents.config import HyperParams, TargetNetworks, agent_config, hparam, hyper_params
from agents.defaults.fast import FASTTD3 as DEFAULTS
from agents.offpolicy import ActorCriticReplayConfig, init_networks
from agents.optim import adamw
from agents.returns import n_step_target
from agents.td3 import delayed_agent, smoothed_action
from envs.base import EnvSpec


@agent_config
class C51ReplayConfig(TargetNetworks, ActorCriticReplayConfig):
    """What FastTD3 and FastSAC share: twin C51 critics, n-step samples, AdamW, a delayed actor."""

    weight_decay: float = hparam(0.1)
    """Decoupled weight decay of AdamW: every step also shrinks the weights by learning_rate * weight_decay."""
    num_atoms: int = 101
    """Atoms of each critic's categorical value distribution."""
    v_min: float = hparam(-10.0)
    """Lowest value of the critics' support."""
    v_max: float = hparam(10.0)
    """Highest value of the critics' support."""
    n_step: int = 1
    """Steps of each sampled return (consecutive steps of one env from the replay ring)."""
    policy_delay: int = 2
    """Update the policy every this many critic updates."""

    def positive_fields(self):
        return (*super().positive_fields(), "policy_delay", "n_step")

    @property
    def steps_per_sample(self) -> int:
        return self.n_step

    def validate(self, num_envs: int) -> None:
        super().validate(num_envs)
        if self.num_atoms < 2:
            raise ConfigError("num-atoms", f"a categorical critic needs >= 2 atoms, got {self.num_atoms}")
        if not self.v_min < self.v_max:
            raise ConfigError("v-min", f"must be below --v-max, got {self.v_min} and {self.v_max}")
        if self.weight_decay < 0:
            raise ConfigError("weight-decay", f"must be >= 0, got {self.weight_decay}")


@agent_config
class FastTD3Config(C51ReplayConfig):
    """FastTD3's hyper-parameters (the defaults: its reference's for MuJoCo Playground)."""

    policy_hidden_sizes: tuple[int, ...] = (512, 256, 128)
    """Hidden layer sizes of the policy network."""
    value_hidden_sizes: tuple[int, ...] = (1024, 512, 256)
    """Hidden layer sizes of each Q network."""
    discounting: float = hparam(0.97)
    """Discount factor gamma."""
    tau: float = hparam(0.1)
    """Polyak averaging rate of the target critics, after every critic step."""
    batch_size: int = 32768
    """Transitions (sequences of --n-step steps) per gradient step."""
    grad_updates_per_step: int = 2
    """Gradient steps per environment step of all envs (one iteration)."""
    learning_rate: float = hparam(3e-4)
    """Learning rate of the actor and the critics (AdamW)."""
    std_min: float = hparam(0.001)
    """Lowest exploration noise std; each env draws its own in [std-min, std-max] at every episode start."""
    std_max: float = hparam(0.4)
    """Highest exploration noise std."""
    target_noise: float = hparam(0.001)
    """Std of the target policy smoothing noise."""
    target_noise_clip: float = hparam(0.5)
    """Clip of the target policy smoothing noise."""

    def validate(self, num_envs: int) -> None:
        super().validate(num_envs)
        if not 0 <= self.std_min <= self.std_max:
            raise ConfigError("std-min", f"need 0 <= --std-min <= --std-max, got {self.std_min} and {self.std_max}")
        if self.target_noise < 0 or self.target_noise_clip < 0:
            raise ConfigError("target-noise", "the noise and its clip must be >= 0")


@struct.dataclass
class FastTD3State:
    policy: dict
    q: dict
    target_q: dict
    policy_opt: optax.OptState
    q_opt: optax.OptState
    step: jax.Array  # int32 critic updates done
    hp: HyperParams


def sequence_targets(batch: Transition, discount, n_step: int):
    """(reward sum [M], bootstrap discount [M]) of a replay batch's samples: one step each for
    n_step 1, else n steps of one env ([M, n] rewards and episode ends); the target is then
    reward_sum + bootstrap * value(batch.next_obs)."""
    if n_step == 1:
        return batch.reward, discount * (1.0 - batch.terminated)
    reward_sum, bootstrap, _ = jax.vmap(n_step_target, in_axes=(0, 0, 0, None))(
        batch.reward, batch.terminated, batch.truncated, discount)
    return reward_sum, bootstrap


def critic_loss(q_params, apply_q, obs, action, target_probs):
    """Both critics' cross-entropy to the one target distribution: obs [M, O], action [M, A],
    target_probs [M, K] (or [M, 2, K]: each critic its own). Returns (loss, the critics'
    distributions [M, 2, K])."""
    logits = apply_q(q_params, obs, action)  # [M, 2, K]
    if target_probs.ndim == 2:
        target_probs = target_probs[:, None]
    loss = jnp.mean(jnp.sum(dist.cross_entropy(target_probs, logits), axis=-1))
    return loss, jax.nn.softmax(logits, axis=-1)


def _learning_steps(config: FastTD3Config, pi, q_net, prep, axis_name):
    """(critic_step, actor_step) of FastTD3 for the policy `pi` and the twin C51 critic `q_net`,
    as `td3.delayed_updates` takes them."""

    def q_values(q_params, obs, action, hp):
        """Each twin's expected value [M, 2]."""
        return dist.mean(jax.nn.softmax(q_net.apply(q_params, obs, action), axis=-1), hp.v_min, hp.v_max)

    optimizer = adamw()

    def step(hp):
        return dict(optimizer=optimizer, hp=hp, axis_name=axis_name)

    def critic_step(state: FastTD3State, hp, obs_stats, batch: Transition, key):
        """One critic step on a batch, then the Polyak step of the target critics."""
        reward_sum, bootstrap = sequence_targets(batch, hp.discounting, config.n_step)
        obs, next_obs = prep(obs_stats, batch.obs), prep(obs_stats, batch.next_obs)
        next_action = pi(state.policy, next_obs)
        next_action = smoothed_action(next_action, sharded_normal(key, next_action.shape, axis_name),
                                      hp.target_noise, hp.target_noise_clip)
        next_probs = jax.nn.softmax(q_net.apply(state.target_q, next_obs, next_action), axis=-1)  # [M, 2, K]
        lower = jnp.argmin(dist.mean(next_probs, hp.v_min, hp.v_max), axis=-1)  # clipped double Q: [M]
        chosen = jnp.take_along_axis(next_probs, lower[:, None, None], axis=1)[:, 0]
        target = dist.project(chosen, reward_sum * hp.reward_scaling, bootstrap, hp.v_min, hp.v_max)
        q, q_opt, c_loss, probs = gradient_step(critic_loss, state.q, state.q_opt, q_net.apply, obs, batch.action,
                                                target, **step(hp))
        q_mean = jnp.mean(dist.mean(probs, hp.v_min, hp.v_max))
        new = state.replace(q=q, q_opt=q_opt, target_q=polyak(state.target_q, q, hp.tau), step=state.step + 1)
        return new, {"critic": c_loss, "q": pmean(q_mean, axis_name)}

    def actor_loss(policy_params, q_params, obs, hp):
        """-mean_m min_k E[Z_k(s_m, mu(s_m))]."""
        return -jnp.mean(jnp.min(q_values(q_params, obs, pi(policy_params, obs), hp), axis=-1)), None

    def actor_step(state: FastTD3State, hp, obs_stats, batch: Transition, key=None):
        policy, policy_opt, p_loss, _ = gradient_step(actor_loss, state.policy, state.policy_opt, state.q,
                                                      prep(obs_stats, batch.obs), hp, **step(hp))
        return state.replace(policy=policy, policy_opt=policy_opt), p_loss

    return critic_step, actor_step


def make_fasttd3(config: FastTD3Config, spec: EnvSpec, axis_name: str | None = None,
                 budget: Budget = Budget(1)) -> Agent:
    """axis_name: the device axis inside `shard_map`; gradients are averaged over it."""
    policy_net = nets.MLP(config.policy_hidden_sizes, spec.action_size, config.activation, out_scale=0.01,
                          matmul_dtype=config.matmul_dtype, inputs=obs_inputs(config, spec))
    q_net = nets.QNetwork(config.value_hidden_sizes, config.activation, num_heads=2, head_size=config.num_atoms,
                          matmul_dtype=config.matmul_dtype, layer_norm=config.q_network_layer_norm,
                          inputs=obs_inputs(config, spec, "critic"))
    prep = prep_fn(config.normalize_observations, config.obs_clip)
    low = jnp.asarray(spec.action_low, jnp.float32)
    high = jnp.asarray(spec.action_high, jnp.float32)

    def pi(params, obs):
        return jnp.tanh(policy_net.apply(params, obs))

    optimizer = adamw()

    def init(key, hp=None):
        policy, q = init_networks(key, policy_net, q_net, spec)
        hp = hyper_params(config, hp)
        return FastTD3State(policy=policy, q=q, target_q=q, policy_opt=optimizer.init(policy, hp),
                            q_opt=optimizer.init(q, hp), step=jnp.zeros((), jnp.int32), hp=hp)

    def carry(batch: int):
        """Each env's exploration std; -1: draw one at the next step (an episode's start)."""
        return jnp.full((batch,), -1.0, jnp.float32)

    def act(state: FastTD3State, obs_stats, obs, key, deterministic=False, std=None):
        """`std`: each env's exploration noise std (the agent's carry; -1: draw one now)."""
        action = pi(state.policy, prep(obs_stats, obs))
        if deterministic:
            return nets.scale_action(action, low, high), action, std
        draw_key, noise_key = jax.random.split(key)
        hp = state.hp
        fresh = hp.std_min + (hp.std_max - hp.std_min) * jax.random.uniform(draw_key, std.shape)
        std = jnp.where(std < 0, fresh, std)
        action = jnp.clip(action + std[:, None] * jax.random.normal(noise_key, action.shape), -1.0, 1.0)
        return nets.scale_action(action, low, high), action, std

    critic_step, actor_step = _learning_steps(config, pi, q_net, prep, axis_name)
    return delayed_agent(config, config.policy_delay, critic_step, actor_step, init=init, act=act,
                         explore=explore_continuous(spec), carry=carry)


AGENT = AgentDef(name="fasttd3", about="FastTD3: TD3 with C51 twin critics, n-step returns, per-env noise, AdamW",
                 config=FastTD3Config, make=make_fasttd3, actions=("continuous",), defaults=DEFAULTS)
