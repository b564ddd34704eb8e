"""Where an MJX physics step spends its time on this machine's accelerator, and what the
choices around it cost: matmul precision, per-env dynamics parameters, the auto-reset's
renewal of spare start states.

    python benchmarks/physics_profile.py --env humanoid --num-envs 4096 \
        --variants default,highest,constant,renew --trace $OUT/trace_humanoid --json $OUT/physics.jsonl

Each variant is one compiled `jit(scan(vmap(step)))` of `--steps` steps with uniform random
actions (the physics limit of `benchmarks/common.py`), timed best of `--repeats` calls:
- `default`, `high`, `highest`: the env as the trainers step it (its dynamics parameters one
  copy per env, in its state) under that `jax.default_matmul_precision`; listed after
  `highest`, each also reports its `drift` from it (same start, same actions);
- `nudged`: `highest` with every action moved by 1e-6 times a normal draw: the drift that
  float32 rounding alone causes over the call, the yardstick for the others';
- `constant`: the same with the nominal parameters closed over as constants (one model for
  every env, as Brax's and Playground's trainers step it without randomisation), at `default`;
- `randomized`: a robot's own domain randomiser drawn per env (`--domain-randomization`), at
  `default`;
- `renew`: the renewal of spare start states the trainer runs before each epoch (a reset of
  every env and `envs.wrappers.AutoReset.renew`'s select), timed alone on the training env's
  state. (Until the resets left the training programs, a quarter of the envs were refilled
  once per unroll: 9.7 ms for humanoid's 4,096 on a TPU v5e, physics_profile.md.)
`--trace DIR` writes a JAX profiler trace of the first variant's timed calls (read it with
`benchmarks/read_profile.py DIR`: device time per MJX stage). MJX names only its top-level
stages; the run names its kinematics, inertia, factorisation, collision and constraint
stages too (a name scope around each, nothing else changed).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # repo root

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import envs  # noqa: E402
from benchmarks import common  # noqa: E402
from envs.sim2real import SimToReal  # noqa: E402
from envs.wrappers import AutoReset, EpisodeStats  # noqa: E402

# MJX's stages inside `fwd_position` and `fwd_velocity`, named for the profile.
STAGES = {"smooth": ("kinematics", "com_pos", "camlight", "crb", "factor_m", "com_vel", "rne", "transmission"),
          "collision_driver": ("collision",), "constraint": ("make_constraint",), "passive": ("passive",)}


def name_stages() -> None:
    """Each of MJX's inner stages (`STAGES`) under a name scope of its own name."""
    from mujoco.mjx._src import collision_driver, constraint, passive, smooth  # private MJX modules: imported only to name their stages

    modules = {"smooth": smooth, "collision_driver": collision_driver, "constraint": constraint, "passive": passive}
    for module_name, names in STAGES.items():
        module = modules[module_name]
        for name in names:
            fn = getattr(module, name)
            if getattr(fn, "_named_stage", False):
                continue

            def scoped(*args, _fn=fn, _name=name, **kwargs):
                with jax.named_scope(_name):
                    return _fn(*args, **kwargs)

            scoped._named_stage = True
            setattr(module, name, functools.wraps(fn)(scoped))


def scan_program(env, num_envs: int, steps: int, constant: bool, nudge: float = 0.0):
    """jit(scan(vmap(step))) with random actions; `constant`: the parameters closed over;
    `nudge`: every action moved by that much times a standard normal draw (a perturbation at
    the scale of float32 rounding, the yardstick for `drift`)."""
    params = env.default_params()

    def step(state, action):
        if constant:
            return env.step(state.replace(params=params), action).replace(params=None)
        return env.step(state, action)

    def run(state, key):
        def body(s, k):
            action = common.random_actions(env.spec, k, num_envs)
            if nudge:
                action = action + nudge * jax.random.normal(jax.random.fold_in(k, 1), action.shape)
            return jax.vmap(step)(s, action), None

        return jax.lax.scan(body, state, jax.random.split(key, steps))[0]

    return jax.jit(run)


