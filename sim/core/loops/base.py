"""What a loop is: the typed unit that runs ONE training iteration of the compiled epoch and
owns its part of the training state (`TrainState.loop`), which nothing outside it names.

    loop = LoopClass.make(context)           # sizes bound, host-side checks (e.g. the ring fits)
    state.loop = loop.init(key)              # its own state: None, carries, a replay ring...
    state.env = loop.start(state.env, key)   # the envs as training begins (e.g. staggered episodes)
    state, record = loop.iteration(state)    # traced, inside the epoch's scan
    state = loop.prefill(state)              # what runs once before training (prefill_iterations > 0)

and what it answers for its state, so the harness never looks inside:
- `memory(template, per_device)`: its big parts for the memory check, and the sizes that scale
  an iteration's working memory;
- `droppable` / `droppable_mask(loop_state)`: what a checkpoint may leave out
  (`--checkpoint-buffer`; a resume then rebuilds it with `prefill`);
- `episodic_mask(loop_state)`: what of its state belongs to the envs' current episodes (e.g.
  recurrent states), left out of checkpoints with the envs' own (`--checkpoint-envs off`; a
  resume takes both fresh from `init`);
- PBT: a replaced member keeps its loop state (its envs' histories are its own); a diverged
  member takes its parent's whole loop state, with its envs (sim/core/pbt.py);
- `play` needs nothing of it: a policy is evaluated without building a loop.
Class-level facts the harness reads before anything is built: `splits_over_cores` (a CPU
host's default device count), `work_sizes` (what an out-of-memory error names) and `droppable`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Optional, Protocol

import jax
import jax.numpy as jnp

from sim.core.contract import Agent
from envs.base import Env, EnvSpec
from envs.wrappers import update_stats
from sim.core import metrics
from sim.core.metrics import Iteration
from sim.core.state import count_steps
from sim.core.spec import CoreSpec, Sizes


@dataclasses.dataclass(frozen=True)
class LoopContext:
    """What a loop is built from: the training env (auto-resetting, batched), the agent, the
    env's spec, one device's sizes, the run's spec and the device axis (None: one device)."""

    env: Env
    agent: Agent
    spec: EnvSpec
    dev: Sizes
    run: CoreSpec
    axis: Optional[str]

    def device_key(self, key: jax.Array) -> jax.Array:
        """A per-device stream for what each device does on its own (env steps, exploration)."""
        return key if self.axis is None else jax.random.fold_in(key, jax.lax.axis_index(self.axis))


class Loop(Protocol):
    """One iteration kind (see the module docstring)."""

    splits_over_cores: ClassVar[bool]
    work_sizes: ClassVar[tuple[str, ...]]
    droppable: ClassVar[Optional[str]]  # what a checkpoint may leave out of its state (None: nothing)

    @classmethod
    def make(cls, context: LoopContext) -> "Loop": ...

    @property
    def prefill_iterations(self) -> int: ...

    def init(self, key: jax.Array) -> Any: ...

    def start(self, env_state, key: jax.Array) -> Any: ...

    def iteration(self, state) -> tuple[Any, Iteration]: ...

    def prefill(self, state): ...

    def memory(self, template, per_device) -> tuple[list, tuple]: ...

    def droppable_mask(self, loop_state) -> Any: ...

    def episodic_mask(self, loop_state) -> Any: ...


def nothing_droppable(loop_state) -> Any:
    """A mask of `loop_state` that keeps every leaf in checkpoints."""
    return jax.tree.map(lambda _: False, loop_state)


def all_episodic(loop_state) -> Any:
    """A mask of `loop_state` that marks every leaf as the envs' episodes' own."""
    return jax.tree.map(lambda _: True, loop_state)


def as_reset(env_state, key: jax.Array):
    """The envs as their reset left them (a loop's `start` that changes nothing)."""
    return env_state


def advanced(context: LoopContext, state, key: jax.Array, agent_state, losses: dict, env_state, steps):
    """The state after an iteration whose update ran the envs inside it (the differentiable and
    generation loops): its agent, the observation statistics of `steps` where the agent
    normalises, the envs where they stand, the counters; and the iteration's record."""
    obs_stats = state.obs_stats
    if context.dev.agent_config.normalize_observations:
        obs_stats = update_stats(obs_stats, steps.obs, context.axis)
    new = state.replace(agent=agent_state, obs_stats=obs_stats, key=key, iteration=state.iteration + 1,
                        env_steps=count_steps(state.env_steps, context.run.steps_per_iteration), env=env_state)
    return new, metrics.iteration(jax.tree.map(lambda v: jnp.asarray(v)[None], losses), steps)
