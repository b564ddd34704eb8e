"""Analytic Policy Gradients: the policy's gradient taken through the simulator itself.

Every iteration steps every env `horizon_length` times under the policy (its actions
reparameterised samples of a tanh-squashed Gaussian) and follows the gradient of the mean
reward of those steps, back through each env step to the policy's parameters (Brax's
`apg` trainer's scheme: short unrolls, Adam with betas (0.7, 0.95), an exponentially decayed
learning rate, gradient clipping; envs continue from where each unroll left them, their
episodes staggered at the start). The env must be differentiable (the classic tasks, Brax's
physics backends, MJX's JAX implementation): rewards that do not depend smoothly on the
state (a constant alive bonus, a termination) give no gradient, and long horizons through
contacts give exploding ones; the gradient's norm is in the metrics (`loss/grad_norm`).
"""

from __future__ import annotations

from typing import Callable, Literal, NamedTuple, Optional

import jax
import jax.numpy as jnp
import optax
from flax import struct

from agents import networks as nets
from sim.core.contract import Agent, AgentDef, Budget, ConfigError, Differentiable
from agents.common import obs_inputs, pmean, prep_fn
from agents.config import HorizonConfig, HyperParams, agent_config, bind, hparam, hyper_params
from agents.defaults.differentiable import APG_DEFAULTS
from agents.optim import adam, steps_done
from envs.base import EnvSpec


@struct.dataclass
class APGState:
    policy: dict
    opt_state: optax.OptState
    hp: HyperParams


@agent_config
class APGConfig(HorizonConfig):
    """APG's hyper-parameters (brax.training's apg names where it has them)."""

    learning_rate: float = hparam(1e-3)
    """Adam learning rate of the first update (then decayed by --lr-decay per update)."""
    lr_decay: float = hparam(0.997)
    """The learning rate is multiplied by this after every update (exponential decay; 1: constant)."""
    max_grad_norm: Optional[float] = hparam(1.0)
    """Clip the policy's gradient to this global norm before Adam (None: no clipping; gradients through long horizons explode)."""
    adam_b1: float = 0.7
    """Adam's first-moment decay (Brax's APG: 0.7)."""
    adam_b2: float = 0.95
    """Adam's second-moment decay (Brax's APG: 0.95)."""
    policy_hidden_sizes: tuple[int, ...] = (32, 32, 32, 32)
    """Hidden layer sizes of the policy network."""
    activation: Literal["swish", "tanh", "relu", "elu"] = "elu"
    """Hidden-layer activation."""
    action_noise: float = 0.1
    """Scale of the policy's exploration noise: its Gaussian's standard deviation is multiplied by this (Brax's APG: 0.1)."""

    def validate(self, num_envs: int) -> None:
        super().validate(num_envs)
        if not 0.0 < self.lr_decay <= 1.0:
            raise ConfigError("lr-decay", f"must be in (0, 1], got {self.lr_decay}")
        if self.action_noise < 0:
            raise ConfigError("action-noise", f"must be >= 0, got {self.action_noise}")
        for name in ("adam_b1", "adam_b2"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ConfigError(name.replace("_", "-"), f"must be in [0, 1), got {getattr(self, name)}")


class Policy(NamedTuple):
    """A reparameterised tanh-Gaussian policy: `net` (an MLP of `policy_hidden_sizes`) and
    `act(params, obs_stats, obs, key, deterministic) -> (env action, stored action)`, the sample
    a differentiable function of the parameters."""

    net: nets.MLP
    act: Callable


def make_policy(config, spec: EnvSpec) -> Policy:
    if spec.discrete:
        raise ConfigError("agent", "differentiates through continuous actions; choose a continuous-action --env")
    net = nets.MLP(config.policy_hidden_sizes, 2 * spec.action_size, config.activation, out_scale=0.01,
                   matmul_dtype=config.matmul_dtype, layer_norm=True, inputs=obs_inputs(config, spec))
    low = jnp.asarray(spec.action_low, jnp.float32)
    high = jnp.asarray(spec.action_high, jnp.float32)
    prep = prep_fn(config.normalize_observations, config.obs_clip)

    def act(params, obs_stats, obs, key, deterministic=False):
        loc, std = nets.tanh_normal_params(net.apply(params, prep(obs_stats, obs)))
        u = loc if deterministic else loc + config.action_noise * std * jax.random.normal(key, loc.shape)
        return nets.scale_action(jnp.tanh(u), low, high), u

    return Policy(net, act)


def decayed_lr(hp, opt_state):
    """The learning rate after the optimizer's steps so far: learning_rate * lr_decay ** steps."""
    return hp.learning_rate * hp.lr_decay ** steps_done(opt_state).astype(jnp.float32)


def policy_step(optimizer, params, opt_state, grads, hp, axis_name, learning_rate):
    """Gradients averaged over the device axis -> one clipped Adam step; also their global norm
    before clipping."""
    grads = pmean(grads, axis_name)
    params, opt_state = optimizer.step(grads, opt_state, params, hp, learning_rate=learning_rate)
    return params, opt_state, optax.global_norm(grads)


def make_apg(config: APGConfig, spec: EnvSpec, axis_name: str | None = None, budget: Budget = Budget(1)) -> Agent:
    policy = make_policy(config, spec)
    optimizer = adam(config.adam_b1, config.adam_b2)

    def init(key, hp=None):
        params = policy.net.init(key, jnp.zeros((1,) + spec.obs_shape, jnp.float32))
        hp = hyper_params(config, hp)
        return APGState(policy=params, opt_state=optimizer.init(params, hp), hp=hp)

    def act(state: APGState, obs_stats, obs, key, deterministic=False, carry=None):
        action, u = policy.act(state.policy, obs_stats, obs, key, deterministic)
        return action, u, carry

    def update(state: APGState, obs_stats, data: Differentiable, key):
        """One step on the gradient of the unroll's mean reward, taken through the env."""
        hp = bind(config, state.hp)

        def loss(params):
            steps, after = data.unroll(state.replace(policy=params))
            return -jnp.mean(steps.reward) * hp.reward_scaling, after

        (value, after), grads = jax.value_and_grad(loss, has_aux=True)(state.policy)
        params, opt_state, grad_norm = policy_step(optimizer, state.policy, state.opt_state, grads, hp, axis_name,
                                                   decayed_lr(hp, state.opt_state))
        metrics = {"policy": pmean(value, axis_name), "grad_norm": grad_norm}
        return state.replace(policy=params, opt_state=opt_state), metrics, jax.lax.stop_gradient(after)

    return Agent(init=init, act=act, update=update)


AGENT = AgentDef(name="apg", about="Analytic Policy Gradients through the differentiable simulator",
                 config=APGConfig, make=make_apg, actions=("continuous",), defaults=APG_DEFAULTS)
