"""The engine: a run's spec (env, agent, sizes, devices, population) -> ONE compiled,
donated epoch program.

    epoch = jit(run_epoch, donate_argnums=0)
    run_epoch(state) = lax.scan(iteration, state, length=iterations_per_epoch)

One iteration is the agent's loop (`sim/core/loops/`): the unroll loop (on-policy) or the
replay loop (off-policy); the engine knows none of their insides.

The whole TrainState is donated at this outermost jit and returned FIRST, in the same
structure, so every input buffer aliases its own output buffer (`sim/core/donation.py`); the
host receives only a small dict of scalars per epoch.

With n > 1 devices the same per-device program runs under `shard_map` (`sim/core/parallel.py`):
every state leaf gets a leading device axis, the programs are built from per-device sizes
and reduce gradients, statistics and metrics over the device axis.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

import envs
from envs.sim2real import SimToReal
from envs.wrappers import AutoReset, EpisodeStats, init_stats
from sim.core import donation, parallel
from sim.core.contract import without_hyperparams
from sim.core.evaluation import Evaluation, at_precision
from sim.core.loops import LoopContext, make_loop
from sim.core.memory import Part
from sim.core.metrics import NONFINITE, Iteration
from sim.core.spec import CoreSpec
from sim.core.state import TrainState


def state_groups(tree) -> dict[str, list]:
    """The floating-point leaves of an agent state, grouped by their leading one or two field
    names (params.policy, opt_state, q, target_q, log_alpha, ...)."""
    groups: dict[str, list] = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        if not jnp.issubdtype(leaf.dtype, jnp.inexact):
            continue
        names = []
        for entry in path[:2]:
            if not isinstance(entry, jax.tree_util.GetAttrKey):
                break
            names.append(entry.name)
        groups.setdefault(".".join(names) or "agent", []).append(leaf)
    return groups


def nonfinite_flags(state: "TrainState", record: Iteration) -> dict:
    """Whether the observation statistics, each loss and each group of the agent's learned
    parameters and optimizer statistics holds a NaN or Inf after an iteration, in the order a divergence
    spreads through it (statistics -> losses -> updated parameters)."""

    def bad(leaves):
        return jnp.logical_not(jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in leaves])))

    flags = {"obs_stats": bad(jax.tree.leaves(state.obs_stats))}
    flags.update({f"loss/{k}": jnp.logical_not(jnp.isfinite(v.total)) for k, v in record.losses.items()})
    # (not its hyper-parameters: inputs that training never changes, and +inf where unset)
    learned = without_hyperparams(state.agent.replace(hp=None))
    flags.update({f"agent.{name}": bad(leaves) for name, leaves in state_groups(learned).items()})
    return flags


def _keys(key: jax.Array, device_index) -> tuple:
    """(the state's key, the agent's, this device's envs') of an init key: `starts` and `init`
    derive the same envs' key."""
    key, agent_key, env_key = jax.random.split(key, 3)
    return key, agent_key, jax.random.fold_in(env_key, device_index)


