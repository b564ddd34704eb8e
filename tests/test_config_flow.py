"""The run configuration flows one way: followed from `train.py` through every call that is
handed it (a `Config` or the core's `CoreSpec`), over the commands a user runs (train, resume,
play, export, a replay agent, a population with PBT), it enters at most 15 of the project's
modules and climbs back up a layer (envs < sim.core < agents < sim.run < train) at most 3 times.

Measured at run time: every call of a project function one of whose parameters holds the
config, where the caller's module differs from the callee's, is one entry. A config's own
methods and properties (the config as `self`) count only where a lower layer calls them: a
module reading its own config's values is not the config passed on, a core module asking the
run layer's config for its sizes is the config walking back up."""

from __future__ import annotations

import collections
import os
import sys

import train
from sim.core.spec import CoreSpec
from sim.run.config import Config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
LAYERS = (("envs", 0), ("sim.core", 1), ("agents", 2), ("sim.run", 3), ("train", 4))
MAX_MODULES, MAX_CLIMBS = 15, 3


def module_of(code) -> str | None:
    """The project module a code object belongs to (None: a test, a library)."""
    path = code.co_filename
    if not path.startswith(ROOT) or os.sep + "tests" + os.sep in path or os.sep + ".venv" + os.sep in path:
        return None
    name = path[len(ROOT):-3].replace(os.sep, ".").removesuffix(".__init__")
    return name if layer(name) is not None else None


def layer(module: str) -> int | None:
    return next((n for top, n in LAYERS if module == top or module.startswith(top + ".")), None)


def project_caller(frame):
    frame = frame.f_back
    while frame is not None and module_of(frame.f_code) is None:
        frame = frame.f_back
    return None if frame is None else module_of(frame.f_code)


def trace_commands(commands: list[list[str]]) -> list[tuple[str, str, str]]:
    """(caller module, callee module, function) of every entry of the config into a module."""
    entries = []

    def profile(frame, event, _):
        if event != "call":
            return
        callee = module_of(frame.f_code)
        if callee is None:
            return
        code = frame.f_code
        params = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
        held = [p for p in params if isinstance(frame.f_locals.get(p), (Config, CoreSpec))]
        caller = project_caller(frame)
        if not held or caller is None or caller == callee:
            return
        if held == ["self"] and layer(callee) <= layer(caller):
            return
        entries.append((caller, callee, code.co_name))

    for argv in commands:
        sys.setprofile(profile)
        try:
            rc = train.main(argv)
        finally:
            sys.setprofile(None)
        assert rc == 0, argv
    return entries


def test_the_config_enters_few_modules_and_flows_down(tmp_path):
    run, pop, sac = (str(tmp_path / n) for n in ("run", "pop", "sac"))
    small = ["--env", "cartpole", "--num-envs", "8", "--num-eval-envs", "2"]
    entries = trace_commands([
        [*small, "--total-steps", "2048", "--run-dir", run],
        ["--resume", run, "--total-steps", "12000"],
        ["play", run, "--num-eval-envs", "2"],
        ["export", run, str(tmp_path / "policy.npz")],
        ["--env", "pendulum", "--agent", "sac", "--num-envs", "4", "--num-eval-envs", "2", "--total-steps", "600",
         "--run-dir", sac],
        [*small, "--total-steps", "8192", "--epochs", "2", "--num-seeds", "2", "--pbt", "--pbt-every", "1",
         "--pbt-explore", "learning_rate=log:1e-4:1e-3", "--run-dir", pop],
    ])
    modules = collections.Counter(callee for _, callee, _ in entries)
    climbs = [f"{caller} -> {callee}.{fn}" for caller, callee, fn in entries if layer(callee) > layer(caller)]
    assert {"sim.run.trainer", "sim.run.build", "sim.core.engine"} <= set(modules)  # the tracer sees the walk
    assert len(modules) <= MAX_MODULES, modules
    assert len(climbs) <= MAX_CLIMBS, climbs
