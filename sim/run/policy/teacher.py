"""A trained run's policy as a teacher for distillation (`--agent bc --teacher RUN_DIR`): its
newest good checkpoint's deterministic policy (the best member of a population, as `play`
chooses), read once per process, and where the teacher's observation lies in the student's.

The teacher reads the student env's observation through its own layout: each part it was
trained on (by name and size) from the student's part of that name; a teacher trained on a
plain array observation reads the student's whole observation (an array env of the same size)
or the student's clean part `privileged_state` (cartpole_privileged for a cartpole teacher;
any env under --obs-noise, --randomize or --action-delay).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

import envs
from sim.core.contract import ConfigError
from envs.base import EnvSpec
from sim.run.checkpoints import checkpoint
from sim.run.policy.play import run_policy

FLAG = "teacher"


class Teacher(NamedTuple):
    """A loaded teacher: its run's env spec and agent, and its deterministic policy on its own
    observation layout, `act(obs [B, O_teacher]) -> env actions`."""

    run_dir: str
    checkpoint: str
    env: str
    agent: str
    spec: EnvSpec
    act: Callable[[jax.Array], jax.Array]


def _error(message: str) -> ConfigError:
    prefix = f"--{FLAG}: "
    return ConfigError(FLAG, message[len(prefix):] if message.startswith(prefix) else message)


@functools.lru_cache(maxsize=8)
def _load(run_dir: str) -> Teacher:
    if not os.path.isdir(run_dir):
        raise _error(f"{run_dir} is not a directory: give the run directory of a trained teacher")
    try:
        cfg, evaluation, state, obs_stats, _, path, _, _ = run_policy(run_dir, None, None, lambda *a: None, f"--{FLAG}")
    except checkpoint.CheckpointError as err:
        raise _error(str(err)) from None
    agent = evaluation.agent
    if agent.carry is not None:
        raise _error(f"{run_dir} trained {cfg.agent}, a policy that carries a state from step to step; a teacher "
                     f"must be feed-forward (train it with --agent ppo, sac, ...)")
    key = jax.random.PRNGKey(0)

    def act(obs):
        return agent.act(state, obs_stats, obs, key, True, None)[0]

    return Teacher(run_dir, path, cfg.env, cfg.agent, evaluation.spec, act)


def load(run_dir: str) -> Teacher:
    """The teacher of `run_dir` (cached per process); ConfigError naming --teacher when the
    directory holds no trained run. Safe to call while a program is being traced: what it
    computes runs eagerly."""
    if not run_dir:
        raise _error("distillation needs a teacher: give the run directory of a trained policy (--teacher RUN_DIR)")
    with jax.ensure_compile_time_eval():
        return _load(os.path.abspath(run_dir))


def policy(run_dir: str, student: EnvSpec) -> Callable[[jax.Array], jax.Array]:
    """The teacher's deterministic actions on the student's observations [B, O]."""
    teacher = load(run_dir)
    # numpy, not a jax array: the agent keeps this function from the trace it was first made in,
    # and a jax array made there would be that trace's value, unusable in the next one
    index = np.asarray(inputs(teacher, student))
    return lambda obs: teacher.act(jnp.take(obs, index, axis=-1))


@dataclasses.dataclass(frozen=True)
class Source:
    """A distilling agent's teacher run, read when the agent first asks for its policy on an
    env's observations (`sim.core.contract.Budget.teacher`: as a training program is traced)."""

    run_dir: str

    def __call__(self, student: EnvSpec) -> Callable[[jax.Array], jax.Array]:
        return policy(self.run_dir, student)


def source(cfg) -> Source | None:
    """What a training run of `cfg` hands its agent (`build_engine(cfg, source(cfg))`): the
    teacher of a distilling agent, None for any other."""
    return Source(cfg.agent_config.teacher) if cfg.agent_def.teacher else None


def check(run_dir: str, student: EnvSpec, env: str, student_dir: str, other_env: bool = False) -> Teacher:
    """The teacher of `run_dir` for a student of `env` (its observation `student`) training in
    `student_dir`, checked before anything compiles: a run of its own (not the student's
    directory), trained on the student's env (or the env the student's is a variant of) unless
    `other_env` (--teacher-other-env), its inputs in the student's observation. ConfigError
    naming --teacher otherwise."""
    if run_dir and student_dir and os.path.abspath(run_dir) == os.path.abspath(student_dir):
        raise _error(f"{run_dir} is this run's own directory: a student cannot learn from itself (and --overwrite "
                     f"would remove its teacher); give the run directory of another, trained policy")
    teacher = load(run_dir)
    if envs.tuned_as(teacher.env) != envs.tuned_as(env) and not other_env:
        raise _error(f"{run_dir} is a {teacher.agent} run of env {teacher.env}, and this run's env is {env}: distil "
                     f"from a teacher of {env}, or add --teacher-other-env where another env's policy is meant")
    inputs(teacher, student)
    return teacher


def _describe(spec: EnvSpec) -> str:
    if spec.obs_parts:
        return "parts " + ", ".join(f"{n} ({s})" for n, s in spec.obs_parts)
    return f"one array of {int(np.prod(spec.obs_shape))}"


def inputs(teacher: Teacher, student: EnvSpec) -> np.ndarray:
    """The indices of the student's flat observation that make the teacher's, in the teacher's
    order (see the module docstring); ConfigError when the student's env does not hold them,
    or when its actions differ from the teacher's."""
    t = teacher.spec
    if t.discrete != student.discrete or t.action_size != student.action_size:
        def kind(s):
            return f"{s.num_actions} discrete actions" if s.discrete else f"{s.action_size} continuous actions"
        raise _error(f"the teacher ({teacher.env}) has {kind(t)} and this env {kind(student)}: distil into an env "
                     f"with the teacher's actions")
    parts = dict(student.obs_parts)
    size = int(np.prod(t.obs_shape))
    if t.obs_parts:
        missing = [(n, s) for n, s in t.obs_parts if parts.get(n) != s]
        if not missing:
            ranges = student.obs_ranges(tuple(n for n, _ in t.obs_parts))
            return np.concatenate([np.arange(a, b) for a, b in ranges]).astype(np.int32)
    elif not parts and tuple(student.obs_shape) == tuple(t.obs_shape):
        return np.arange(size, dtype=np.int32)
    elif parts.get("privileged_state") == size:
        (a, b), = student.obs_ranges(("privileged_state",))
        return np.arange(a, b, dtype=np.int32)
    raise _error(f"the teacher ({teacher.env}) reads {_describe(t)}, which this env's observation ({_describe(student)}) "
                 f"does not hold: train the student on an env that carries it (cartpole_privileged for a cartpole "
                 f"teacher; --obs-noise, --randomize or --action-delay give any env its clean state as the part "
                 f"privileged_state)")
