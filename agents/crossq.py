"""CrossQ (arXiv:1902.05605, "CrossQ: Batch Normalization in Deep Reinforcement Learning for
Greater Sample Efficiency and Simplicity"): SAC without target networks, its critic and actor
batch-renormalised.

- The twin critics see the current and the next observations in ONE forward pass: the batch
  [s; s'] with actions [a; a' ~ pi(s')], so their batch statistics are those of both (a
  separate pass over s' alone would normalise it with statistics the training pass never
  sees). The target is the soft TD target of the pass's second half, without gradient.
- No target networks: the bootstrap is the current critics' value.
- Batch renormalisation (`networks.BatchRenorm`) after the input and after every hidden
  activation of both networks; its running statistics are the agent's state beside its
  parameters and optimizer state, averaged over the devices with the gradients. Acting, and
  the critic valued in the actor's loss, read the running statistics.
- Adam with beta1 0.5, the actor (and the temperature) stepped every `policy_delay` critic
  steps, wide critics (2 x 2048) and one gradient step per environment step.
"""

from __future__ import annotations

from typing import Literal

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax import struct

from agents import networks as nets
from sim.core.contract import Agent, AgentDef, Budget, ConfigError, Transition
from agents.common import explore_continuous, gradient_step, obs_inputs, pmean, prep_fn, sharded_normal
from agents.config import Critic, HyperParams, ReplayConfig, agent_config, hparam, hyper_params
from agents.defaults.crossq import DEFAULTS
from agents.offpolicy import q_example
from agents.optim import adam
from agents.sac import alpha_loss, soft_td_target, squashed_sample
from agents.td3 import delayed_agent
from envs.base import EnvSpec


@agent_config
class CrossQConfig(Critic, ReplayConfig):
    """CrossQ's hyper-parameters (the defaults: its paper's)."""

    policy_hidden_sizes: tuple[int, ...] = (256, 256)
    """Hidden layer sizes of the policy network."""
    value_hidden_sizes: tuple[int, ...] = (2048, 2048)
    """Hidden layer sizes of each Q network."""
    activation: Literal["swish", "tanh", "relu", "elu"] = "relu"
    """Hidden-layer activation."""
    learning_rate: float = hparam(1e-3)
    """Learning rate of the actor, the critics and the temperature (Adam)."""
    adam_b1: float = 0.5
    """Adam's beta1 (the first moment's decay) of all three optimizers."""
    init_alpha: float = hparam(1.0)
    """Initial entropy temperature (learned towards the target entropy -action_dims)."""
    policy_delay: int = 3
    """Update the policy and the temperature every this many critic updates."""
    batch_norm_momentum: float = 0.99
    """Decay of the batch renormalisation layers' running statistics."""
    renorm_warmup_steps: int = 100_000
    """Updates of a batch renormalisation layer before it corrects the batch statistics towards the running ones (batch normalisation until then)."""

    def positive_fields(self):
        return (*super().positive_fields(), "policy_delay")

    def validate(self, num_envs: int) -> None:
        super().validate(num_envs)
        if self.init_alpha <= 0:
            raise ConfigError("init-alpha", f"must be > 0, got {self.init_alpha}")
        if not 0.0 <= self.adam_b1 < 1.0:
            raise ConfigError("adam-b1", f"must be in [0, 1), got {self.adam_b1}")
        if not 0.0 <= self.batch_norm_momentum < 1.0:
            raise ConfigError("batch-norm-momentum", f"must be in [0, 1), got {self.batch_norm_momentum}")
        if self.renorm_warmup_steps < 0:
            raise ConfigError("renorm-warmup-steps", f"must be >= 0, got {self.renorm_warmup_steps}")


@struct.dataclass
class CrossQState:
    policy: dict  # {"params": ...}
    policy_stats: dict  # the policy's batch renormalisation statistics
    q: dict  # {"params": ...}
    q_stats: dict  # the twin critics'
    log_alpha: jax.Array
    policy_opt: optax.OptState
    q_opt: optax.OptState
    alpha_opt: optax.OptState
    step: jax.Array  # int32 critic updates done
    hp: HyperParams


