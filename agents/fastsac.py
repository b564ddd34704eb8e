"""FastSAC (2025, "Learning Sim-to-Real Humanoid Locomotion in 15 Minutes"): SAC
on FastTD3's scaffolding, for thousands of parallel envs.

It shares FastTD3's pieces (`agents/fasttd3.py`): twin C51 critics on [v_min, v_max],
`n_step` sequences from the replay ring, a delayed actor (`policy_delay`), Polyak target
critics after every critic step, AdamW and observation normalisation. The choices of its
reference implementation, followed here:
- A tanh-Gaussian actor whose log-std is bounded smoothly: log_std = min + (max - min) *
  (tanh(x) + 1) / 2 on [log_std_min, log_std_max] = [-5, 0]; its mean and log-std heads start
  at zero (every first action is the centre of the range with std exp(-2.5)).
- The soft target: each target critic's distribution of r - discount_n * alpha * log pi(a'|s')
  + discount_n * Z'(s', a'), a' ~ pi(s'), projected, and each critic learns its own twin's
  (no clipped double Q in the critic target); the actor maximises the MEAN of the twins'
  expected values minus alpha * log pi.
- A learned temperature from a small start (init_alpha 0.001) towards the target entropy
  target_entropy_ratio * (-|A|): 0 by default, i.e. a target entropy of 0 nats, not SAC's -|A|;
  its loss -alpha * (log pi(a'|s') + target entropy) reuses the critic step's sample.
- LayerNorm and SiLU (swish) in every hidden layer of both networks, widths tapering by
  halves (critic 768-384-192, actor 512-256-128).
Its reference steps AdamW with betas (0.9, 0.95); this one keeps the project's Adam moments
(0.9, 0.999) for every agent.
"""

from __future__ import annotations

from typing import Literal

import jax
import jax.numpy as jnp
import optax
from flax import struct

from agents import distributional as dist
from agents import networks as nets
from sim.core.contract import Agent, AgentDef, Budget, ConfigError, Transition
from agents.common import explore_continuous, gradient_step, obs_inputs, pmean, polyak, prep_fn, sharded_normal
from agents.config import HyperParams, agent_config, hparam, hyper_params
from agents.defaults.fast import FASTSAC as DEFAULTS
from agents.fasttd3 import C51ReplayConfig, critic_loss, sequence_targets
from agents.offpolicy import init_networks
from agents.optim import adam, adamw
from agents.td3 import delayed_agent
from envs.base import EnvSpec


@agent_config
class FastSACConfig(C51ReplayConfig):
    """FastSAC's hyper-parameters (the defaults: its reference's)."""

    policy_hidden_sizes: tuple[int, ...] = (512, 256, 128)
    """Hidden layer sizes of the policy network."""
    value_hidden_sizes: tuple[int, ...] = (768, 384, 192)
    """Hidden layer sizes of each Q network."""
    activation: Literal["swish", "tanh", "relu", "elu"] = "swish"
    """Activation of both networks' hidden layers (each after a LayerNorm)."""
    discounting: float = hparam(0.97)
    """Discount factor gamma."""
    tau: float = hparam(0.125)
    """Polyak averaging rate of the target critics, after every critic step."""
    batch_size: int = 8192
    """Transitions (sequences of --n-step steps) per gradient step."""
    grad_updates_per_step: int = 8
    """Gradient steps per environment step of all envs (one iteration)."""
    learning_rate: float = hparam(3e-4)
    """Learning rate of the actor, the critics and the temperature (AdamW)."""
    weight_decay: float = hparam(0.001)
    """Decoupled weight decay of AdamW on the actor and the critics (not the temperature)."""
    v_min: float = hparam(-20.0)
    """Lowest value of the critics' support."""
    v_max: float = hparam(20.0)
    """Highest value of the critics' support."""
    policy_delay: int = 4
    """Update the policy every this many critic updates."""
    init_alpha: float = hparam(0.001)
    """Initial entropy temperature."""
    target_entropy_ratio: float = hparam(0.0)
    """The target entropy as a multiple of -action_dims (SAC's is 1)."""
    log_std_min: float = hparam(-5.0)
    """Lowest log-std of the policy."""
    log_std_max: float = hparam(0.0)
    """Highest log-std of the policy."""

    def validate(self, num_envs: int) -> None:
        super().validate(num_envs)
        if not self.log_std_min < self.log_std_max:
            raise ConfigError("log-std-min", f"must be below --log-std-max, got {self.log_std_min} and "
                                             f"{self.log_std_max}")
        if self.init_alpha <= 0:
            raise ConfigError("init-alpha", f"must be > 0, got {self.init_alpha}")


