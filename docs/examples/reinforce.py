"""A worked example of adding an agent: REINFORCE with a learned value baseline, on the
unroll loop. Copied to agents/reinforce.py and registered with one line in agents/__init__.py
(`"agents.reinforce:AGENT"`), it trains as `python train.py --env cartpole --agent reinforce`;
tests/test_docs.py registers it from here and trains it.

Each iteration hands `update` the unrolls' steps [T, N]; the agent computes each step's
discounted return to the unroll's end (bootstrapped from its value there), and takes one
gradient step on -log pi(a|s) (G - V(s)) + value_coef (G - V(s))^2 - entropy_cost H[pi].
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from flax import struct

from agents import networks as nets
from agents import returns
from sim.core.contract import Agent, AgentDef, Budget, Step
from agents.common import gradient_step, policy_head, prep_fn
from agents.config import HyperParams, UnrollConfig, agent_config, bind, hparam, hyper_params
from agents.optim import adam


@agent_config
class ReinforceConfig(UnrollConfig):
    """REINFORCE's hyper-parameters (the sizes of an iteration are the unroll loop's)."""

    hidden_sizes: tuple[int, ...] = (64, 64)
    """Hidden layer sizes of the policy and of the value network."""
    value_coef: float = hparam(0.5)
    """Weight of the baseline's squared error."""
    entropy_cost: float = hparam(0.01)
    """Weight of the entropy bonus."""


@struct.dataclass
class ReinforceState:
    params: dict  # {"policy": ..., "value": ...}
    opt_state: optax.OptState
    hp: HyperParams


def make_reinforce(config: ReinforceConfig, spec, axis_name: str | None = None, budget: Budget = Budget(1)) -> Agent:
    head = policy_head(spec)
    policy_net = nets.MLP(config.hidden_sizes, head.out_size, config.activation, out_scale=0.01)
    value_net = nets.MLP(config.hidden_sizes, 1, config.activation)
    prep = prep_fn(config.normalize_observations, config.obs_clip)
    optimizer = adam()

    def init(key, hp=None):
        policy_key, value_key = jax.random.split(key)
        dummy = jnp.zeros((1,) + spec.obs_shape, jnp.float32)
        params = {"policy": policy_net.init(policy_key, dummy), "value": value_net.init(value_key, dummy)}
        hp = hyper_params(config, hp)
        return ReinforceState(params=params, opt_state=optimizer.init(params, hp), hp=hp)

    def act(state, obs_stats, obs, key, deterministic=False, carry=None):
        raw = policy_net.apply(state.params["policy"], prep(obs_stats, obs))
        action = head.mode(raw) if deterministic else head.sample(raw, key)
        return head.to_env(action), action, carry  # the stored action is what the loss reads

    def loss(params, obs, action, target, key, hp):
        raw = policy_net.apply(params["policy"], obs)
        value = value_net.apply(params["value"], obs)[..., 0]
        advantage = jax.lax.stop_gradient(target - value)
        policy_loss = -jnp.mean(head.log_prob(raw, action) * advantage)
        entropy = jnp.mean(head.entropy(raw, key, axis_name))
        total = policy_loss + hp.value_coef * jnp.mean(jnp.square(target - value)) - hp.entropy_cost * entropy
        return total, {"policy": policy_loss, "entropy": entropy}

    def update(state, obs_stats, data: Step, key):
        hp = bind(config, state.hp)
        obs, next_obs = prep(obs_stats, data.obs), prep(obs_stats, data.next_obs)
        v_tp1 = value_net.apply(state.params["value"], next_obs)[..., 0]
        steps = returns.episode_discounts(data.terminated, data.truncated, hp.discounting, 1.0)
        target = returns.over_envs(returns.lambda_returns, data.reward * hp.reward_scaling, v_tp1, *steps)
        flat = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), (obs, data.acted, target))
        params, opt_state, total, metrics = gradient_step(loss, state.params, state.opt_state, *flat, key, hp,
                                                          optimizer=optimizer, hp=hp, axis_name=axis_name)
        return state.replace(params=params, opt_state=opt_state), dict(metrics, total=total)

    return Agent(init=init, act=act, update=update)


AGENT = AgentDef(name="reinforce", about="REINFORCE with a value baseline (a worked example)", config=ReinforceConfig,
                 make=make_reinforce, actions=("discrete", "continuous"),
                 defaults={"cartpole": dict(num_envs=32, unroll_length=64, batch_size=32, num_minibatches=1,
                                            total_steps=300_000, learning_rate=3e-3, normalize_observations=False,
                                            episode_length=500, max_grad_norm=0.5)})
