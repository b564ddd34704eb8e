"""Wrappers that keep the functional API: each is itself an `Env`.

- `AutoReset`: resets ended episodes inside `step`, under jit, keeping the last observation
  of the ended episode in `info["final_obs"]` (bootstrapping on truncation needs it).
- `EpisodeStats`: running and last-finished episode return/length, on device.
- `ActionRepeat`: repeats an action n times, summing rewards, stopping at an episode end.
- `RunningStats` / `normalize`: running observation mean/variance (the parallel
  variance merge), one pytree that merges across batches and devices.
"""

from __future__ import annotations


import jax
import jax.numpy as jnp
from flax import struct

from envs.base import Env, EnvState


class Wrapper(Env):
    """Delegates everything to `env`; subclasses override `reset`/`step`."""

    def __init__(self, env: Env):
        self.env = env
        self.spec = env.spec
        self.name = env.name

    def _reset(self, key, params):  # pragma: no cover - wrappers override reset/step
        return self.env._reset(key, params)

    def _step(self, physics, action, params):  # pragma: no cover
        return self.env._step(physics, action, params)

    def default_params(self):
        return self.env.default_params()

    def reset(self, key: jax.Array, params=None) -> EnvState:
        return self.env.reset(key, params)

    def step(self, state: EnvState, action: jax.Array) -> EnvState:
        return self.env.step(state, action)

    @property
    def unwrapped(self) -> Env:
        return self.env.unwrapped

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.env!r})"


def _select(mask: jax.Array, on_true, on_false):
    """Per-env select between two pytrees: mask [] (one env) or [B] (a batch, against leaves
    [B, ...])."""
    return jax.tree.map(lambda a, b: jnp.where(mask.reshape(mask.shape + (1,) * (jnp.ndim(a) - mask.ndim)), a, b),
                        on_true, on_false)


_OWN_INFO = ("final_obs", "reset_key", "spare", "spare_used")


