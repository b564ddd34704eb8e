"""Short-Horizon Actor-Critic (arXiv:2204.07137): analytic policy gradients through the
simulator over short horizons, each unroll's tail valued by a learned critic.

The policy's loss is minus the discounted rewards of an unroll of `horizon_length` steps of
every env plus the discounted value of where each episode segment ends (the horizon's end,
or a time limit: the target critic's value of the state reached, a function of the policy's
parameters through the env's step; nothing after a termination), averaged over steps and
envs, and differentiated through the env (`agents.apg`'s unroll and optimizer). The critic
then regresses TD(lambda) targets of the same (now fixed) unroll, computed with the target
critic, for `critic_iterations` passes of `critic_minibatches` minibatches; the target critic
follows it by Polyak averaging (SHAC's target_critic_alpha is 1 - tau).
"""

from __future__ import annotations

from typing import Literal

import jax
import jax.numpy as jnp
import optax
from flax import struct

from agents import networks as nets
from agents import returns
from agents.apg import APGConfig, decayed_lr, make_policy, policy_step
from sim.core.contract import Agent, AgentDef, Budget, ConfigError, Differentiable
from agents.common import annealed, gradient_step, obs_inputs, pmean, polyak, prep_fn, scan_minibatches
from agents.config import Critic, HyperParams, TargetNetworks, agent_config, bind, hparam, hyper_params
from agents.defaults.differentiable import SHAC_DEFAULTS
from agents.optim import adam
from envs.base import EnvSpec


@struct.dataclass
class SHACState:
    policy: dict
    value: dict
    target_value: dict
    opt_state: optax.OptState  # the policy's
    value_opt_state: optax.OptState
    hp: HyperParams


@agent_config
class SHACConfig(Critic, TargetNetworks, APGConfig):
    """SHAC's hyper-parameters (its paper's names where brax.training has none)."""

    learning_rate: float = hparam(2e-3)
    """Adam learning rate of the policy and the critic."""
    lr_decay: float = hparam(1.0)
    """The policy's learning rate is multiplied by this after every update (1: no exponential decay; --anneal-lr decays linearly)."""
    anneal_lr: bool = True
    """Linearly anneal both learning rates to zero over the run (SHAC's schedule)."""
    gae_lambda: float = hparam(0.95)
    """Lambda of the critic's TD(lambda) targets."""
    tau: float = hparam(0.8)
    """Polyak averaging rate of the target critic, after each critic update (SHAC's target_critic_alpha 0.2 is tau 0.8)."""
    critic_iterations: int = 16
    """Passes of the critic's regression over each unroll's steps."""
    critic_minibatches: int = 4
    """Minibatches per pass of the critic's regression."""
    policy_hidden_sizes: tuple[int, ...] = (64, 64)
    """Hidden layer sizes of the policy network."""
    value_hidden_sizes: tuple[int, ...] = (64, 64)
    """Hidden layer sizes of the critic network."""
    activation: Literal["swish", "tanh", "relu", "elu"] = "elu"
    """Hidden-layer activation."""
    action_noise: float = 1.0
    """Scale of the policy's exploration noise: its Gaussian's standard deviation is multiplied by this."""

    def positive_fields(self):
        return (*super().positive_fields(), "critic_iterations", "critic_minibatches")

    def validate(self, num_envs: int) -> None:
        super().validate(num_envs)
        if not 0.0 <= self.gae_lambda <= 1.0:
            raise ConfigError("gae-lambda", f"must be in [0.0, 1.0], got {self.gae_lambda}")
        if (num_envs * self.horizon_length) % self.critic_minibatches:
            raise ConfigError("critic-minibatches", f"must divide num_envs x horizon_length = "
                                                    f"{num_envs * self.horizon_length} steps")


def segment_weights(ends: jax.Array, discount) -> jax.Array:
    """[T, N] the discount of each step within its episode segment of the unroll: 1 at the
    unroll's first step and after an episode's end, times `discount` per step after."""
    def step(weight, end):
        return jnp.where(end > 0, 1.0, weight * discount), weight

    return jax.lax.scan(step, jnp.ones_like(ends[0]), ends)[1]


def short_horizon_loss(reward, terminated, truncated, next_value, discount) -> jax.Array:
    """SHAC's policy loss on an unroll [T, N]: minus the mean over steps and envs of each
    segment's discounted rewards and discounted bootstrap `next_value` where it ends (an
    episode's end or the unroll's; none after a termination)."""
    ends = jnp.maximum(terminated, truncated)
    weight = segment_weights(ends, discount)
    bootstrap = ends.at[-1].set(1.0) * discount * (1.0 - terminated)
    return -jnp.sum(weight * (reward + bootstrap * next_value)) / reward.size