@struct.dataclass
class FastSACState:
    policy: dict
    q: dict
    target_q: dict
    log_alpha: jax.Array
    policy_opt: optax.OptState
    q_opt: optax.OptState
    alpha_opt: optax.OptState
    step: jax.Array  # int32 critic updates done
    hp: HyperParams


def bounded_log_std(x, low, high):
    """log_std = low + (high - low) * (tanh(x) + 1) / 2: smooth, inside [low, high]."""
    return low + 0.5 * (high - low) * (jnp.tanh(x) + 1.0)


def _learning_steps(config: FastSACConfig, sample, q_net, prep, axis_name, action_size: int):
    """(critic_step, actor_step) of FastSAC for the policy's reparameterised `sample` and the
    twin C51 critic `q_net`, as `td3.delayed_updates` takes them."""

    networks, temperature = adamw(), adam()  # the temperature without weight decay

    def optimizer(hp, decay=True):
        return dict(optimizer=networks if decay else temperature, hp=hp, axis_name=axis_name)

    def critic_step(state: FastSACState, hp, obs_stats, batch: Transition, key):
        """One critic step (each critic on its own twin's soft target), the temperature's step
        on the same next-action sample, then the Polyak step of the target critics."""
        reward_sum, bootstrap = sequence_targets(batch, hp.discounting, config.n_step)
        obs, next_obs = prep(obs_stats, batch.obs), prep(obs_stats, batch.next_obs)
        alpha = jnp.exp(state.log_alpha)
        next_action, next_log_prob = sample(state.policy, next_obs,
                                            sharded_normal(key, (obs.shape[0], action_size), axis_name), hp)
        next_probs = jax.nn.softmax(q_net.apply(state.target_q, next_obs, next_action), axis=-1)  # [M, 2, K]
        reward = reward_sum * hp.reward_scaling - bootstrap * alpha * next_log_prob
        target = dist.project(next_probs, reward[:, None], bootstrap[:, None], hp.v_min, hp.v_max)
        q, q_opt, c_loss, probs = gradient_step(critic_loss, state.q, state.q_opt, q_net.apply, obs, batch.action,
                                                target, **optimizer(hp))
        target_entropy = -action_size * hp.target_entropy_ratio

        def temperature_loss(log_alpha):
            return -jnp.mean(jnp.exp(log_alpha) * jax.lax.stop_gradient(next_log_prob + target_entropy)), None

        log_alpha, alpha_opt, a_loss, _ = gradient_step(temperature_loss, state.log_alpha, state.alpha_opt,
                                                        **optimizer(hp, decay=False))
        q_mean = jnp.mean(dist.mean(probs, hp.v_min, hp.v_max))
        new = state.replace(q=q, q_opt=q_opt, target_q=polyak(state.target_q, q, hp.tau), log_alpha=log_alpha,
                            alpha_opt=alpha_opt, step=state.step + 1)
        return new, {"critic": c_loss, "q": pmean(q_mean, axis_name), "alpha": alpha, "alpha_loss": a_loss,
                     "entropy": pmean(-jnp.mean(next_log_prob), axis_name)}

    def actor_loss(policy_params, q_params, obs, noise, alpha, hp):
        """mean_m (alpha * log pi(a_m|s_m) - mean_k E[Z_k(s_m, a_m)])."""
        action, log_prob = sample(policy_params, obs, noise, hp)
        q = dist.mean(jax.nn.softmax(q_net.apply(q_params, obs, action), axis=-1), hp.v_min, hp.v_max)
        return jnp.mean(alpha * log_prob - jnp.mean(q, axis=-1)), None

    def actor_step(state: FastSACState, hp, obs_stats, batch: Transition, key):
        obs = prep(obs_stats, batch.obs)
        noise = sharded_normal(jax.random.fold_in(key, 1), (obs.shape[0], action_size), axis_name)  # not the critic's
        policy, policy_opt, p_loss, _ = gradient_step(actor_loss, state.policy, state.policy_opt, state.q, obs, noise,
                                                      jnp.exp(state.log_alpha), hp, **optimizer(hp))
        return state.replace(policy=policy, policy_opt=policy_opt), p_loss

    return critic_step, actor_step


