"""TD3 (arXiv:1802.09477) and DDPG (arXiv:1509.02971), declared once.

TD3 is DDPG with three tricks: twin Q (min of two critics), target policy smoothing
(`target_noise`), delayed policy and target updates (`policy_delay`). DDPG is this agent
with the three off; its config has no flags for them.

Where `policy_delay` divides `grad_updates_per_step`, `update` does one delay period:
`policy_delay` critic steps on as many replay batches, then one actor step and the Polyak
target update (`updates_per_call`). Otherwise it does one critic step and, every
`policy_delay` calls, keeps an actor step computed at every call. Neither takes a branch.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from flax import struct

from agents import networks as nets
from sim.core.contract import Agent, AgentDef, Budget, ConfigError, Transition, Weighted
from agents.common import explore_continuous, gradient_step, obs_inputs, pmean, polyak, prep_fn, sharded_normal
from agents.config import HyperParams, TargetNetworks, agent_config, bind, hparam, hyper_params
from agents.defaults.sac import DEFAULTS
from agents.offpolicy import ActorCriticReplayConfig, init_networks, q_regression_loss
from agents.optim import Optimizer, adam
from envs.base import EnvSpec


@agent_config
class DDPGConfig(TargetNetworks, ActorCriticReplayConfig):
    """DDPG's hyper-parameters."""

    exploration_noise: float = hparam(0.1)
    """Std of the Gaussian exploration noise on actions in [-1, 1]."""


@agent_config
class TD3Config(DDPGConfig):
    """TD3's hyper-parameters: DDPG's and its three tricks."""

    policy_delay: int = 2
    """Update the policy and targets every this many critic updates."""
    target_noise: float = hparam(0.2)
    """Std of the target policy smoothing noise."""
    target_noise_clip: float = hparam(0.5)
    """Clip of the target policy smoothing noise."""

    def positive_fields(self):
        return (*super().positive_fields(), "policy_delay")

    def validate(self, num_envs: int) -> None:
        super().validate(num_envs)
        if self.target_noise < 0 or self.target_noise_clip < 0:
            raise ConfigError("target-noise", "the noise and its clip must be >= 0")


@struct.dataclass
class TD3State:
    policy: dict
    target_policy: dict
    q: dict
    target_q: dict
    policy_opt: optax.OptState
    q_opt: optax.OptState
    step: jax.Array  # int32 critic updates done
    hp: HyperParams  # the shape-free hyper-parameters as float32 leaves


def td_target(reward, terminated, next_q, discount, reward_scaling):
    """y = reward_scaling * r + discount * (1 - terminated) * min_k Q'_k(s', mu'(s')). next_q [M, K] -> [M]."""
    return reward * reward_scaling + discount * (1.0 - terminated) * jnp.min(next_q, axis=-1)


def smoothed_action(action, noise, noise_scale, noise_clip):
    """Target policy smoothing: clip(a + clip(noise_scale * noise, -noise_clip, noise_clip), -1, 1)."""
    return jnp.clip(action + jnp.clip(noise_scale * noise, -noise_clip, noise_clip), -1.0, 1.0)


def actor_loss(policy_params, q_params, obs, apply_pi, apply_q):
    """-mean_m Q_1(s_m, mu(s_m)): the first critic's value of the deterministic policy."""
    return -jnp.mean(apply_q(q_params, obs, apply_pi(policy_params, obs))[..., 0]), None


def _learning_steps(pi, q_net, q1_net, prep, optimizer: Optimizer, axis_name, smoothing: bool):
    """(critic_step, actor_step) of TD3/DDPG for the policy `pi` and the critic `q_net` (`q1_net`:
    its first head alone)."""

    def critic_step(state: TD3State, hp, obs_stats, batch: Transition, key):
        """One critic step on a batch: (state with the new q and q_opt, its metrics)."""
        obs, next_obs = prep(obs_stats, batch.obs), prep(obs_stats, batch.next_obs)
        next_action = pi(state.target_policy, next_obs)
        if smoothing:
            next_action = smoothed_action(next_action, sharded_normal(key, next_action.shape, axis_name),
                                          hp.target_noise, hp.target_noise_clip)
        target = td_target(batch.reward, batch.terminated, q_net.apply(state.target_q, next_obs, next_action),
                           hp.discounting, hp.reward_scaling)
        q, q_opt, c_loss, q_mean = gradient_step(q_regression_loss, state.q, state.q_opt, q_net.apply, obs,
                                                 batch.action, target, optimizer=optimizer, hp=hp, axis_name=axis_name)
        return state.replace(q=q, q_opt=q_opt, step=state.step + 1), {"critic": c_loss,
                                                                     "q": pmean(q_mean, axis_name)}

    def actor_step(state: TD3State, hp, obs_stats, batch: Transition, key=None):
        """One actor step against the current critic, then the Polyak target update."""
        # Q_1 alone: the twin heads are one vmapped MLP, whose batched matmuls XLA does not cut
        # to the first head, so the whole critic would compute and differentiate both (with
        # 64-wide layers on a CPU, 16% of TD3's iteration).
        q1 = jax.tree.map(lambda p: p[:1], state.q)
        policy, policy_opt, p_loss, _ = gradient_step(actor_loss, state.policy, state.policy_opt, q1,
                                                      prep(obs_stats, batch.obs), pi, q1_net.apply, optimizer=optimizer,
                                                      hp=hp, axis_name=axis_name)
        return state.replace(policy=policy, policy_opt=policy_opt,
                             target_policy=polyak(state.target_policy, policy, hp.tau),
                             target_q=polyak(state.target_q, state.q, hp.tau)), p_loss

    return critic_step, actor_step