class AutoReset(Wrapper):
    """Starts a new episode whenever one ends.

    The returned state keeps `reward`, `terminated` and `truncated` of the transition that
    ended the episode, while `obs`/`physics`/`steps` are those of the fresh episode.
    `info["final_obs"]` always holds the observation the transition produced (equal to
    `obs` when the episode did not end), so `next_obs = info["final_obs"]` everywhere.
    Each env carries its own reset key in `info["reset_key"]`. A restart keeps the env's
    dynamics parameters (`state.params`): its fresh episode is reset under them. With
    `fresh_params=True` it takes the fresh episode's instead, those its reset drew (an env
    inside that draws its physics at every reset: `envs.sim2real.SimToReal`).

    Two ways to step a batch, with the same distribution of start states (each a fresh
    `reset`):
    - `jax.vmap(env.step)`: per env; under vmap the reset is computed for every env at every
      step and selected where an episode ended.
    - `env.step_batch` (what the engine uses): every env holds a spare start state made in
      advance (`info["spare"]`); an env whose episode ends takes it, and `renew` hands new
      spares to the envs that used theirs, from a batch of fresh resets made apart (the
      engine renews them before every epoch). An env that ends again before its spare is
      renewed starts over from that same spare: its episodes of that epoch share a start
      state (Brax's trainers start every episode of an env from its first state, for the
      whole run). No branch either way: a `lax.cond` evaluated at every step would be read
      on the host by XLA on a GPU, a device-to-host sync per env step. With Brax/MJX physics
      this keeps resets out of the training programs altogether: a reset is a whole MJX
      forward pass, which costs a program as much to compile as the step, and on a TPU a
      quarter of the batch's resets took as long as a step of all of it.
      (An env reuses a start where it ends while `info["spare_used"]` is set.)

    `spares=False` makes `step_batch` the per-env path and `renew` a no-op: for envs whose
    reset costs little (classic control, gymnax), where short episodes would often end twice
    before a renewal. The state keeps its spare either way (one structure for every env).
    """

    def __init__(self, env: Env, spares: bool = True, fresh_params: bool = False):
        super().__init__(env)
        self.fresh_params = bool(fresh_params)
        self.spares = bool(spares)

    def reset(self, key: jax.Array, params=None) -> EnvState:
        """The first episode and its spare start, from one reset vmapped over two keys (the
        physics traced once: a reset is a whole MJX forward pass, and every program that starts
        envs compiles it). Both start under `params` (each env's reset takes `params` or its
        defaults; a randomising wrapper draws its own from each key)."""
        key, reset_key, spare_key = jax.random.split(key, 3)
        both = jax.vmap(self.env.reset, in_axes=(0, None))(jnp.stack([reset_key, spare_key]), params)
        state, spare = (jax.tree.map(lambda x, i=i: x[i], both) for i in (0, 1))
        info = dict(state.info, final_obs=state.obs, reset_key=key, spare=self._start(spare),
                    spare_used=jnp.zeros((), jnp.bool_))
        return state.replace(info=info)

    def _start(self, state: EnvState) -> dict:
        start = _start(state)
        return dict(start, params=state.params) if self.fresh_params else start

    def _begin(self, mask: jax.Array, start: dict, state: EnvState) -> EnvState:
        """`state` with the fresh episodes' parts in `start` where mask."""
        return state.replace(**_select(mask, start, {k: getattr(state, k) for k in start}))

    def _inner(self, state: EnvState) -> EnvState:
        return state.replace(info={k: v for k, v in state.info.items() if k not in _OWN_INFO})

    def step(self, state: EnvState, action: jax.Array) -> EnvState:
        key, reset_key = jax.random.split(state.info["reset_key"])
        stepped = self.env.step(self._inner(state), action)
        fresh = self.env.reset(reset_key, state.params)
        done = stepped.done > 0
        # Where done, take the fresh episode's obs/physics/steps; keep the transition's
        # reward/terminated/truncated, and the inner wrappers' info (they handle resets).
        new = self._begin(done, self._start(fresh), stepped)
        info = dict(new.info, final_obs=stepped.obs, reset_key=jnp.where(done, key, state.info["reset_key"]),
                    spare=state.info["spare"], spare_used=state.info["spare_used"])
        return new.replace(info=info)

    def step_batch(self, state: EnvState, action: jax.Array) -> EnvState:
        """Steps a batch [B] of envs; ended episodes restart from their spare start state
        (again, where it already started one since the last `renew`). Branch-free. Without
        spares (`spares=False`), from a reset made at every step: `vmap(step)`."""
        if not self.spares:
            return jax.vmap(self.step)(state, action)
        stepped = jax.vmap(self.env.step)(self._inner(state), action)
        done = stepped.done > 0
        used = state.info["spare_used"]
        spare = state.info["spare"]
        new = self._begin(done, spare, stepped)
        info = dict(new.info, final_obs=stepped.obs, reset_key=state.info["reset_key"], spare=spare,
                    spare_used=used | done)
        return new.replace(info=info)

    def renew(self, state: EnvState, fresh: EnvState) -> EnvState:
        """Batched [..., B]: the envs that used their spare start state take the one `fresh` (a
        new batch of `reset`s, laid out as `state`) holds. A select per leaf, no physics: the
        resets that make `fresh` run in a program of their own (the engine's `starts`), so
        the training programs never hold a reset of the physics."""
        if not self.spares:
            return state
        used = state.info["spare_used"]
        spare = _select(used, fresh.info["spare"], state.info["spare"])
        return state.replace(info=dict(state.info, spare=spare, spare_used=jnp.zeros_like(used)))


def _start(state: EnvState) -> dict:
    """What a fresh episode contributes to an env state: its obs, step count and physics."""
    return {"obs": state.obs, "steps": state.steps, "physics": state.physics}


class EpisodeStats(Wrapper):
    """Tracks episode return and length on device, in `info`.

    info["episode_return"], info["episode_length"]: running totals of the current episode.
    info["last_return"], info["last_length"]: totals of the most recently finished episode.
    info["episode_done"]: 1.0 on the step that finished an episode.
    Put it inside `AutoReset` (AutoReset(EpisodeStats(env))) so it sees the raw episode ends.
    """

    def reset(self, key: jax.Array, params=None) -> EnvState:
        state = self.env.reset(key, params)
        zero = jnp.zeros((), jnp.float32)
        info = dict(state.info, episode_return=zero, episode_length=zero, last_return=zero, last_length=zero,
                    episode_done=zero)
        return state.replace(info=info)

    def step(self, state: EnvState, action: jax.Array) -> EnvState:
        mine = ("episode_return", "episode_length", "last_return", "last_length", "episode_done")
        inner_info = {k: v for k, v in state.info.items() if k not in mine}
        stepped = self.env.step(state.replace(info=inner_info), action)
        ep_return = state.info["episode_return"] + stepped.reward
        ep_length = state.info["episode_length"] + 1.0
        done = stepped.done
        info = dict(
            stepped.info,
            episode_return=ep_return * (1.0 - done),
            episode_length=ep_length * (1.0 - done),
            last_return=jnp.where(done > 0, ep_return, state.info["last_return"]),
            last_length=jnp.where(done > 0, ep_length, state.info["last_length"]),
            episode_done=done,
        )
        return stepped.replace(info=info)