class RenormMLP(nn.Module):
    """Batch renormalisation of the input, then Dense -> activation -> batch renormalisation per
    hidden layer, then the output layer. [B..., I] -> [B..., out_size]."""

    hidden_sizes: tuple[int, ...]
    out_size: int
    activation: str
    train: bool
    norm: tuple  # BatchRenorm's (momentum, warmup_steps, axis_name)
    matmul_dtype: str = "float32"
    out_scale: float = 1.0

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        momentum, warmup, axis_name = self.norm
        renorm = lambda: nets.BatchRenorm(self.train, momentum, warmup_steps=warmup, axis_name=axis_name)  # noqa: E731
        precision = nets.PRECISION[self.matmul_dtype]
        x = renorm()(x)
        for i, size in enumerate(self.hidden_sizes):
            dot = nets.bf16_dot_general if i > 0 and self.matmul_dtype == "bfloat16" else None
            x = nn.Dense(size, kernel_init=nn.initializers.lecun_uniform(), dot_general=dot, precision=precision)(x)
            x = renorm()(nets.ACTIVATIONS[self.activation](x))
        init = nn.initializers.variance_scaling(self.out_scale, "fan_in", "uniform")
        return nn.Dense(self.out_size, kernel_init=init, precision=precision)(x)


class TwinCritic(nn.Module):
    """Two `RenormMLP` Q networks, each with its own parameters and statistics:
    (obs [B, O], action [B, A]) -> Q [B, 2]."""

    hidden_sizes: tuple[int, ...]
    activation: str
    train: bool
    norm: tuple
    matmul_dtype: str = "float32"
    inputs: tuple | None = None

    @nn.compact
    def __call__(self, obs: jax.Array, action: jax.Array) -> jax.Array:
        twins = nn.vmap(RenormMLP, variable_axes={"params": 0, "batch_stats": 0}, split_rngs={"params": True},
                        in_axes=None, out_axes=-2, axis_size=2)
        x = jnp.concatenate([nets.take(obs, self.inputs), action], axis=-1)
        return twins(self.hidden_sizes, 1, self.activation, self.train, self.norm, self.matmul_dtype, name="twins")(
            x)[..., 0]


def _learning_steps(critic: dict, policy_raw, prep, optimizer, axis_name, size: int):
    """(critic_step, actor_step) of CrossQ as `td3.delayed_updates` takes them: `critic` its
    twin critics {train: module}, `policy_raw(state, obs, train)` the policy's raw output."""

    def critic_step(state: CrossQState, hp, obs_stats, batch: Transition, key):
        """One step of the twin critics on [s; s'] in one pass (see the module docstring)."""
        obs, next_obs = prep(obs_stats, batch.obs), prep(obs_stats, batch.next_obs)
        alpha = jnp.exp(state.log_alpha)
        next_action, next_log_prob = squashed_sample(policy_raw(state, next_obs),
                                                     sharded_normal(key, (obs.shape[0], size), axis_name))

        def loss(q_params):
            both, stats = critic[True].apply({**q_params, "batch_stats": state.q_stats},
                                             jnp.concatenate([obs, next_obs]),
                                             jnp.concatenate([batch.action, next_action]), mutable=["batch_stats"])
            q, next_q = jnp.split(both, 2)  # [M, 2] each
            target = soft_td_target(batch.reward, batch.terminated, next_q, next_log_prob, alpha, hp.discounting,
                                    hp.reward_scaling)
            error = q - jax.lax.stop_gradient(target)[:, None]
            return 0.5 * jnp.mean(jnp.sum(jnp.square(error), axis=-1)), (jnp.mean(q), stats["batch_stats"])

        q, q_opt, c_loss, (q_mean, q_stats) = gradient_step(loss, state.q, state.q_opt, optimizer=optimizer, hp=hp,
                                                            axis_name=axis_name)
        new = state.replace(q=q, q_stats=q_stats, q_opt=q_opt, step=state.step + 1)
        return new, {"critic": c_loss, "q": pmean(q_mean, axis_name), "alpha": alpha}

    def actor_step(state: CrossQState, hp, obs_stats, batch: Transition, key):
        """One step of the actor against the critics (their running statistics), then the
        temperature's on the actor's own sample."""
        obs = prep(obs_stats, batch.obs)
        noise = sharded_normal(jax.random.fold_in(key, 1), (obs.shape[0], size), axis_name)  # not the critic's
        alpha = jnp.exp(state.log_alpha)
        critics = {**state.q, "batch_stats": state.q_stats}

        def loss(policy_params):
            raw, stats = policy_raw(state.replace(policy=policy_params), obs, train=True)
            action, log_prob = squashed_sample(raw, noise)
            q = jnp.min(critic[False].apply(critics, obs, action), axis=-1)
            return jnp.mean(alpha * log_prob - q), (log_prob, stats)

        policy, policy_opt, p_loss, (log_prob, stats) = gradient_step(loss, state.policy, state.policy_opt,
                                                                      optimizer=optimizer, hp=hp, axis_name=axis_name)
        log_alpha, alpha_opt, _, _ = gradient_step(alpha_loss, state.log_alpha, state.alpha_opt, log_prob, -float(size),
                                                   optimizer=optimizer, hp=hp, axis_name=axis_name)
        return state.replace(policy=policy, policy_stats=stats, policy_opt=policy_opt, log_alpha=log_alpha,
                             alpha_opt=alpha_opt), p_loss

    return critic_step, actor_step