def time_program(program, state, key, repeats: int, trace: str | None):
    """(compile seconds, best seconds of `repeats` calls, the state after the first call)."""
    compiled, compile_s = common.timed(lambda: program.lower(state, key).compile())
    state = first = jax.block_until_ready(compiled(state, key))  # a first call, untimed
    best = float("inf")
    with jax.profiler.trace(trace) if trace else contextlib.nullcontext():
        for k in jax.random.split(key, repeats):
            state, seconds = common.timed(compiled, state, k)
            best = min(best, seconds)
    return compile_s, best, first


def drift(obs, reference) -> dict:
    """How far one variant's observations after the first call lie from the reference's
    (the "highest" variant's, same start and actions): per env, |obs - ref| / (1 + |ref|) in
    the largest entry; its median and 90th percentile over the envs."""
    import numpy as np

    gap = np.max(np.abs(np.asarray(obs, np.float64) - reference) / (1.0 + np.abs(reference)), axis=-1)
    return {"drift_p50": float(np.median(gap)), "drift_p90": float(np.percentile(gap, 90))}


PRECISIONS = ("default", "high", "highest")


def physics_variant(env, variant: str, a, key, trace):
    """One `variant`'s figures; "nudged" is "highest" with actions moved by 1e-6 (`scan_program`)."""
    precision = variant if variant in PRECISIONS else "highest" if variant == "nudged" else "default"
    num = a.num_envs
    with jax.default_matmul_precision(precision):
        if variant == "randomized":
            env = SimToReal(env, (), domain_randomization=True)
        reset = jax.jit(jax.vmap(env.reset))
        state, reset_s = common.timed(reset, jax.random.split(key, num))
        if variant == "constant":
            state = state.replace(params=None)
        program = scan_program(env, num, a.steps, variant == "constant", 1e-6 if variant == "nudged" else 0.0)
        compile_s, best, first = time_program(program, state, key, a.repeats, trace)
    return {"steps_per_s": num * a.steps / best, "compile_s": compile_s, "reset_first_call_s": reset_s,
            "obs": first.obs}


def renew_variant(env, a, key, trace):
    """The spares' renewal before an epoch, as the trainer runs it: a fresh start state for
    every env (the `starts` program's resets) and the select that hands them to the envs that
    used theirs (a quarter here)."""
    randomized = bool(getattr(env, "task_randomizer", None))
    inner = SimToReal(env, (), domain_randomization=True) if randomized else env
    train = AutoReset(EpisodeStats(inner), spares=True, fresh_params=randomized)
    num = a.num_envs
    reset = jax.vmap(train.reset)
    state = jax.jit(reset)(jax.random.split(key, num))
    used = jnp.arange(num) % 4 == 0
    state = state.replace(info=dict(state.info, spare_used=used))

    def run(state, key):
        with jax.named_scope("renew"):
            out = train.renew(state, reset(jax.random.split(key, num)))
        return out.replace(info=dict(out.info, spare_used=used))  # as many used again next call

    compile_s, best, _ = time_program(jax.jit(run), state, key, a.repeats, trace)
    return {"renew_s": best, "compile_s": compile_s, "envs": num, "randomized": randomized}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="humanoid")
    p.add_argument("--backend", default=None)
    p.add_argument("--num-envs", type=int, default=4096)
    p.add_argument("--steps", type=int, default=20, help="scan length of each timed call")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--variants", default="default,highest,constant,renew")
    p.add_argument("--trace", default=None, help="profiler trace of the first variant's timed calls")
    p.add_argument("--json", default=None, help="append one JSON line per variant")
    a = p.parse_args(argv)
    name_stages()
    env = envs.make(a.env, a.backend)
    key = jax.random.PRNGKey(0)
    reference = None  # the "highest" variant's observations after its first call
    for i, variant in enumerate(a.variants.split(",")):
        trace = a.trace if i == 0 else None
        t = time.perf_counter()
        if variant == "renew":
            figures = renew_variant(env, a, key, trace)
        else:
            figures = physics_variant(env, variant, a, key, trace)
            obs = figures.pop("obs")
            if variant == "highest":
                reference = jax.device_get(obs).astype("float64")
            if reference is not None and variant in PRECISIONS + ("nudged",):
                figures.update(drift(jax.device_get(obs), reference))
        record = {"env": a.env, "num_envs": a.num_envs, "steps": a.steps, "variant": variant,
                  "platform": jax.devices()[0].platform, "wall_s": time.perf_counter() - t, **figures}
        common.emit(record, a.json)


if __name__ == "__main__":
    main()
