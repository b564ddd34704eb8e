"""What the benchmarks measure alike: timing, the physics limit, `--set` flags and the
RESULT line a worker process prints for its parent.

Every script imports this module (and `benchmarks/versus.py` for the trainer comparisons)
and the project's own packages, never another script.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository root
RESULT = "RESULT "  # a worker's line of JSON figures


def timed(fn, *args):
    """(fn(*args), wall seconds until every array of it is computed)."""
    t = time.perf_counter()
    out = jax.block_until_ready(fn(*args))
    return out, time.perf_counter() - t


def best_of(fn, repeats: int, *args) -> float:
    """The least wall seconds of `repeats` calls of fn(*args), each waited for."""
    return min(timed(fn, *args)[1] for _ in range(repeats))


def best_epoch(epoch, state, repeats: int):
    """(least seconds of `repeats` calls of a compiled, donated epoch program, the last state):
    each call takes the state the one before returned."""
    best = float("inf")
    for _ in range(repeats):
        (state, _), seconds = timed(epoch, state)
        best = min(best, seconds)
    return best, state


def random_actions(spec, key: jax.Array, num_envs: int) -> jax.Array:
    """[num_envs] int32 (discrete) or [num_envs, *action_shape] float32 uniform in bounds."""
    if spec.discrete:
        return jax.random.randint(key, (num_envs,), 0, spec.num_actions)
    low, high = jnp.asarray(spec.action_low), jnp.asarray(spec.action_high)
    return jax.random.uniform(key, (num_envs, *spec.action_shape), minval=low, maxval=high)


def write_table(out: str, command: str, text: str) -> None:
    """`text` (a markdown table) to `out`.md under a comment naming the command and the date."""
    with open(out + ".md", "w") as f:
        f.write(f"<!-- {command}; {time.strftime('%Y-%m-%d')} -->\n{text}\n")


def save_figure(fig, path: str) -> None:
    """A matplotlib figure to `path` (laid out, 100 dpi), then closed."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


class Rate(NamedTuple):
    steps_per_s: float  # env steps per second, best of the timed calls
    compile_s: float  # lowering and compiling the timed program


def physics_limit(env, num_envs: int, steps: int, repeats: int, key: jax.Array, mesh=None,
                  precision: str = "highest") -> Rate:
    """The physics limit: env steps/s of `jit(scan(vmap(env.step)))` over `num_envs` envs with
    uniform random actions, the fastest any trainer could step them.

    Traced under the matmul `precision` a trainer steps them with: train.py's own ("highest"
    unless --matmul-precision says otherwise); a peer's as its users run it ("default"). On a
    TPU the two differ in speed and in the physics (benchmarks/physics_profile.py's drift).

    No auto-reset: episodes that end keep stepping, which costs the same physics. Each timed
    call is `steps` steps long and starts from the state the one before left; the rate is
    num_envs * steps over the best of `repeats` calls. With `mesh` (one axis), each of its
    devices steps its share of the envs under `shard_map`, with its own random actions.
    """
    from jax.sharding import NamedSharding, PartitionSpec as P

    axis = mesh.axis_names[0] if mesh is not None else None
    per = num_envs // (mesh.size if mesh is not None else 1)

    def raw(state, key):
        if axis is not None:
            key = jax.random.fold_in(key, jax.lax.axis_index(axis))

        def body(s, k):
            return jax.vmap(env.step)(s, random_actions(env.spec, k, per)), None

        return jax.lax.scan(body, state, jax.random.split(key, steps))[0]

    reset = jax.vmap(env.reset)
    if axis is None:
        run, reset = jax.jit(raw), jax.jit(reset)
    else:
        run = jax.jit(jax.shard_map(raw, mesh=mesh, in_specs=(P(axis), P()), out_specs=P(axis), check_vma=False))
        reset = jax.jit(reset, out_shardings=NamedSharding(mesh, P(axis)))
    reset_key, key = jax.random.split(key)
    with jax.default_matmul_precision(precision):
        state = jax.block_until_ready(reset(jax.random.split(reset_key, num_envs)))
        compiled, compile_s = timed(lambda: run.lower(state, key).compile())
    best = float("inf")
    for k in jax.random.split(key, repeats):
        state, seconds = timed(compiled, state, k)
        best = min(best, seconds)
    return Rate(num_envs * steps / best, compile_s)


def physics_line(env: str, backend: str, num_envs: int, steps: int, rate: Rate) -> str:
    """benchmarks/env_throughput.py's line (benchmarks/cpu_linalg.py reads its figures)."""
    return (f"env={env} backend={backend} num_envs={num_envs} steps={steps} compile_s={rate.compile_s:.1f} "
            f"steps_per_s={rate.steps_per_s:,.0f} device={jax.devices()[0].platform}")


def parse_set(items) -> list[tuple[str, object]]:
    """--set NAME=VALUE ... -> [(name, value)], values read as Python literals where they parse."""
    out = []
    for item in items or ():
        name, _, value = item.partition("=")
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            pass
        out.append((name.replace("-", "_"), value))
    return out


def emit(record: dict, path: str | None) -> None:
    """A benchmark's record: one line of JSON on stdout, and appended to `path` if given."""
    line = json.dumps(record)
    print(line, flush=True)
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")


def print_result(figures: dict) -> None:
    """A worker's figures, one line of JSON for its parent (`read_result`)."""
    print(RESULT + json.dumps(figures), flush=True)


def read_result(text: str) -> dict | None:
    """The last RESULT line's figures in a worker's output, None if it printed none."""
    lines = [line for line in text.splitlines() if line.startswith(RESULT)]
    return json.loads(lines[-1][len(RESULT):]) if lines else None


def member_curves(run_dir: str) -> dict[int, list[tuple[int, float]]]:
    """{member: [(env steps, evaluation return), ...]} of a population's metrics.jsonl (a run
    of one member: member 0). A population's lines of its seeds' means are no member's."""
    from sim.run.populations.population import is_config_line

    curves: dict[int, list[tuple[int, float]]] = {}
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            row = json.loads(line)
            if is_config_line(row):
                continue
            if row.get("eval/episode_return") is not None:
                curves.setdefault(int(row.get("member", 0)), []).append((row["env_steps"],
                                                                         row["eval/episode_return"]))
    return curves


def run_process(cmd: list[str], env: dict | None = None, timeout: float = 3600) -> tuple[float, str]:
    """(wall seconds, stdout + stderr) of a command run from the repository root, imports to
    exit; exits with its error's tail if it fails."""
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-3000:]}")
    return wall, proc.stdout + proc.stderr