class ActionRepeat(Wrapper):
    """Applies each action `repeat` times; rewards add up; stops at the first episode end.

    The time limit stays the inner env's, counted in inner steps (as Brax's action_repeat).
    """

    def __init__(self, env: Env, repeat: int):
        super().__init__(env)
        if repeat < 1:
            raise ValueError(f"action repeat must be >= 1, got {repeat}")
        self.repeat = int(repeat)

    def step(self, state: EnvState, action: jax.Array) -> EnvState:
        if self.repeat == 1:
            return self.env.step(state, action)

        def body(carry, _):
            current, total = carry
            nxt = self.env.step(current, action)
            # Once done, freeze: later repeats must not step past the episode end.
            ended = current.done > 0
            nxt = _select(ended, current, nxt)
            total = total + jnp.where(ended, 0.0, nxt.reward)
            return (nxt, total), None

        first = self.env.step(state, action)
        (last, total), _ = jax.lax.scan(body, (first, first.reward), None, length=self.repeat - 1)
        return last.replace(reward=total)


@struct.dataclass
class RunningStats:
    """Running mean and variance of observations. count: [] float32; mean, m2: [*obs_shape]."""

    count: jax.Array
    mean: jax.Array
    m2: jax.Array

    @property
    def std(self) -> jax.Array:
        var = self.m2 / jnp.maximum(self.count, 1.0)
        return jnp.sqrt(jnp.maximum(var, 1e-6))


def init_stats(obs_shape: tuple[int, ...]) -> RunningStats:
    zeros = jnp.zeros(obs_shape, jnp.float32)
    return RunningStats(count=jnp.zeros((), jnp.float32), mean=zeros, m2=zeros)


def batch_stats(obs: jax.Array, obs_ndim: int) -> RunningStats:
    """Stats of a batch: obs has any number of leading dims before the `obs_ndim` feature dims."""
    axes = tuple(range(obs.ndim - obs_ndim))
    count = 1
    for d in obs.shape[: len(axes)]:
        count *= d
    count = jnp.asarray(count, jnp.float32)
    mean = jnp.mean(obs, axis=axes)
    m2 = jnp.sum(jnp.square(obs - mean), axis=axes)
    return RunningStats(count=count, mean=mean, m2=m2)


def merge_stats(a: RunningStats, b: RunningStats) -> RunningStats:
    """The parallel variance combination of two batches' moments; associative, so it merges across devices."""
    count = a.count + b.count
    delta = b.mean - a.mean
    safe = jnp.maximum(count, 1.0)
    mean = a.mean + delta * (b.count / safe)
    m2 = a.m2 + b.m2 + jnp.square(delta) * (a.count * b.count / safe)
    return RunningStats(count=count, mean=mean, m2=m2)


def merge_across(stats: RunningStats, axis_name: str | None) -> RunningStats:
    """Combines per-device stats over a device axis (inside shard_map); identity for None."""
    if axis_name is None:
        return stats
    count = jax.lax.psum(stats.count, axis_name)
    safe = jnp.maximum(count, 1.0)
    mean = jax.lax.psum(stats.count * stats.mean, axis_name) / safe
    m2 = jax.lax.psum(stats.m2 + stats.count * jnp.square(stats.mean - mean), axis_name)
    return RunningStats(count=count, mean=mean, m2=m2)


def update_stats(stats: RunningStats, obs: jax.Array, axis_name: str | None = None) -> RunningStats:
    """Adds a batch of observations (on every device, when axis_name names a device axis)."""
    return merge_stats(stats, merge_across(batch_stats(obs, stats.mean.ndim), axis_name))


def normalize(stats: RunningStats, obs: jax.Array, clip: float | None = 5.0) -> jax.Array:
    """(obs - mean) / std, clipped to +-clip (None: not clipped)."""
    z = (obs - stats.mean) / stats.std
    return z if clip is None else jnp.clip(z, -clip, clip)
