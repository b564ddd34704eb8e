"""No command line ends in a traceback: a few hundred random ones (every agent's flags, given to
the right agent and to others, values valid and not, every env family, --env-config entries
and --overwrite) go through train.py's parsing and validation, and each ends in exit 0 or in
one line and exit 2; a sample of the valid ones then trains for a tiny budget, which must end
the same way; and a sample given --overwrite of an earlier run's directory leaves that run as
it was whenever it is refused, whatever refuses it, before its programs would compile."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import random
import typing

import pytest

import agents
import train
from sim.run import launch
from sim.run.config import Config, TrainCommand

SEED = int(os.environ.get("FUSEDRL_FUZZ_SEED", "0"))  # another seed draws other lines
LINES = 300
ENVS = ["cartpole", "acrobot", "pendulum", "mountain_car_continuous", "ant", "humanoid", "swimmer", "CheetahRun",
        "HumanoidWalk", "CartpoleBalance", "Go1JoystickFlatTerrain", "gymnax/CartPole-v1", "gymnax/Pendulum-v1",
        "gymnax/Breakout-MinAtar", "antt", "Cheetahrun"]
CLASSIC = {"cartpole", "acrobot", "pendulum", "mountain_car_continuous"}
# Flags that leave this process (W&B, a multi-host coordinator, --help's exit) or that only
# name files for later: not drawn.
NOT_DRAWN = {"wandb", "wandb_project", "wandb_entity", "wandb_group", "wandb_tags", "wandb_mode", "coordinator",
             "num_processes", "process_id", "compile_cache", "print_config", "list_envs", "video", "progress"}
INTS = ["0", "1", "2", "3", "4", "7", "8", "16", "64", "100", "512", "-1", "10000000000000", "abc", "1.5"]
FLOATS = ["0", "0.5", "1", "0.97", "1.5", "-1", "1e-3", "3e-4", "nan", "inf", "x"]
# --env-config entries: of Brax's constructors, Playground's configs, a joystick robot's command;
# well-formed or not, of the right type or not, keys the run sets itself.
ENV_CONFIGS = ["ctrl_cost_weight=0.1", "ctrl_cost_weight=abc", "bogus_kwarg=1", "n_frames=0", "healthy_z_range=[1]",
               "command=[1,0,0]", "command=1", "command=abc", "command=[NaN,0,0]", 'noise_config={"level": 0}',
               "noise_config.level=0.5", "push_config.enable=false", "ctrl_dt=0", "ctrl_dt=0.02", "sim_dt=-1",
               "episode_length=5", "action_repeat=2", "backend=mjx", "impl=warp", "name=ant", "x", "=1"]
SWEEPS = ["learning-rate=1e-3,3e-4", "discounting=0.9,0.99", "entropy-cost=0.01", "tau=0.01,0.02", "num-envs=8,16",
          "learning-rate=-1", "learning-rate=a,b", "nonsense", "max-grad-norm=1,inf", "epsilon-start=1,0.5"]


def _values(hint, rng: random.Random, name: str = "") -> list[str]:
    """The tokens after the flag of field `name`, of type `hint`: a valid value or not."""
    if name == "env_config":
        return rng.sample(ENV_CONFIGS, rng.randint(1, 2))
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Annotated:
        return _values(args[0], rng)
    if origin is typing.Union:  # Optional[X]
        inner = [a for a in args if a is not type(None)][0]
        return ["None"] if rng.random() < 0.15 else _values(inner, rng)
    if origin is typing.Literal:
        return [rng.choice([*map(str, args), "bogus"])]
    if origin is tuple:
        if args and args[0] is str:
            return [rng.choice(SWEEPS)]
        return rng.choice([["64", "64"], ["16"], ["0"], ["-3", "4"], ["a"], ["32", "32", "32"]])
    if hint is int:
        return [rng.choice(INTS)]
    if hint is float:
        return [rng.choice(FLOATS)]
    return [rng.choice(["x", "/nonexistent/run", ""])]


def _flags(agent: str, skip=()) -> list[tuple[str, object]]:
    """(field name, type) of the run's fields and `agent`'s (not those in `skip`)."""
    sections = [type(f.default) for f in dataclasses.fields(Config) if dataclasses.is_dataclass(f.default)]
    out = []
    for cls in (TrainCommand, Config, *sections, agents.get(agent).config):
        hints = typing.get_type_hints(cls, include_extras=True)
        out += [(f.name, hints[f.name]) for f in dataclasses.fields(cls) if not dataclasses.is_dataclass(f.default)
                and f.name not in (*NOT_DRAWN, *skip, "agent", "env", "config", "agent_config")]
    return out


def command_lines(n: int = LINES, seed: int = SEED, skip=()) -> list[list[str]]:
    """`n` random training command lines (never a flag named in `skip`)."""
    rng = random.Random(seed)
    every = sorted({flag for agent in agents.names() for flag in _flags(agent, skip)})
    lines = []
    for _ in range(n):
        argv = ["--env", rng.choice(ENVS)]
        agent = "ppo"
        if rng.random() < 0.85:
            agent = rng.choice([*agents.names(), "a2c"] if rng.random() < 0.05 else agents.names())
            argv += ["--agent", agent]
        # mostly the agent's own flags (their values are what is drawn), sometimes any agent's
        pool = every if rng.random() < 0.2 or agent not in agents.names() else _flags(agent, skip)
        drawn = rng.sample(pool, rng.randint(0, 5))
        if rng.random() < 0.2 and "env_config" not in skip:  # the env's own config, often
            drawn.append(("env_config", tuple[str, ...]))
        for name, hint in drawn:
            flag = "--" + name.replace("_", "-")
            if hint is bool:
                argv.append(flag if rng.random() < 0.5 else f"--no-{name.replace('_', '-')}")
            else:
                argv += [flag, *_values(hint, rng, name)]
        lines.append(argv)
    return lines


def run_main(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = train.main(argv)
        except SystemExit as exit_:  # what a user would see as this exit code
            code = exit_.code if isinstance(exit_.code, int) else 1
        except BaseException as exc:  # a traceback: the thing this test exists to catch
            raise AssertionError(f"python train.py {' '.join(argv)} raised {exc!r}") from exc
    return code, out.getvalue(), err.getvalue()


def check_ending(argv, code, out, err) -> None:
    line = f"python train.py {' '.join(argv)}"
    assert code in (0, 2), f"{line}: exit {code}: {err[-2000:]}"
    if code == 2:
        lines = [t for t in err.splitlines() if t.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: ") and "--" in lines[0], f"{line}: {err[-2000:]}"


def test_random_command_lines_end_in_exit_0_or_one_line_and_exit_2(tmp_path):
    valid, codes = [], {0: 0, 2: 0}
    for argv in command_lines():
        code, out, err = run_main([*argv, "--print-config"])
        check_ending(argv, code, out, err)
        codes[code] += 1
        if code == 0:
            json.loads(out)  # the resolved config
            valid.append(argv)
    # both endings are well represented, so the lines test something
    assert codes[0] >= LINES // 10 and codes[2] >= LINES // 3, codes


def _cheap(argv) -> bool:
    """A valid line on a classic-control env whose first iteration is small."""
    cfg = train.parse_config(argv)
    return (cfg.env in CLASSIC and cfg.population_size <= 4 and cfg.hosts.devices in (None, 1)
            and cfg.run.resume is None and cfg.steps_per_iteration <= 20_000
            and cfg.prefill_steps <= 20_000 and cfg.num_envs <= 512
            and getattr(cfg.agent_config, "max_replay_size", 0) <= 1_000_000 and not cfg.run.resume_if_exists)


def test_a_sample_of_the_valid_lines_trains_for_a_tiny_budget(tmp_path):
    """Valid lines of two agents train: each ends in exit 0 with its metrics written (a line the
    env refuses when it is built ends in one line and exit 2, and the next one is tried)."""
    tiny = ["--total-steps", "1", "--epochs", "1", "--num-eval-envs", "2", "--episode-length", "20", "--no-progress"]
    trained, tried = set(), 0
    for argv in command_lines():
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            try:
                ok = _cheap([*argv, *tiny])
            except (train.UsageError, SystemExit):
                continue
        agent = train.parse_config([*argv, *tiny]).agent
        if not ok or agent in trained or tried >= 6:
            continue
        tried += 1
        full = [*argv, *tiny, "--run-dir", str(tmp_path / f"run{tried}")]
        code, out, err = run_main(full)
        check_ending(full, code, out, err)
        if code == 0:
            assert (tmp_path / f"run{tried}" / "metrics.jsonl").exists()
            trained.add(agent)
        if len(trained) == 2:
            break
    assert len(trained) == 2, (trained, tried)


class Compiling(Exception):
    """Where a line given --overwrite that passed every check is stopped: its programs would
    compile now (the earlier run's files are removed only after they have, and fit)."""


def _files(run_dir) -> dict:
    """Every file of a run directory (its lock aside) with its size and modification time."""
    return {os.path.relpath(os.path.join(folder, name), run_dir): os.stat(os.path.join(folder, name))[6:9]
            for folder, _, names in os.walk(run_dir) for name in names if name != ".lock"}


def test_an_earlier_run_survives_every_refusal_of_a_line_given_overwrite(tmp_path, monkeypatch):
    """Lines drawn as above (their env's config entries too), each given --overwrite of a
    directory that holds an earlier run: one refused, at parsing, at building its envs and
    agent, at reading its teacher, leaves every file of that run as it was; one that passes
    every check is stopped where its programs would compile, with the files as they were too."""
    earlier = str(tmp_path / "earlier")
    tiny = ["--env", "cartpole", "--num-envs", "8", "--batch-size", "8", "--num-minibatches", "2", "--unroll-length",
            "8", "--total-steps", "256", "--epochs", "1", "--num-eval-envs", "2", "--no-progress"]
    assert run_main([*tiny, "--run-dir", earlier])[0] == 0
    before = _files(earlier)
    def compiling(*args, **kwargs):
        raise Compiling()

    monkeypatch.setattr(launch, "compile_programs", compiling)
    skip = ("run_dir", "resume", "resume_if_exists", "overwrite", "stall_timeout")
    outcomes, built = {"refused": 0, "refused once parsed": 0, "compiling": 0}, 0
    for argv in command_lines(n=160, seed=SEED + 1, skip=skip):
        line = [*argv, "--run-dir", earlier, "--overwrite"]
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            try:
                cfg = train.parse_config(line)
            except (train.UsageError, SystemExit):
                cfg = None
        if cfg is not None and cfg.env not in CLASSIC:
            built += 1  # a physics env takes seconds to build: a few of them
            if built > 6:
                continue
        try:
            code, out, err = run_main(line)
        except AssertionError as raised:
            if not isinstance(raised.__cause__, Compiling):
                raise
            outcomes["compiling"] += 1
        else:
            check_ending(line, code, out, err)
            assert code == 2, f"python train.py {' '.join(line)}: exit {code}"
            outcomes["refused"] += 1
            outcomes["refused once parsed"] += cfg is not None  # by its envs, agent, teacher
        assert _files(earlier) == before, f"python train.py {' '.join(line)} changed the earlier run"
    # (seeds 0 to 3: 123 to 128 refused, 4 to 11 of them once parsed; 8 to 11 compiling)
    assert outcomes["refused"] >= 40 and outcomes["refused once parsed"] >= 2 and outcomes["compiling"] >= 2, outcomes


@pytest.mark.parametrize("argv, text", [
    (["--env", "cartpole", "--num-envs", "512"], "use --num-envs 256, or change --batch-size/--num-minibatches"),
    (["--env", "cartpole", "--num-envs", "12"], "use --num-envs 8 or 16, or change"),
])
def test_the_num_envs_message_names_the_valid_neighbours(argv, text):
    code, out, err = run_main([*argv, "--print-config"])
    assert code == 2 and text in err, err


def test_the_hyper_parameter_tree_does_not_depend_on_which_are_set():
    """An unset optional hyper-parameter (max-grad-norm: no clipping) is +inf in the state, so a
    run resumes, and a population sweeps, with it given or not."""
    from agents.config import hyper_params

    for agent in agents.names():
        unset = hyper_params(Config(agent=agent).replace(max_grad_norm=None).agent_config)  # (APG's default is 1)
        given = hyper_params(Config(agent=agent).replace(max_grad_norm=1.0).agent_config)
        assert [k for k, _ in unset.items()] == [k for k, _ in given.items()], agent
        assert float(unset.max_grad_norm) == float("inf") and float(given.max_grad_norm) == 1.0


def test_a_run_without_max_grad_norm_resumes_with_it_given(tmp_path):
    from sim.run.trainer import train as run
    from tests.helpers import small_config

    cfg = small_config("pendulum", "sac", epochs=4)
    assert cfg.agent_config.max_grad_norm is None
    run(cfg, run_dir=str(tmp_path), log=lambda *a: None, stop_after=2)
    record = run(cfg.replace(resume=str(tmp_path), max_grad_norm=1.0), log=lambda *a: None)
    assert record["epoch"] == 4


def test_the_epoch_program_compiles_while_the_others_are_traced():
    """The start's wait is the epoch's compile: it begins as soon as the epoch program is traced,
    before the other programs' tracing, and every program still comes back compiled."""
    import threading
    import time

    from sim.run.watchdog import Watchdog

    epoch_compiling = threading.Event()
    events = []

    class Lowered:
        def __init__(self, name):
            self.name = name

        def compile(self):
            events.append(f"compile {self.name}")
            if self.name == "epoch":
                epoch_compiling.set()
                time.sleep(0.2)
            return f"compiled {self.name}"

    def lower(name):
        def traced():
            events.append(f"trace {name}")
            if name == "evaluate":  # the epoch's compile has begun in a thread of its own
                assert epoch_compiling.wait(timeout=10), "the epoch program waited for every trace to compile"
            return Lowered(name)
        return traced

    lines = []
    programs = launch._compile_side_by_side({name: lower(name) for name in ("starts", "epoch", "evaluate")},
                                            Watchdog(lines.append), lines.append)
    assert programs == {name: f"compiled {name}" for name in ("starts", "epoch", "evaluate")}
    assert events[0] == "trace epoch"
    assert [line.split(" in ")[0] for line in lines] == [f"compiled the {n} program" for n in ("starts", "epoch", "evaluate")]