def critic_fit(config: SHACConfig, value, optimizer, total_steps: int, axis_name):
    """`fit(state, obs_stats, steps, key, hp) -> (state, mean loss)`: TD(lambda) targets of the
    unroll [T, N] from the target critic, `critic_iterations` passes of `critic_minibatches`
    minibatches regressing the critic on them, then the target critic's Polyak step."""

    def critic_loss(params, batch, obs_stats):
        obs, target = batch
        return 0.5 * jnp.mean(jnp.square(value(params, obs_stats, obs) - target)), {}

    def fit_critic(state: SHACState, obs_stats, steps, key, hp):
        v_t, v_tp1 = value(state.target_value, obs_stats, steps.obs), value(state.target_value, obs_stats,
                                                                                steps.next_obs)
        discount_t, lambda_t = returns.episode_discounts(steps.terminated, steps.truncated, hp.discounting,
                                                         hp.gae_lambda)
        _, target = returns.over_envs(returns.gae, steps.reward * hp.reward_scaling, v_t, v_tp1, discount_t, lambda_t)
        rows = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), (steps.obs, target))

        def minibatch_step(carry, batch):
            params, opt_state = carry
            lr = annealed(hp.learning_rate, opt_state, total_steps) if config.anneal_lr else hp.learning_rate
            params, opt_state, loss, _ = gradient_step(critic_loss, params, opt_state, batch, obs_stats,
                                                       optimizer=optimizer, hp=hp, axis_name=axis_name,
                                                       learning_rate=lr)
            return (params, opt_state), loss

        def one_pass(carry, pass_key):
            return scan_minibatches(minibatch_step, carry, rows, pass_key, config.critic_minibatches)

        (critic, opt_state), losses = jax.lax.scan(one_pass, (state.value, state.value_opt_state),
                                                   jax.random.split(key, config.critic_iterations))
        return state.replace(value=critic, value_opt_state=opt_state,
                             target_value=polyak(state.target_value, critic, hp.tau)), jnp.mean(losses)

    return fit_critic


def make_shac(config: SHACConfig, spec: EnvSpec, axis_name: str | None = None, budget: Budget = Budget(1)) -> Agent:
    policy = make_policy(config, spec)
    value_net = nets.MLP(config.value_hidden_sizes, 1, config.activation, matmul_dtype=config.matmul_dtype,
                         inputs=obs_inputs(config, spec, "critic"))
    prep = prep_fn(config.normalize_observations, config.obs_clip)
    actor_opt, critic_opt = adam(config.adam_b1, config.adam_b2), adam(config.adam_b1, config.adam_b2)
    critic_steps = budget.total_iterations * config.critic_iterations * config.critic_minibatches

    def value(params, obs_stats, obs):
        return value_net.apply(params, prep(obs_stats, obs))[..., 0]

    def init(key, hp=None):
        policy_key, value_key = jax.random.split(key)
        dummy = jnp.zeros((1,) + spec.obs_shape, jnp.float32)
        params, critic = policy.net.init(policy_key, dummy), value_net.init(value_key, dummy)
        hp = hyper_params(config, hp)
        return SHACState(policy=params, value=critic, target_value=critic, opt_state=actor_opt.init(params, hp),
                         value_opt_state=critic_opt.init(critic, hp), hp=hp)

    def act(state: SHACState, obs_stats, obs, key, deterministic=False, carry=None):
        action, u = policy.act(state.policy, obs_stats, obs, key, deterministic)
        return action, u, carry

    fit_critic = critic_fit(config, value, critic_opt, critic_steps, axis_name)

    def update(state: SHACState, obs_stats, data: Differentiable, key):
        """The policy's step through the env on the short-horizon loss, then the critic's fit."""
        hp = bind(config, state.hp)

        def loss(params):
            steps, after = data.unroll(state.replace(policy=params))
            next_value = value(state.target_value, obs_stats, steps.next_obs)
            return short_horizon_loss(steps.reward * hp.reward_scaling, steps.terminated, steps.truncated,
                                      next_value, hp.discounting), (steps, after)

        (policy_loss, (steps, after)), grads = jax.value_and_grad(loss, has_aux=True)(state.policy)
        lr = annealed(hp.learning_rate, state.opt_state, budget.total_iterations) if config.anneal_lr \
            else decayed_lr(hp, state.opt_state)
        params, opt_state, grad_norm = policy_step(actor_opt, state.policy, state.opt_state, grads, hp, axis_name, lr)
        state = state.replace(policy=params, opt_state=opt_state)
        state, value_loss = fit_critic(state, obs_stats, jax.lax.stop_gradient(steps), key, hp)
        metrics = {"policy": pmean(policy_loss, axis_name), "value": value_loss, "grad_norm": grad_norm}
        return state, metrics, jax.lax.stop_gradient(after)

    return Agent(init=init, act=act, update=update)


AGENT = AgentDef(name="shac", about="Short-Horizon Actor-Critic: gradients through the simulator, a learned critic",
                 config=SHACConfig, make=make_shac, actions=("continuous",), defaults=SHAC_DEFAULTS)
