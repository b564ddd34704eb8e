"""The policy's side of a run: the env a policy is evaluated on, the agent that acts, and
the compiled evaluation programs. `play` builds only this (no loop, no replay ring); the
engine builds its training programs on top of it."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

import envs
from sim.core.contract import Agent, Budget
from envs.sim2real import Bounded, SimToReal
from envs.wrappers import ActionRepeat
from sim.core import rollout
from sim.core.spec import CoreSpec, Sizes


PRECISIONS = ("highest", "high", "default")  # --matmul-precision's choices


def at_precision(fn, precision: str = "highest"):
    """`fn` traced under `jax.default_matmul_precision(precision)`: the matmuls of the physics,
    the losses, everything but the network layers, whose `--matmul-dtype` sets their own.
    "highest" (a run's default): full float32 products. The platform's own default differs:
    TensorFloat-32 on NVIDIA GPUs since Ampere, one bfloat16 pass on a TPU, where it moves
    humanoid's MJX state by 42% (median over envs) in 20 steps against 0.007% for float32
    rounding (benchmarks/results/tpu_v5e/physics_precision.md). No effect on a CPU."""
    if precision not in PRECISIONS:
        raise ValueError(f"matmul precision must be one of {PRECISIONS}, got {precision!r}")

    @functools.wraps(fn)
    def traced(*args, **kwargs):
        with jax.default_matmul_precision(precision):
            return fn(*args, **kwargs)

    return traced


def full_precision(fn):
    """`fn` traced with full float32 matmuls (`at_precision` "highest")."""
    return at_precision(fn, "highest")


def make_agent(run: CoreSpec, spec, axis_name: str | None = None, sizes: Sizes | None = None) -> Agent:
    """The agent `run` declares, built for the env `spec` from the agent config of `sizes` (the
    run's own by default; one device's share when sharded)."""
    sizes = sizes or run
    return run.agent.make(sizes.agent_config, spec, axis_name, Budget(sizes.total_iterations, run.action_repeat, run.teacher))


class Evaluation:
    """The env, the agent and the deterministic evaluation of one policy (`evaluate_policy`:
    `num_eval_envs` episodes, one per env), and under other physics (`evaluate_settings`).

    `base_env` is the env with its action repeat; `eval_env` what evaluations run: the nominal
    physics, observed as in training (its noise, delay and observation parts)."""

    def __init__(self, cfg: CoreSpec, axis: str | None = None, sizes: Sizes | None = None):
        self.cfg = cfg
        base = envs.make(cfg.env, cfg.backend, episode_length=cfg.episode_length, **dict(cfg.env_config))
        if cfg.action_repeat > 1:
            base = ActionRepeat(base, cfg.action_repeat)
        self.base_env = base
        self.eval_env = self.physics_env(()) if cfg.disturbances.any else base
        self.spec = self.eval_env.spec
        cfg.agent.check_actions(self.spec, cfg.env)
        self.agent = make_agent(cfg, self.spec, axis, sizes)
        # One policy's evaluation on one device: the program training's evaluation runs per
        # member, and what `play` evaluates a checkpoint's policy with.
        self.evaluate_policy = jax.jit(at_precision(self.policy_returns, cfg.matmul_precision))

    def physics_env(self, setting=(), push=None):
        """The evaluation env under `setting` ((name, low, high) factors; names not given stay
        nominal), observed as the training env is (its noise, delay and parts); `push`: its
        (top speed, mean steps between) pushes (none: evaluations are not pushed)."""
        dist = self.cfg.disturbances
        return SimToReal(self.base_env, setting, observed=tuple(n for n, _, _ in dist.randomize),
                         obs_noise=dist.obs_noise, action_delay=dist.action_delay, observe=dist.any, push=push)

    def policy_returns(self, agent_state, obs_stats, key: jax.Array) -> dict:
        """`num_eval_envs` deterministic episodes of one policy from `key`, one per env: the
        mean, std, min and max return and the mean length (`rollout.evaluate`)."""
        return rollout.evaluate(self.eval_env, self.agent, agent_state, obs_stats, key, self.cfg.num_eval_envs)

    def evaluate_settings(self, settings, agent_state, obs_stats, key: jax.Array) -> list[dict]:
        """`evaluate_policy` under each physics setting ((name, low, high) factors; a robustness
        check, `play --robustness`): one compiled program, the settings' bounds its arguments.
        The name "push" is pushes up to that speed, on average every `push_every` steps."""
        names = tuple(dict.fromkeys([n for s in settings for n, _, _ in s if n != "push"] +
                                    [n for n, _, _ in self.cfg.disturbances.randomize]))
        pushed = any(n == "push" for s in settings for n, _, _ in s)
        env = self.physics_env(tuple((n, 1.0, 1.0) for n in names), push=(1.0, self.cfg.disturbances.push_every) if pushed else None)

        def run(bounds, agent_state, obs_stats, key):
            return rollout.evaluate(Bounded(env, bounds), self.agent, agent_state, obs_stats, key,
                                    self.cfg.num_eval_envs)

        run = jax.jit(at_precision(run, self.cfg.matmul_precision))
        out = []
        for setting in settings:
            given = {n: (lo, hi) for n, lo, hi in setting}
            bounds = {n: tuple(jnp.float32(v) for v in given.get(n, (1.0, 1.0))) for n in names}
            if pushed:
                bounds["push"] = tuple(jnp.float32(v) for v in given.get("push", (0.0, 0.0)))
            out.append(run(bounds, agent_state, obs_stats, key))
        return out