def make_fastsac(config: FastSACConfig, spec: EnvSpec, axis_name: str | None = None,
                 budget: Budget = Budget(1)) -> Agent:
    """axis_name: the device axis inside `shard_map`; gradients are averaged over it."""
    action_size = spec.action_size
    policy_net = nets.MLP(config.policy_hidden_sizes, 2 * action_size, config.activation, out_scale=0.0,
                          matmul_dtype=config.matmul_dtype, layer_norm=True, inputs=obs_inputs(config, spec))
    q_net = nets.QNetwork(config.value_hidden_sizes, config.activation, num_heads=2, head_size=config.num_atoms,
                          matmul_dtype=config.matmul_dtype, layer_norm=True, inputs=obs_inputs(config, spec, "critic"))
    prep = prep_fn(config.normalize_observations, config.obs_clip)
    low = jnp.asarray(spec.action_low, jnp.float32)
    high = jnp.asarray(spec.action_high, jnp.float32)

    def sample(policy, obs, noise, hp):
        """(a = tanh(u) in [-1, 1], log pi(a)), u ~ N(loc, std) reparameterised by noise [M, A]."""
        loc, x = jnp.split(policy_net.apply(policy, obs), 2, axis=-1)
        std = jnp.exp(bounded_log_std(x, hp.log_std_min, hp.log_std_max))
        u = loc + std * noise
        return jnp.tanh(u), nets.tanh_normal_log_prob(u, loc, std)

    def init(key, hp=None):
        policy, q = init_networks(key, policy_net, q_net, spec)
        hp = hyper_params(config, hp)
        log_alpha = jnp.log(hp.init_alpha)
        networks, temperature = adamw(), adam()
        return FastSACState(policy=policy, q=q, target_q=q, log_alpha=log_alpha, policy_opt=networks.init(policy, hp),
                            q_opt=networks.init(q, hp), alpha_opt=temperature.init(log_alpha, hp),
                            step=jnp.zeros((), jnp.int32), hp=hp)

    def act(state: FastSACState, obs_stats, obs, key, deterministic=False, carry=None):
        obs = prep(obs_stats, obs)
        if deterministic:
            action = jnp.tanh(jnp.split(policy_net.apply(state.policy, obs), 2, axis=-1)[0])
        else:
            action, _ = sample(state.policy, obs, jax.random.normal(key, (obs.shape[0], action_size)), state.hp)
        return nets.scale_action(action, low, high), action, carry

    critic_step, actor_step = _learning_steps(config, sample, q_net, prep, axis_name, action_size)
    return delayed_agent(config, config.policy_delay, critic_step, actor_step, init=init, act=act,
                         explore=explore_continuous(spec))


AGENT = AgentDef(name="fastsac", about="FastSAC: SAC with FastTD3's C51 twin critics, n-step returns and AdamW",
                 config=FastSACConfig, make=make_fastsac, actions=("continuous",), defaults=DEFAULTS)
