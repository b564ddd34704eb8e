"""Sim-to-real: physics randomised per env at each reset, noise on what the policy observes, a
delay on its actions, and a privileged observation for a critic that sees what the policy
cannot.

    env = SimToReal(base, ranges=(("friction", 0.5, 1.5), ("mass", 0.8, 1.2)), obs_noise=0.05,
                    action_delay=1, push=(0.5, 250))

`ranges` are factors of the env's nominal dynamics parameters (`env.default_params()`), drawn
uniformly on device at every reset (an episode restart included: put the wrapper inside
`AutoReset(..., fresh_params=True)`), fixed for the whole episode. A name is one of the
families' common names (`ALIASES`: friction, mass, gravity, damping, gain) or one of the env's
own parameter fields (`list_params`). Each name draws one factor per entry of its fields'
first axis (per geom, body, dof, actuator or link; `gain` scales an actuator's gain and bias
alike, so a position servo stays one), and one for a vector of gravity or a scalar.

The observation becomes structured (`EnvSpec.obs_parts`), laid out flat as:
- "state": what the policy sees, the env's observation plus Gaussian noise of std
  `obs_noise` (in the observation's own units; of a structured env, its part "state" only);
  one std for all of it, or one per slice of it (`parse_noise`: "0:9=0.01" "9:=0.1");
- "privileged_state": the clean observation (an array env's; a structured env keeps its own);
- "dynamics": the drawn factors of the `observed` names (default: the randomised ones).
The policy reads "state" (the default part); `--privileged-critic` points the critic at
"privileged_state" and "dynamics".

`action_delay` k > 0: the env applies the action the policy chose k control steps before (a
queue per env, zeros at an episode's start).

`push=(speed, every)`: random pushes, for MuJoCo physics (Brax's MJX envs, Playground): at each
control step, with probability 1/every, the robot's root gets a horizontal velocity of a
random direction and a speed uniform in [0, speed] (`StateEnv.push_map`), before the step.

`domain_randomization=True`: the task's own randomiser (Playground's robots that have one,
`RobotEnv.domain_randomize`) draws the env's model at every reset too, applied after the
`ranges`' factors (where both touch a field, e.g. Go1's floor friction, the task's draw is
applied to the factored value, as Playground applies it to its nominal model).
"""

from __future__ import annotations

import math

import jax
import numpy as np
import jax.numpy as jnp

from envs.base import Env, EnvSpec, EnvState
from envs.wrappers import Wrapper

# Common names of the families' parameter fields (Brax MJX / Playground, then Brax's own pipelines).
ALIASES = {
    "friction": ("geom_friction",),
    "mass": ("body_mass", "link.inertia.mass"),
    "gravity": ("opt.gravity", "gravity"),
    "damping": ("dof_damping", "dof.damping"),
    "gain": ("actuator_gainprm", "actuator_biasprm", "actuator.gain"),
}
_GRAVITY = ("opt.gravity", "gravity")
OWN = ("obs_noise_key", "action_queue", "push_key", "push_speed")  # this wrapper's info keys


def parse_noise(entries) -> tuple[tuple[int, int | None, float], ...]:
    """--obs-noise's entries as (start, stop, std) slices of the observation's part "state":
    "STD" is all of it, "START:STOP=STD" (either end may be left out) a slice; a later entry
    overrides an earlier one where they overlap. A number alone is one entry. () where every
    std is 0 (no noise). Raises ValueError naming a malformed entry."""
    if isinstance(entries, (int, float, str)):
        entries = (entries,)
    out = []
    for entry in entries:
        where, sep, value = str(entry).rpartition("=")
        try:
            std = float(value)
            start, colon, stop = where.partition(":")
            if sep and not colon:
                raise ValueError
            lo = int(start) if start.strip() else 0
            hi = int(stop) if stop.strip() else None
        except ValueError:
            raise ValueError(f"{str(entry)!r} is not STD or START:STOP=STD (e.g. 0.05, or 0:9=0.01 9:=0.1)") from None
        if not (math.isfinite(std) and std >= 0):
            raise ValueError(f"{str(entry)!r}: the std must be finite and >= 0")
        if lo < 0 or (hi is not None and hi <= lo):
            raise ValueError(f"{str(entry)!r}: the slice must have 0 <= START < STOP")
        out.append((lo, hi, std))
    return tuple(out) if any(std for _, _, std in out) else ()