def delayed_updates(config, policy_delay: int, critic_step, actor_step):
    """(update, update_group): one gradient step per call, or a delay period's at once.
    critic_step(state, hp, obs_stats, batch, key) and actor_step(state, hp, obs_stats, batch,
    key): the actor step gets its critic step's key (an actor that samples folds it first)."""

    def update(state: TD3State, obs_stats, batch: Transition, key):
        """One critic step and, where due, the actor's: computed every step and kept where due
        (a select, not a branch: XLA on a GPU reads a conditional's predicate on the host)."""
        hp = bind(config, state.hp)
        state, metrics = critic_step(state, hp, obs_stats, batch, key)
        due = state.step % policy_delay == 0
        stepped, p_loss = actor_step(state, hp, obs_stats, batch, key)
        if policy_delay > 1:
            state = jax.tree.map(lambda a, b: jnp.where(due, a, b), stepped, state)
            p_loss = jnp.where(due, p_loss, 0.0)  # weight 0: the engine averages real actor steps only
        else:
            state = stepped
        return state, dict(metrics, actor=Weighted(p_loss, due.astype(jnp.float32)))

    def update_group(state: TD3State, obs_stats, batches: Transition, keys):
        """`policy_delay` gradient steps on batches [policy_delay, M]: a critic step on each,
        then the actor's on the last. Metrics [policy_delay]. No branch, no wasted actor step."""
        hp = bind(config, state.hp)

        def critic(state, batch_key):
            return critic_step(state, hp, obs_stats, *batch_key)

        state, metrics = jax.lax.scan(critic, state, (batches, keys))
        state, p_loss = actor_step(state, hp, obs_stats, jax.tree.map(lambda x: x[-1], batches), keys[-1])
        last = jnp.arange(policy_delay) == policy_delay - 1
        return state, dict(metrics, actor=Weighted(jnp.where(last, p_loss, 0.0), last.astype(jnp.float32)))

    return update, update_group


def make_actor_critic(config: DDPGConfig, spec: EnvSpec, axis_name: str | None, budget: Budget, *, twin: bool,
                      policy_delay: int, smoothing: bool) -> Agent:
    """axis_name: the device axis inside `shard_map`; gradients are averaged over it."""
    policy_net = nets.MLP(config.policy_hidden_sizes, spec.action_size, config.activation,
                          matmul_dtype=config.matmul_dtype, inputs=obs_inputs(config, spec))
    q_net = nets.QNetwork(config.value_hidden_sizes, config.activation, num_heads=2 if twin else 1,
                          matmul_dtype=config.matmul_dtype, layer_norm=config.q_network_layer_norm,
                          inputs=obs_inputs(config, spec, "critic"))
    q1_net = q_net.clone(num_heads=1)  # the first head's parameters alone
    prep = prep_fn(config.normalize_observations, config.obs_clip)
    low = jnp.asarray(spec.action_low, jnp.float32)
    high = jnp.asarray(spec.action_high, jnp.float32)
    optimizer = adam()

    def pi(params, obs):
        return jnp.tanh(policy_net.apply(params, obs))

    def init(key, hp=None):
        policy, q = init_networks(key, policy_net, q_net, spec)
        hp = hyper_params(config, hp)
        return TD3State(policy=policy, target_policy=policy, q=q, target_q=q, policy_opt=optimizer.init(policy, hp),
                        q_opt=optimizer.init(q, hp), step=jnp.zeros((), jnp.int32), hp=hp)

    def act(state: TD3State, obs_stats, obs, key, deterministic=False, carry=None):
        action = pi(state.policy, prep(obs_stats, obs))
        if not deterministic:
            noise = state.hp.exploration_noise * jax.random.normal(key, action.shape)
            action = jnp.clip(action + noise, -1.0, 1.0)
        return nets.scale_action(action, low, high), action, carry

    critic_step, actor_step = _learning_steps(pi, q_net, q1_net, prep, optimizer, axis_name, smoothing)
    return delayed_agent(config, policy_delay, critic_step, actor_step, init=init, act=act,
                         explore=explore_continuous(spec))


def delayed_agent(config, policy_delay: int, critic_step, actor_step, **functions) -> Agent:
    """The `Agent` of a delayed actor (`delayed_updates`), with its other `functions`. Where
    every iteration's gradient steps fill whole delay periods, the engine hands the update a
    period's batches at once: the delayed actor step then comes at a fixed place."""
    update, update_group = delayed_updates(config, policy_delay, critic_step, actor_step)
    if policy_delay > 1 and config.grad_updates_per_step % policy_delay == 0:
        return Agent(update=update_group, updates_per_call=policy_delay, **functions)
    return Agent(update=update, **functions)


def make_td3(config: TD3Config, spec: EnvSpec, axis_name: str | None = None, budget: Budget = Budget(1)) -> Agent:
    return make_actor_critic(config, spec, axis_name, budget, twin=True, policy_delay=config.policy_delay,
                             smoothing=True)


def make_ddpg(config: DDPGConfig, spec: EnvSpec, axis_name: str | None = None, budget: Budget = Budget(1)) -> Agent:
    return make_actor_critic(config, spec, axis_name, budget, twin=False, policy_delay=1, smoothing=False)


TD3 = AgentDef(name="td3", about="Twin Delayed DDPG", config=TD3Config, make=make_td3, actions=("continuous",),
               defaults=DEFAULTS)
DDPG = AgentDef(name="ddpg", about="Deep Deterministic Policy Gradient (TD3 without its three tricks)",
                config=DDPGConfig, make=make_ddpg, actions=("continuous",), defaults=DEFAULTS)
