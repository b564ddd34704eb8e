"""Distillation, measured: a teacher trained on what a robot cannot see, a student distilled from
it (`--agent bc` / `bc_rnn --teacher RUN_DIR`) that sees only what the robot sees, and, for
partial observations, the student's own agent trained from scratch on the same observation.

    .venv/bin/python benchmarks/distill.py --task cartpole [--seeds 0,1,2]
        [--out benchmarks/results/distill_cartpole_2core]
    python benchmarks/distill.py --task cheetah [--teacher-steps 20000000] [--student-steps 4000000]
        [--randomize friction=0.5:1.5 mass=0.5:1.5] [--obs-noise 0.05] [--flags "..."] [--teacher-flags "..."]
        [--student-flags "--anneal-lr"] [--keep DIR] [--out DIR/distill_cheetah]

- cartpole: the teacher is `ppo` on cartpole (the full state); the student is `bc_rnn` on
  cartpole_privileged, reading its part "state" = [x, theta] (cartpole_no_vel's observation),
  the teacher its part privileged_state (the full state); the baseline is `ppo_rnn` on
  cartpole_no_vel. Figures: the env steps of each run's first evaluation >= 475, and of the one
  from which every later evaluation is >= 475 (all three evaluate every 16,384 env steps, on
  128 envs), and the final evaluations.
- cheetah: the teacher is `ppo` on CheetahRun under --randomize and --obs-noise whose policy reads
  the privileged parts (the clean state and the drawn dynamics: `--actor-obs
  privileged_state,dynamics`, with a privileged critic); two students, `bc` and `bc_rnn`, under
  the same settings read the noisy part "state". Figures: the teacher's and each student's final
  evaluations (the same env: nominal physics, noisy observations) and their ratios.

Every run is `train.py` in its own process with its own defaults (those of the task's envs),
one after another; `<out>.json` keeps every run's curve and `<out>.md` the table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # repo root

from benchmarks.common import run_process, write_table  # noqa: E402

SOLVED = 475.0
EVERY = 32  # cartpole: PPO's and PPO-RNN's epochs, so that all three evaluate every 16,384 env steps


def curve(run_dir: str) -> list[dict]:
    """(env steps, evaluation return) of each evaluated epoch of a run, and its training time."""
    out = []
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            row = json.loads(line)
            if "eval/episode_return" in row:
                out.append({"env_steps": row["env_steps"], "eval": row["eval/episode_return"],
                            "train_s": row.get("train_s")})
    return out


def train(run_dir: str, flags: list[str], log) -> dict:
    """One finished run (a run of --keep that finished before is read back, not run again)."""
    cmd = [sys.executable, "train.py", "--run-dir", run_dir, "--overwrite", "--no-progress", *flags]
    if os.path.isfile(os.path.join(run_dir, "summary.json")):
        check_settings(run_dir, flags)
        log(f"reusing the finished run {run_dir}: " + " ".join(flags))
        return {"flags": flags, "wall_s": None, "done": None, "curve": curve(run_dir)}
    log("$ " + " ".join(cmd[1:]))
    wall, text = run_process(cmd, timeout=3 * 3600)
    points = curve(run_dir)
    done = [line for line in text.splitlines() if line.startswith("done:")]
    log(f"  {wall:.0f} s; {done[-1] if done else ''}; evaluations: "
        + ", ".join(f"{p['eval']:.1f}@{p['env_steps']:,}" for p in points))
    return {"flags": flags, "wall_s": wall, "done": done[-1] if done else None, "curve": points}


def check_settings(run_dir: str, flags: list[str]) -> None:
    """Exits unless the finished run in `run_dir` was trained with the config `flags` resolve to."""
    _, text = run_process([sys.executable, "train.py", *flags, "--print-config"])
    want = json.loads(text[text.index("{"):])
    with open(os.path.join(run_dir, "config.json")) as f:
        saved = json.load(f)
    skip = {"run_dir", "overwrite", "progress", "resume", "resume_if_exists", "derived", "teacher"}
    differ = [k for k in want if k not in skip and saved.get(k) != want[k]]
    if differ:
        raise SystemExit(f"{run_dir} was trained with other settings ({', '.join(differ)}): remove it or --keep "
                         f"another directory")


def first_solved(points: list[dict]) -> int | None:
    """The env steps of the first evaluation >= 475 (None: none)."""
    return next((p["env_steps"] for p in points if p["eval"] >= SOLVED), None)


def held_from(points: list[dict]) -> int | None:
    """The env steps of the evaluation from which every later one is >= 475 (None: the last is not)."""
    held = None
    for p in reversed(points):
        if p["eval"] < SOLVED:
            break
        held = p["env_steps"]
    return held


def cartpole(args, root: str, log) -> tuple[list[dict], str]:
    runs, rows = [], []
    for seed in args.seeds:
        s = ["--seed", str(seed)]
        teacher_dir = os.path.join(root, f"teacher_{seed}")
        every = ["--epochs", str(EVERY)]  # PPO's 524,288 steps evaluated every 16,384, as the student's 212,992
        teacher = train(teacher_dir, ["--env", "cartpole", "--agent", "ppo", *every, *s], log)
        student = train(os.path.join(root, f"student_{seed}"),
                        ["--env", "cartpole_privileged", "--agent", "bc_rnn", "--teacher", teacher_dir, *s], log)
        scratch = train(os.path.join(root, f"scratch_{seed}"),
                        ["--env", "cartpole_no_vel", "--agent", "ppo_rnn", *every, *s], log)
        runs.append({"seed": seed, "teacher": teacher, "student": student, "scratch": scratch})

        def fmt(r):
            found, held = first_solved(r["curve"]), held_from(r["curve"])
            end = r["curve"][-1]["env_steps"]
            return " / ".join(f"{x:,}" if x is not None else f"not in {end:,}" for x in (found, held))

        rows.append(f"| {seed} | {fmt(teacher)} | {fmt(student)} | {fmt(scratch)} | "
                    f"{student['curve'][-1]['eval']:.1f} | {scratch['curve'][-1]['eval']:.1f} |")
    table = ("| seed | teacher ppo, cartpole | student bc_rnn, sees [x, theta] | ppo_rnn from scratch, cartpole_no_vel "
             "| student final | ppo_rnn final |\n| --- | ---: | ---: | ---: | ---: | ---: |\n" + "\n".join(rows)
             + "\n\nEnv steps to the first evaluation >= 475 / to the evaluation from which every later one is "
               ">= 475 (the student's 212,992 steps end before PPO's 524,288).")
    return runs, table


def cheetah(args, root: str, log) -> tuple[list[dict], str]:
    settings = ["--env", "CheetahRun", "--randomize", *args.randomize, "--obs-noise", str(args.obs_noise),
                *args.flags.split()]
    runs, rows = [], []
    for seed in args.seeds:
        s = ["--seed", str(seed)]
        teacher_dir = os.path.join(root, f"teacher_{seed}")
        teacher = train(teacher_dir, [*settings, "--agent", "ppo", "--actor-obs", "privileged_state,dynamics",
                                      "--privileged-critic", "--total-steps", str(args.teacher_steps),
                                      *args.teacher_flags.split(), *s], log)
        run = {"seed": seed, "teacher": teacher}
        t = teacher["curve"][-1]
        for agent in ("bc", "bc_rnn"):
            student = run[agent] = train(os.path.join(root, f"{agent}_{seed}"),
                                         [*settings, "--agent", agent, "--teacher", teacher_dir, "--total-steps",
                                          str(args.student_steps), *args.student_flags.split(), *s], log)
            st = student["curve"][-1]
            best = max(p["eval"] for p in student["curve"])
            rows.append(f"| {seed} | {t['eval']:.1f} ({t['env_steps']:,}) | {agent} | {st['eval']:.1f} "
                        f"({st['env_steps']:,}) | {st['eval'] / t['eval']:.2f} | {best / t['eval']:.2f} |")
        runs.append(run)
    table = ("| seed | teacher ppo, reads clean state + dynamics: final eval (env steps) | student, reads the noisy "
             "state | its final eval (env steps) | final / teacher | best / teacher |\n"
             "| --- | ---: | --- | ---: | ---: | ---: |\n" + "\n".join(rows))
    return runs, table


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--task", choices=("cartpole", "cheetah"), required=True)
    p.add_argument("--seeds", default="0", help="comma-separated seeds, one teacher/student(/scratch) set each")
    p.add_argument("--teacher-steps", type=int, default=20_000_000, help="cheetah: the teacher's env steps")
    p.add_argument("--student-steps", type=int, default=4_000_000, help="cheetah: the student's env steps")
    p.add_argument("--randomize", nargs="+", default=["friction=0.5:1.5", "mass=0.5:1.5"])
    p.add_argument("--obs-noise", type=float, default=0.05)
    p.add_argument("--flags", default="", help="cheetah: more train.py flags for the teacher and the student alike "
                                                "(e.g. '--num-envs 128 --batch-size 64' for a CPU)")
    p.add_argument("--teacher-flags", default="", help="cheetah: more train.py flags for the teacher")
    p.add_argument("--student-flags", default="--anneal-lr", help="cheetah: more train.py flags for the students")
    p.add_argument("--out", default=None, help="figures to OUT.json and OUT.md")
    p.add_argument("--keep", default=None, help="keep the runs in this directory (default: a temporary one); a run "
                                                "found finished there is reused, so a cut-short benchmark continues")
    args = p.parse_args(argv)
    args.seeds = [int(s) for s in args.seeds.split(",")]
    root = args.keep or tempfile.mkdtemp(prefix="distill_")
    lines = []

    def log(text):
        print(text, flush=True)
        lines.append(text)

    try:
        runs, table = (cartpole if args.task == "cartpole" else cheetah)(args, root, log)
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    print(table)
    if args.out:
        command = "benchmarks/distill.py " + " ".join(sys.argv[1:] if argv is None else argv)
        with open(args.out + ".json", "w") as f:
            json.dump({"command": command, "runs": runs, "log": lines}, f, indent=1)
        write_table(args.out, command, table)


if __name__ == "__main__":
    main()