def noise_scales(noise, size: int):
    """The per-entry std [size] of `noise` (one std for all, or `parse_noise`'s slices) on a part
    of `size` entries; None where every std is 0. Raises ValueError for a slice past its end
    or a negative std."""
    scales = np.zeros(size, np.float32)
    for lo, hi, std in ((0, None, noise),) if isinstance(noise, (int, float)) else noise:
        if not std >= 0:
            raise ValueError(f"a noise std must be >= 0, got {std}")
        if (hi if hi is not None else lo + 1) > size:
            raise SettingError("obs-noise", f"{lo}:{'' if hi is None else hi} is past the observation's state, "
                                            f"which has {size} entries (0:{size})")
        scales[lo:hi] = std
    return scales if scales.any() else None


def parse_ranges(entries) -> tuple[tuple[str, float, float], ...]:
    """("friction=0.5:1.5", "mass=1.2", ...) -> (("friction", 0.5, 1.5), ("mass", 1.2, 1.2)).
    Raises ValueError naming the entry for a malformed one, a negative or reversed range."""
    out = []
    for entry in entries:
        name, sep, value = str(entry).partition("=")
        name = name.strip()
        try:
            if not sep or not name:
                raise ValueError
            bounds = [float(v) for v in value.split(":")]
            if len(bounds) not in (1, 2):
                raise ValueError
        except ValueError:
            raise ValueError(f"{entry!r} is not NAME=LOW:HIGH or NAME=FACTOR (e.g. friction=0.5:1.5 mass=1.2)") from None
        lo, hi = bounds[0], bounds[-1]
        if not (math.isfinite(lo) and math.isfinite(hi) and 0 <= lo <= hi):
            raise ValueError(f"{entry!r}: factors must be finite with 0 <= LOW <= HIGH")
        if name in {n for n, _, _ in out}:
            raise ValueError(f"{name} is given twice")
        out.append((name, lo, hi))
    return tuple(out)


def list_params(env: Env) -> tuple[str, ...]:
    """The names `env` can randomise: the common names its fields have, then its fields."""
    fields = tuple(env.default_params() or ())
    common = tuple(a for a, paths in ALIASES.items() if any(p in fields for p in paths))
    return tuple(dict.fromkeys(common + fields))  # once each (cartpole's field `gravity` is a common name too)


class SettingError(ValueError):
    """A sim-to-real setting the env cannot take; `flag` names the option to change."""

    def __init__(self, flag: str, message: str):
        super().__init__(message)
        self.flag = flag


class UnknownParam(SettingError):
    """A name the env has no dynamics parameter for."""

    def __init__(self, message: str):
        super().__init__("randomize", message)


def resolve(env: Env, name: str) -> tuple[str, ...]:
    """The parameter fields `name` scales in `env`; UnknownParam listing the valid names."""
    fields = tuple(env.default_params() or ())
    paths = tuple(p for p in ALIASES.get(name, (name,)) if p in fields)
    if not paths:
        valid = ", ".join(list_params(env)) or "none: it has no dynamics parameters"
        raise UnknownParam(f"{env.name} has no dynamics parameter {name!r} (its names: {valid})")
    return paths