def make_crossq(config: CrossQConfig, spec: EnvSpec, axis_name: str | None = None, budget: Budget = Budget(1)) -> Agent:
    """axis_name: the device axis inside `shard_map`; gradients and batch statistics are
    averaged over it."""
    size = spec.action_size
    norm = (config.batch_norm_momentum, config.renorm_warmup_steps, axis_name)
    actor = {train: RenormMLP(config.policy_hidden_sizes, 2 * size, config.activation, train, norm,
                              config.matmul_dtype, out_scale=0.01) for train in (True, False)}
    critic = {train: TwinCritic(config.value_hidden_sizes, config.activation, train, norm, config.matmul_dtype,
                                obs_inputs(config, spec, "critic")) for train in (True, False)}
    policy_inputs = obs_inputs(config, spec)
    prep = prep_fn(config.normalize_observations, config.obs_clip)
    optimizer = adam(b1=config.adam_b1)
    low = jnp.asarray(spec.action_low, jnp.float32)
    high = jnp.asarray(spec.action_high, jnp.float32)

    def policy_raw(state: CrossQState, obs, train=False):
        """The policy's raw output [B, 2A] from the running statistics (train: the batch's,
        returned updated)."""
        variables = {**state.policy, "batch_stats": state.policy_stats}
        out = actor[train].apply(variables, nets.take(obs, policy_inputs), mutable=["batch_stats"] if train else False)
        return (out[0], out[1]["batch_stats"]) if train else out

    def init(key, hp=None):
        policy_key, q_key = jax.random.split(key)
        obs, action = q_example(spec)
        policy = actor[False].init(policy_key, nets.take(obs, policy_inputs))
        q = critic[False].init(q_key, obs, action)
        policy_stats, q_stats = policy["batch_stats"], q["batch_stats"]
        hp = hyper_params(config, hp)
        log_alpha = jnp.log(hp.init_alpha)
        policy, q = {"params": policy["params"]}, {"params": q["params"]}
        return CrossQState(policy=policy, policy_stats=policy_stats, q=q, q_stats=q_stats, log_alpha=log_alpha,
                           policy_opt=optimizer.init(policy, hp), q_opt=optimizer.init(q, hp),
                           alpha_opt=optimizer.init(log_alpha, hp), step=jnp.zeros((), jnp.int32), hp=hp)

    def act(state: CrossQState, obs_stats, obs, key, deterministic=False, carry=None):
        raw = policy_raw(state, prep(obs_stats, obs))
        if deterministic:
            action = jnp.tanh(nets.tanh_normal_params(raw)[0])
        else:
            action, _ = squashed_sample(raw, jax.random.normal(key, (obs.shape[0], size)))
        return nets.scale_action(action, low, high), action, carry

    critic_step, actor_step = _learning_steps(critic, policy_raw, prep, optimizer, axis_name, size)
    return delayed_agent(config, config.policy_delay, critic_step, actor_step, init=init, act=act,
                         explore=explore_continuous(spec))


AGENT = AgentDef(name="crossq", about="CrossQ: SAC with batch-renormalised critics that see s and s' in one pass, "
                                      "no target networks", config=CrossQConfig, make=make_crossq,
                 actions=("continuous",), defaults=DEFAULTS)
