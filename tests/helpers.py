"""Small shared helpers for the tests."""

import contextlib
import ctypes.util
import fcntl
import os
import tempfile

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sim.run.config import defaults_for


def small_config(env="cartpole", agent="ppo", **overrides):
    """A tiny config of `env` that compiles and runs in seconds on CPU."""
    cfg = defaults_for(env, agent)
    base = dict(num_envs=8, batch_size=8, num_minibatches=2, unroll_length=8, num_updates_per_batch=2,
                total_steps=4 * 8 * 2 * 8, epochs=4, num_eval_envs=4, episode_length=50, progress=False,
                value_hidden_sizes=(16, 16), horizon_length=8, critic_iterations=2, population_size=4,
                top_directions=2)
    if cfg.loop.droppable is not None:
        base = dict(num_envs=4, batch_size=16, total_steps=256, epochs=4, num_eval_envs=4, episode_length=50,
                    max_replay_size=1024, min_replay_size=32, grad_updates_per_step=2, progress=False,
                    policy_hidden_sizes=(16, 16), value_hidden_sizes=(16, 16))
    if agent == "ppo":
        base.pop("value_hidden_sizes")  # PPO's small runs keep its own defaults
    if agent in DISTILLING:
        base["teacher"] = teacher_dir(env)
    fields = set(cfg.flat())
    base = {k: v for k, v in base.items() if k in fields}
    base.update(overrides)
    return cfg.replace(**base)


DISTILLING = ("bc", "bc_rnn")  # the agents that learn from a teacher run
TEACHER_ENVS = ("cartpole", "pendulum")


def teacher_dir(env: str) -> str:
    """Where this test session's small PPO teacher of `env` lies (one directory for every
    pytest-xdist worker of a session); `make_teachers` trains them."""
    # (set once per session, and inherited by the processes tests start)
    session = os.environ.setdefault("FUSEDRL_TEST_SESSION", os.environ.get("PYTEST_XDIST_TESTRUNUID") or str(os.getpid()))
    return os.path.join(tempfile.gettempdir(), f"fusedrl-test-teachers-{session}", env)


def make_teachers() -> None:
    """Trains the session's small teachers (`teacher_dir`) unless another worker has: each is a
    small PPO run of its env, under a lock, finished when its summary.json is written."""
    from sim.run.trainer import train

    for env in TEACHER_ENVS:
        path = teacher_dir(env)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path + ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not os.path.isfile(os.path.join(path, "summary.json")):
                train(small_config(env, "ppo", epochs=1).validate(), run_dir=path, log=lambda *a: None)


def agent_env(agent: str) -> str:
    """A small env each agent can act in: pendulum (continuous) or cartpole (discrete)."""
    import agents

    return "pendulum" if "continuous" in agents.get(agent).actions else "cartpole"


def all_agents() -> list[str]:
    import agents

    return list(agents.names())


@contextlib.contextmanager
def count_lowerings():
    """Counts XLA lowerings per jitted function name while the block runs."""
    counts: dict[str, int] = {}

    def listener(name, duration, **kwargs):
        if name == "/jax/core/compile/jaxpr_to_mlir_module_duration":
            fun = kwargs.get("fun_name", "?")
            counts[fun] = counts.get(fun, 0) + 1

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        yield counts
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)


def host_branches(compiled) -> dict:
    """What in a compiled program would make XLA on a GPU read a value on the host while it
    runs: `conditional` ops (their predicate) and `while` loops without a trip count XLA
    knows at compile time (their condition, each iteration). A `lax.scan` is a while with a
    known trip count, and is not counted."""
    text = compiled.as_text()
    whiles = [line for line in text.splitlines() if " while(" in line]
    return {"conditional": sum(" conditional(" in line for line in text.splitlines()),
            "unbounded while": sum('"known_trip_count"' not in line for line in whiles)}


def dot_precisions(lowered) -> list[str]:
    """The precision of every dot_general in a lowered program ("DEFAULT" where unset)."""
    import re

    dots = [line for line in lowered.as_text().splitlines() if "stablehlo.dot_general" in line]
    return [(re.findall(r"precision = \[(\w+), \w+\]", d) or ["DEFAULT"])[0] for d in dots]


def _has(extra: str) -> bool:
    import envs

    if extra == "osmesa":
        return ctypes.util.find_library("OSMesa") is not None
    if extra == "export":
        import importlib.util

        return all(importlib.util.find_spec(m) is not None for m in ("onnx", "onnxruntime"))
    if extra == "tensorboard":
        import importlib.util

        return importlib.util.find_spec("tensorboardX") is not None
    return envs.installed(extra)


HINTS = {"playground": "pip install 'fusedrl[playground]'", "robots": "pip install 'fusedrl[robots]'",
         "gymnax": "pip install 'fusedrl[gymnax]'",
         "export": "pip install 'fusedrl[export]' (onnx, and onnxruntime to check the file)",
         "tensorboard": "pip install 'fusedrl[tensorboard]' (tensorboardX)",
         "osmesa": "MuJoCo's offscreen rendering needs the system package libosmesa6 (apt-get install libosmesa6)"}


def extra(name: str) -> list:
    """The marks of a test that needs an optional extra (`playground`, `gymnax`, `export`, or `osmesa`,
    the system library of MuJoCo's offscreen renderer): `extras`, which `.ci/run` runs again
    once they are installed, and a skip with the install hint where it is missing. For
    `pytest.param(..., marks=extra(name))`; `needs(name)` is the decorator."""
    return [pytest.mark.extras, pytest.mark.skipif(not _has(name), reason=f"needs the {name} extra: {HINTS[name]}")]


def needs(name: str):
    """Decorator form of `extra(name)`."""
    def mark(test):
        for m in extra(name):
            test = m(test)
        return test

    return mark


def check_triangular_solves(solve, n: int = 6, batch: int = 3, k: int = 2) -> None:
    """`solve` (lax.linalg.triangular_solve's signature) against numpy in all 16 cases: left or
    right side, lower or upper, transposed or not, unit diagonal or not."""
    import numpy as np
    import jax.numpy as jnp

    rng = np.random.default_rng(0)
    tri = np.tril(rng.normal(size=(batch, n, n))) + 3 * np.eye(n)
    for left in (True, False):
        for lower in (True, False):
            for transpose in (False, True):
                for unit in (False, True):
                    a = tri if lower else np.swapaxes(tri, 1, 2)
                    b = rng.normal(size=(batch, n, k) if left else (batch, k, n))
                    m = a.copy()
                    if unit:
                        m[:, range(n), range(n)] = 1.0
                    m = np.swapaxes(m, 1, 2) if transpose else m
                    expected = (np.linalg.solve(m, b) if left else
                                np.swapaxes(np.linalg.solve(np.swapaxes(m, 1, 2), np.swapaxes(b, 1, 2)), 1, 2))
                    x = solve(jnp.asarray(a, jnp.float32), jnp.asarray(b, jnp.float32), left_side=left, lower=lower,
                              transpose_a=transpose, conjugate_a=False, unit_diagonal=unit)
                    np.testing.assert_allclose(x, expected, rtol=1e-4, atol=1e-5,
                                               err_msg=f"{left=} {lower=} {transpose=} {unit=}")