class Engine:
    """Builds the environments, the agent, the loop and the compiled programs of one run's spec.

    `cfg` keeps the run's sizes; `dev` holds one device's share. `evaluation` is the policy's
    side (the evaluation env, the agent, `evaluate_policy`); `loop` runs the iterations.
    """

    def __init__(self, cfg: CoreSpec):
        if not isinstance(cfg, CoreSpec):
            raise TypeError(f"Engine takes a sim.core.spec.CoreSpec (sim.run.build.build_engine makes one from a "
                            f"run's Config), not a {type(cfg).__name__}")
        self.cfg = cfg
        self.members = cfg.members.size
        self.num_devices = cfg.num_devices
        # A population spreads whole members over the devices where their count divides;
        # otherwise every device holds a share of every member's envs (see parallel.py).
        self.spread = parallel.spreads_members(self.members, self.num_devices)
        self.dev = cfg.device
        self.axis = parallel.AXIS if self.num_devices > 1 and not self.spread else None
        self.hp = cfg.hp  # the state's hyper-parameters: the config's, or each member's stacked [M]
        self.evaluation = Evaluation(cfg, self.axis, self.dev)
        train_env = self.evaluation.base_env
        dist = cfg.disturbances
        if dist.any:  # evaluations run the nominal physics, observed as in training
            train_env = SimToReal(train_env, dist.randomize, obs_noise=dist.obs_noise, action_delay=dist.action_delay,
                                  push=(dist.push, dist.push_every), domain_randomization=dist.domain_randomization)
        # Spare start states where a reset costs a share of a physics step; elsewhere a
        # fresh reset at every step costs little, and short episodes never share a start.
        self.env = AutoReset(EpisodeStats(train_env), spares=envs.family(cfg.env) in envs.PHYSICS_FAMILIES,
                             fresh_params=bool(dist.randomize or dist.domain_randomization))
        # Before compiling: e.g. the replay ring checked to fit.
        self.loop = make_loop(cfg.agent.kind, LoopContext(self.env, self.agent, self.spec, self.dev, cfg, self.axis))
        self._build_programs()

    # ---- the policy's side ----
    @property
    def agent(self):
        return self.evaluation.agent

    @property
    def spec(self):
        return self.evaluation.spec

    @property
    def eval_env(self):
        return self.evaluation.eval_env

    @property
    def evaluate_policy(self):
        return self.evaluation.evaluate_policy

    def _build_programs(self) -> None:
        """starts, init_from, renew, prefill, epoch and evaluate, jitted (compiled on first use
        or `lower`): one device's programs under `shard_map` on n > 1 devices, vmapped over a
        population's members, the state donated and returned first. `starts` alone resets the
        training envs' physics: it makes the first episodes (`init`) and the spare start states
        `renew` hands out between epochs, so the epoch program holds the step and no reset."""
        precision = self.cfg.matmul_precision
        epoch, prefill = at_precision(self._epoch, precision), at_precision(self._prefill, precision)
        epoch_kw, prefill_kw, init_kw, eval_kw = {}, {}, {}, {}
        population = self.members > 1
        self.mesh = parallel.make_mesh(self.num_devices) if self.num_devices > 1 else None
        if self.mesh:
            lift = dict(mesh=self.mesh, population=population, spread=self.spread)
            epoch = parallel.shard_state_program(epoch, **lift)
            prefill = parallel.shard_state_program(prefill, has_metrics=False, **lift)
            # The new state keeps the input's sharding leaf for leaf, stated outright: left to
            # inference, zero-size leaves (MJX data has several) come back replicated and the
            # next call's arguments no longer match the compiled program.
            stacked = parallel.stacked_sharding(self.mesh, parallel.state_spec(population, self.spread))
            # Metrics come back replicated (spread members' are gathered: a few scalars each),
            # so every process of a multi-host run can read them.
            epoch_kw = {"out_shardings": (stacked, parallel.replicated(self.mesh))}  # (state, metrics)
            prefill_kw = init_kw = {"out_shardings": stacked}
            eval_kw = {"out_shardings": parallel.replicated(self.mesh)}
        elif population:
            epoch, prefill = jax.vmap(epoch), jax.vmap(prefill)
        self.prefill = donation.jit_in_place(prefill, out_index=None, **prefill_kw)
        # Donated state returned first, leaf for leaf: each buffer aliases its own new value.
        self.epoch = donation.jit_in_place(epoch, **epoch_kw)
        self.starts = jax.jit(at_precision(self._starts_population if population else self._starts_stacked,
                                           precision), **init_kw)
        self.init_from = jax.jit(at_precision(self._init_population if population else self._init_stacked,
                                              precision), **init_kw)
        self.renew = donation.jit_in_place(self._renew, out_index=None, **prefill_kw)
        evaluate = at_precision(self._evaluate, precision)
        self.evaluate = jax.jit(jax.vmap(evaluate) if population else evaluate, **eval_kw)

    def evaluate_settings(self, settings, agent_state, obs_stats, key: jax.Array) -> list[dict]:
        """The policy under each physics setting (`Evaluation.evaluate_settings`)."""
        return self.evaluation.evaluate_settings(settings, agent_state, obs_stats, key)

    def init(self, key: jax.Array) -> TrainState:
        """A fresh training state from `key` (a population's: [M, 2], each member's): the
        `starts` program's envs, then `init_from`'s agent and the rest."""
        return self.init_from(key, self.starts(key))

    # ---- programs (per device) ----
    def _starts(self, key: jax.Array, device_index=0):
        """One device's envs [B], each reset for its first episode and its spare start state
        (the only reset of the training envs' physics in the run's programs)."""
        _, _, env_key = _keys(key, device_index)
        return jax.vmap(self.env.reset)(jax.random.split(env_key, self.dev.num_envs))

    def _starts_stacked(self, key: jax.Array):
        if not self.axis:
            return self._starts(key)
        return jax.vmap(self._starts, in_axes=(None, 0))(key, jnp.arange(self.num_devices))

    def _starts_population(self, keys: jax.Array):
        return jax.vmap(self._starts_stacked)(keys)

    def _renew(self, state: TrainState, fresh) -> TrainState:
        """The envs that used their spare start state take `fresh`'s (a `starts` output)."""
        return state.replace(env=self.env.renew(state.env, fresh))

    def _init(self, key: jax.Array, env_state, device_index=0, hp=None) -> TrainState:
        key, agent_key, env_key = _keys(key, device_index)
        return TrainState(
            agent=self.agent.init(agent_key, hp),  # same key everywhere: identical parameters
            env=self.loop.start(env_state, jax.random.fold_in(env_key, 1)),  # as the loop begins training
            obs_stats=init_stats(self.spec.obs_shape),
            key=key,
            iteration=jnp.zeros((), jnp.int32),
            env_steps=jnp.zeros((2,), jnp.int32),
            loop=self.loop.init(key),  # the loop's own state
        )

    def _init_stacked(self, key: jax.Array, env_state, hp=None) -> TrainState:
        """One run's state around its envs `env_state`: [n, ...] on n > 1 devices sharing its envs."""
        if not self.axis:
            return self._init(key, env_state, 0, hp)
        return jax.vmap(self._init, in_axes=(None, 0, 0, None))(key, env_state, jnp.arange(self.num_devices), hp)

    def _init_population(self, keys: jax.Array, env_state) -> TrainState:
        """Every member's state from its key [M, 2], its envs and its hyper-parameters: [M, ...]
        ([M, n, ...] when each device holds a share of every member's envs)."""
        return jax.vmap(self._init_stacked)(keys, env_state, self.hp)

    def _iteration(self, state: TrainState, _):
        new, record = self.loop.iteration(state)
        return new, record.replace(nonfinite=nonfinite_flags(new, record))

    def _prefill(self, state: TrainState) -> TrainState:
        return self.loop.prefill(state)

    def _epoch(self, state: TrainState):
        state, records = jax.lax.scan(self._iteration, state, None, length=self.dev.iterations_per_epoch)
        flags = records.nonfinite  # [iterations] each
        totals = jax.tree.map(jnp.sum, records.replace(nonfinite={}))
        if self.axis:
            totals = jax.lax.psum(totals, self.axis)
            flags = jax.lax.pmax(jax.tree.map(lambda f: f.astype(jnp.int32), flags), self.axis)
        episodes = totals.episodes
        # A loss no step of the epoch computed (a delayed actor) is NaN: reported as missing.
        out = {f"loss/{k}": v.total / v.count for k, v in totals.losses.items()}
        out["train/episodes"] = episodes
        out["train/episode_return"] = jnp.where(episodes > 0, totals.return_sum / jnp.maximum(episodes, 1.0), jnp.nan)
        # Per quantity, the first iteration of the epoch where it was non-finite (-1: never).
        out[NONFINITE] = {k: jnp.where(jnp.any(f), jnp.argmax(f), -1) for k, f in flags.items()}
        out["env_steps"] = state.env_steps  # the run's count, identical on every device
        return state, out

    def _evaluate(self, state: TrainState, key: jax.Array) -> dict:
        """One member's (one run's) deterministic evaluation, from `key`."""
        agent_state, obs_stats = state.agent, state.obs_stats
        if self.axis:  # parameters are identical on every device: evaluate one copy
            agent_state, obs_stats = jax.tree.map(lambda x: x[0], (agent_state, obs_stats))
        return {f"eval/{k}": v for k, v in self.evaluation.policy_returns(agent_state, obs_stats, key).items()}

    # ---- host-side helpers ----
    def eval_key(self, key: jax.Array, epoch: int) -> jax.Array:
        """The evaluation key of an epoch: a key per epoch number (each member's), not a split
        chain, so a resumed run evaluates as an uninterrupted one."""
        if self.members > 1:
            return jax.vmap(jax.random.fold_in, (0, None))(key, epoch)
        return jax.random.fold_in(key, epoch)

    def starts_key(self, key: jax.Array, epoch: int) -> jax.Array:
        """The key of the start states renewed before an epoch (each member's): a key per epoch
        number, apart from the evaluation's, so a resumed run renews as an uninterrupted one."""
        fold = jax.random.fold_in
        key = self.eval_key(key, epoch)
        return jax.vmap(fold, (0, None))(key, 1) if self.members > 1 else fold(key, 1)

    def template(self, key: jax.Array, program=None) -> TrainState:
        """The training state's shapes, dtypes and shardings, computed without running anything
        (`program`: those of what that program returns for `key` instead, e.g. `starts`)."""
        shapes = jax.eval_shape(program or self.init, key)
        if not self.mesh:
            return shapes
        stacked = parallel.stacked_sharding(self.mesh, parallel.state_spec(self.members > 1, self.spread))
        return jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=stacked), shapes)

    def memory_parts(self, template: TrainState) -> tuple[list, dict]:
        """The state's big pieces per device and the sizes that scale each program's working
        memory, for `memory.check`."""
        cfg = self.cfg

        def per_device(tree) -> int:
            return sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(tree)) // self.num_devices

        num_envs = (("num_envs", cfg.num_envs),)
        own, update = self.loop.memory(template, per_device)
        # Each env's own physics model fields (per env under --randomize/--domain-randomization;
        # its spare start states hold their own), apart from the rest of its state.
        leaves = jax.tree_util.tree_flatten_with_path(template.env)[0]
        models = per_device([x for path, x in leaves if "params" in jax.tree_util.keystr(path)])
        parts = [Part("the env states", per_device(template.env) - models, num_envs),
                 Part("the envs' physics parameters", models, num_envs), *own]
        work = {"starts": num_envs, "init": num_envs, "renew": num_envs, "prefill": num_envs, "epoch": update,
                "evaluate": (("num_eval_envs", cfg.num_eval_envs),)}
        if self.members > 1:  # every part grows with the population
            seeds = (("num_seeds", cfg.members.num_seeds),)
            parts = [dataclasses.replace(p, sizes=p.sizes + seeds) for p in parts]
            work = {k: v + seeds for k, v in work.items()}
        return parts, work

    def droppable_paths(self, template: TrainState) -> frozenset[str]:
        """The leaf paths (`jax.tree_util.keystr`) of the state that a checkpoint may leave out,
        as the loop says of its own state (`Loop.droppable_mask`)."""
        mask = jax.tree.map(lambda _: False, template).replace(loop=self.loop.droppable_mask(template.loop))
        return _marked(mask)

    def episode_paths(self, template: TrainState) -> frozenset[str]:
        """The leaf paths of every env's state and of what the loop keeps of the envs' current
        episodes (`Loop.episodic_mask`): what `--checkpoint-envs off` leaves out of checkpoints."""
        mask = jax.tree.map(lambda _: False, template).replace(env=jax.tree.map(lambda _: True, template.env),
                                                               loop=self.loop.episodic_mask(template.loop))
        return _marked(mask)


def _marked(mask) -> frozenset[str]:
    """The leaf paths of a boolean mask of the state where it is True."""
    return frozenset(jax.tree_util.keystr(p) for p, keep in jax.tree_util.tree_flatten_with_path(mask)[0] if keep)
