"""A run's exported policy (`train.py export RUN policy.npz`) under fixed joystick commands, in
MJX (the task as it trained, its observation noise off) and in native MuJoCo (`play --sim2sim`'s
loop, sim/run/policy/sim2sim.py), side by side: whether the robot fell and the velocity it tracked.
For policies trained elsewhere whose run directory did not travel (a lent accelerator's run:
its config.json and policy file suffice).

    .venv/bin/python benchmarks/sim2sim_file.py benchmarks/results/go1_walk/config.json \\
        benchmarks/results/go1_walk/go1_policy.npz --commands 0.5,0,0 1,0,0 0,0,0.8 [--out FILE.md]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # repo root

import jax  # noqa: E402
import mujoco  # noqa: E402
import numpy as np  # noqa: E402

from sim.run.policy import sim2sim  # noqa: E402
from sim.run.build import build_evaluation  # noqa: E402
from sim.run.commands import velocity_command  # noqa: E402
from sim.run.config import Config  # noqa: E402
from sim.run.policy.export import numpy_policy  # noqa: E402
from envs.robot_obs import SIM2SIM  # noqa: E402


def in_mjx(evaluation, policy, command, seconds: float) -> dict:
    """The policy on the task in MJX under `command`, one env, noise off, stepped from the host."""
    env = evaluation.base_env.unwrapped
    joystick = SIM2SIM[evaluation.cfg.env]().bind(env.playground_env)
    mirror = mujoco.MjData(joystick.model)
    state = jax.jit(env.reset)(jax.random.PRNGKey(0))
    step = jax.jit(env.step)
    velocity, fell_at = [], None
    for k in range(int(round(seconds / joystick.dt))):
        state = step(state, np.clip(np.asarray(policy(np.asarray(state.obs)[None]))[0], -1, 1))
        mirror.sensordata[:] = np.asarray(state.physics.data.sensordata)
        velocity.append(joystick.velocity(mirror))
        if float(state.terminated) > 0:
            fell_at = (k + 1) * joystick.dt
            break
    return {"fell_at_s": fell_at, "tracked_velocity": sim2sim.settled_mean(velocity, joystick.dt).tolist()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config")
    parser.add_argument("policy")
    parser.add_argument("--commands", nargs="+", default=["0.5,0,0", "1,0,0", "0,0,0.8"])
    parser.add_argument("--seconds", type=float, default=sim2sim.SECONDS)
    parser.add_argument("--out")
    args = parser.parse_args()
    with open(args.config) as f:
        flat = json.load(f)
    rows = ["| command (vx, vy, yaw) | MJX: fell | MJX: tracked | native MuJoCo: fell | native MuJoCo: tracked |",
            "| --- | --- | --- | --- | --- |"]
    policy = numpy_policy(args.policy)
    for text in args.commands:
        command = velocity_command(text)
        overrides = flat.get("env_config", []) + [f"command={json.dumps(list(command))}", "noise_config.level=0.0"]
        cfg = Config.from_dict(dict(flat, env_config=overrides, devices=1))
        evaluation = build_evaluation(cfg)
        mjx = in_mjx(evaluation, policy, command, args.seconds)
        native = sim2sim.run(policy, evaluation, command, args.seconds, engine="numpy policy")
        show = lambda v: ", ".join(f"{x:+.2f}" for x in v)  # noqa: E731
        fell = lambda t: "no" if t is None else f"at {t:.2f} s"  # noqa: E731
        rows.append(f"| {show(command)} | {fell(mjx['fell_at_s'])} | {show(mjx['tracked_velocity'])} | "
                    f"{fell(native['fell_at_s'])} | {show(native['tracked_velocity'])} |")
        print(rows[-1], flush=True)
    table = "\n".join(rows) + "\n"
    print(table)
    if args.out:
        with open(args.out, "w") as f:
            f.write(table)


if __name__ == "__main__":
    main()