class SimToReal(Wrapper):
    """See the module's docstring. `observed` names without a range stay nominal (factor 1), so
    an evaluation env observes the parts of the training env it checks. `observe=False` keeps
    the env's own observation (the physics of a setting for a policy trained without this
    wrapper)."""

    def __init__(self, env: Env, ranges=(), observed=None, obs_noise=0.0, action_delay: int = 0,
                 observe: bool = True, push=None, domain_randomization: bool = False):
        super().__init__(env)
        self.physics = _physics_env(env)
        self.domain_randomization = bool(domain_randomization)
        if self.domain_randomization and getattr(self.physics, "task_randomizer", None) is None:
            raise SettingError("domain-randomization", f"{env.name} has no domain randomiser of its own (Playground's "
                                                       f"robots have, e.g. Go1JoystickFlatTerrain); --randomize "
                                                       f"NAME=LOW:HIGH randomises any env's physics")
        if action_delay < 0:
            raise ValueError("action_delay must be >= 0")
        self.ranges = tuple((n, float(lo), float(hi)) for n, lo, hi in ranges)
        self.observed = tuple(n for n, _, _ in self.ranges) if observed is None else tuple(observed)
        nominal = env.default_params() or {}
        draws = {n: (lo, hi) for n, lo, hi in self.ranges}
        for name in self.observed:
            draws.setdefault(name, (1.0, 1.0))
        self.draws = tuple((name, resolve(env, name), lo, hi) for name, (lo, hi) in draws.items())
        self.shapes = {name: self._factor_shape(paths[0], nominal[paths[0]]) for name, paths, _, _ in self.draws}
        self.repeat = getattr(env, "repeat", 1)  # control steps are the inner env's (action repeat)
        self.action_delay = int(action_delay)
        base = env.spec
        self.size = math.prod(base.obs_shape)
        self.dynamics_size = sum(math.prod(self.shapes[n]) for n in self.observed)
        if base.obs_parts:  # a structured env keeps its parts (noise goes on its "state")
            parts = base.obs_parts
            self.noisy = base.obs_ranges(("state",))[0] if "state" in dict(parts) else (0, self.size)
        else:
            parts = (("state", self.size), ("privileged_state", self.size))
            self.noisy = (0, self.size)
        scales = noise_scales(obs_noise, self.noisy[1] - self.noisy[0])
        self.obs_noise = None if scales is None else tuple(scales.tolist())  # hashable: a static constant
        self.push_speed, self.push_every, self.push_map = 0.0, 1, None
        if push and push[0] > 0:
            self.push_speed, self.push_every = float(push[0]), int(push[1])
            self.push_map = self.physics.push_map() if self.physics is not None else None
            if self.push_map is None:
                raise SettingError("push", f"pushes need MuJoCo physics whose robot root moves horizontally "
                                           f"(Brax's mjx backend or a Playground task); {env.name} has none")
            if self.push_every < 1:
                raise ValueError(f"push's interval must be >= 1 control step, got {self.push_every}")
            self.push_map = tuple(map(tuple, self.push_map.tolist()))
        if self.dynamics_size:
            parts = parts + (("dynamics", self.dynamics_size),)
        self.observe = bool(observe)
        if not self.observe and (self.obs_noise or self.observed):
            raise ValueError("observe=False takes no obs_noise and observes no factors")
        if self.observe:
            size = sum(s for _, s in parts)
            self.spec = EnvSpec(**{**vars(base), "obs_shape": (size,), "obs_parts": parts})

    @staticmethod
    def _factor_shape(path: str, value) -> tuple[int, ...]:
        if value.ndim == 0 or path in _GRAVITY:
            return ()
        return (value.shape[0],) + (1,) * (value.ndim - 1)

    def default_params(self):
        return {"model": self.env.default_params(), "factors": {n: jnp.ones(s, jnp.float32)
                                                                for n, s in self.shapes.items()}}

    def _draw(self, key: jax.Array, bounds=None) -> tuple[dict, dict]:
        nominal = self.env.default_params()
        if nominal is None:
            return None, {}
        factors, model = {}, dict(nominal)
        for i, (name, paths, lo, hi) in enumerate(self.draws):
            lo, hi = bounds[name] if bounds is not None else (lo, hi)
            factors[name] = jax.random.uniform(jax.random.fold_in(key, i), self.shapes[name], jnp.float32, lo, hi)
            for path in paths:
                model[path] = nominal[path] * factors[name]
        if self.domain_randomization:
            model = self.physics.domain_randomize(model, jax.random.fold_in(key, len(self.draws)))
        return model, factors

    def _observe(self, clean: jax.Array, factors: dict, key) -> jax.Array:
        if not self.observe:
            return clean
        clean = jnp.reshape(clean, (-1,))
        noisy = clean
        if self.obs_noise:
            start, stop = self.noisy
            noise = jnp.asarray(self.obs_noise, jnp.float32) * jax.random.normal(key, (stop - start,), jnp.float32)
            noisy = clean.at[start:stop].add(noise)
        parts = [noisy] if self.env.spec.obs_parts else [noisy, clean]
        parts += [jnp.reshape(factors[n], (-1,)) for n in self.observed]
        return jnp.concatenate(parts)

    def reset(self, key: jax.Array, params=None) -> EnvState:
        """A fresh episode under newly drawn parameters (`params`, the previous episode's, are
        not read: every reset draws around the nominal ones). `params={"bounds": {name: (low,
        high)}}` draws from those bounds instead of the ranges', which may then be traced
        (every name's: one compiled evaluation serves many settings, `Bounded`); with pushes,
        bounds["push"]'s high end is the episode's top push speed."""
        draw_key, reset_key, noise_key = jax.random.split(key, 3)
        bounds = params.get("bounds") if isinstance(params, dict) else None
        model, factors = self._draw(draw_key, bounds)
        state = self.env.reset(reset_key, model)
        info, now = dict(state.info), None
        if self.obs_noise:
            info["obs_noise_key"], now = jax.random.split(noise_key)
        if self.action_delay:
            info["action_queue"] = jnp.zeros((self.action_delay,) + tuple(self.spec.action_shape or ()), jnp.float32)
        if self.push_speed:  # a setting's own top speed (`Bounded`: "push"), traced
            info["push_key"] = jax.random.fold_in(key, 3)
            top = bounds["push"][1] if bounds is not None and "push" in bounds else self.push_speed
            info["push_speed"] = jnp.asarray(top, jnp.float32)
        return state.replace(obs=self._observe(state.obs, factors, now), info=info,
                             params={"model": state.params, "factors": factors})

    def step(self, state: EnvState, action: jax.Array) -> EnvState:
        info = {k: v for k, v in state.info.items() if k not in OWN}
        applied = action
        if self.action_delay:
            queue = state.info["action_queue"]
            applied = queue[0].astype(jnp.int32) if self.spec.discrete else queue[0]
            queue = jnp.concatenate([queue[1:], jnp.asarray(action, jnp.float32)[None]])
        inner = state.replace(info=info, params=state.params["model"])
        if self.push_speed:
            push_key, now = jax.random.split(state.info["push_key"])
            inner = inner.replace(physics=self._push(inner.physics, now, state.info["push_speed"]))
        inner = self.env.step(inner, applied)
        out = dict(inner.info)
        if self.push_speed:
            out["push_key"], out["push_speed"] = push_key, state.info["push_speed"]
        now = None
        if self.obs_noise:
            key, now = jax.random.split(state.info["obs_noise_key"])
            out["obs_noise_key"] = key
        if self.action_delay:
            out["action_queue"] = jnp.where(inner.done > 0, jnp.zeros_like(queue), queue)
        obs = self._observe(inner.obs, state.params["factors"], now)
        return inner.replace(obs=obs, info=out, params=state.params)

    def _push(self, physics, key: jax.Array, top_speed=None):
        """`physics` with, at probability 1/push_every, a horizontal kick of the root at a speed
        up to `top_speed` (default: the wrapper's)."""
        top_speed = self.push_speed if top_speed is None else top_speed
        hit, angle, speed = jax.random.uniform(key, (3,), jnp.float32)
        speed = jnp.where(hit < 1.0 / self.push_every, speed * top_speed, 0.0)
        angle = 2 * jnp.pi * angle
        kick = jnp.asarray(self.push_map, jnp.float32) @ (speed * jnp.stack([jnp.cos(angle), jnp.sin(angle)]))
        return self.physics.add_velocity(physics, kick)

    def __repr__(self) -> str:
        return (f"SimToReal({self.env!r}, ranges={self.ranges}, obs_noise={self.obs_noise}, "
                f"action_delay={self.action_delay}, push={(self.push_speed, self.push_every)}, "
                f"domain_randomization={self.domain_randomization})")


def _physics_env(env: Env):
    """The innermost env below `env`'s wrappers, when it steps MuJoCo data (`push_map`)."""
    while hasattr(env, "env"):
        env = env.env
    return env if hasattr(env, "push_map") else None


class Bounded(Wrapper):
    """`env` (a SimToReal) resetting under `bounds` {name: (low, high)}, arrays that may be traced."""

    def __init__(self, env: SimToReal, bounds: dict):
        super().__init__(env)
        self.bounds = bounds
        self.repeat = env.repeat

    def reset(self, key: jax.Array, params=None) -> EnvState:
        return self.env.reset(key, {"bounds": self.bounds})
