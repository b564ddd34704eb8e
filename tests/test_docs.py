"""What the README and the docs site show, run: every `train.py` command of their bash blocks
parses and validates (`--print-config`), those on classic-control tasks train for a tiny
budget, the README's play and export commands run on a run of their own, and the worked
examples of adding an agent and adding a loop (docs/examples/) register and train."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import re
import shlex
import subprocess
import sys

import pytest

import envs
import train

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = ["README.md", *(os.path.join("docs", p) for p in sorted(os.listdir(os.path.join(ROOT, "docs")))
                        if p.endswith(".md"))]
CLASSIC = {"cartpole", "acrobot", "pendulum", "mountain_car_continuous", "cartpole_no_vel", "pendulum_no_vel"}
TINY = ["--total-steps", "1", "--epochs", "1", "--num-eval-envs", "2", "--episode-length", "20", "--no-progress"]


def commands() -> list[tuple[str, list[str]]]:
    """(page, argv) of every `train.py` command in the pages' bash blocks (continuation lines
    joined, comments dropped), the training command's first (not the setup line's)."""
    out = []
    for page in PAGES:
        text = open(os.path.join(ROOT, page)).read()
        for block in re.findall(r"```bash\n(.*?)```", text, re.S):
            for line in block.replace("\\\n", " ").splitlines():
                line = line.split("#", 1)[0].strip()
                if "train.py" not in line or "&&" in line:
                    continue
                out.append((page, shlex.split(line.split("train.py", 1)[1])))
    return out


def main(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = train.main(argv)
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A tiny trained run the pages' `runs/<...>` placeholders stand for."""
    path = str(tmp_path_factory.mktemp("docs") / "run")
    code, _, err = main(["--env", "cartpole", *TINY, "--run-dir", path])
    assert code == 0, err
    return path


def placed(argv: list[str], run_dir: str, tmp_path) -> list[str]:
    """argv with a page's run directories (runs/...) made real: the tiny run where one is read
    (resume, play, export), a fresh directory where one is written."""
    reads = argv[:1] in (["play"], ["export"]) or "--resume" in argv
    fresh = str(tmp_path / "fresh")
    out = [(run_dir if reads else fresh) if a.startswith("runs/") else a for a in argv]
    return [str(tmp_path / os.path.basename(a)) if a.endswith((".onnx", ".npz", ".mp4")) else a for a in out]


def _env_of(argv: list[str]) -> str:
    return argv[argv.index("--env") + 1] if "--env" in argv else "cartpole"


NUMBERS = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen " \
          "sixteen seventeen eighteen nineteen twenty".split()


def test_the_agents_page_counts_and_lists_every_registered_agent():
    import agents

    text = open(os.path.join(ROOT, "docs", "agents.md")).read()
    count = re.search(r"^(\w+) agents are registered", text, re.M)
    assert count and count.group(1).lower() == NUMBERS[len(agents.REGISTRY)], count and count.group(0)
    table = set(re.findall(r"^\| `(\w+)` \| (?:unroll|recurrent|replay|differentiable|generation) \|", text, re.M))
    assert table == set(agents.names()), table ^ set(agents.names())


def test_the_pages_show_commands():
    found = commands()
    assert len(found) >= 20 and any(a[:1] == ["play"] for _, a in found) and any(a[:1] == ["export"] for _, a in found)


def test_every_training_command_of_the_pages_validates(run_dir, tmp_path):
    for page, argv in commands():
        if argv[:1] in (["play"], ["export"]) or "--help" in argv:
            continue
        if not envs.installed(envs.family(_env_of(argv))):
            continue  # a task of an extra that is not installed (its tests skip likewise)
        line = placed(argv, run_dir, tmp_path)
        code, out, err = main([*line, "--print-config"])
        assert code == 0, f"{page}: python train.py {' '.join(argv)}: {err}"
        json.loads(out)


def test_the_classic_training_commands_of_the_pages_train_for_a_tiny_budget(run_dir, tmp_path):
    ran = 0
    for page, argv in commands():
        if argv[:1] in (["play"], ["export"]) or "--help" in argv or "--resume" in argv or "--devices" in argv:
            continue
        if _env_of(argv) not in CLASSIC:
            continue
        ran += 1
        line = [*placed(argv, run_dir, tmp_path), *TINY, "--run-dir", str(tmp_path / f"run{ran}")]
        code, out, err = main([a for a in line if a != "--resume-if-exists"])
        assert code == 0, f"{page}: python train.py {' '.join(line)}: {err[-2000:]}"
    assert ran >= 5


def test_the_readmes_play_and_export_commands_run(run_dir, tmp_path):
    ran = 0
    for page, argv in commands():
        if page != "README.md" or argv[:1] not in (["play"], ["export"]):
            continue
        line = placed(argv, run_dir, tmp_path)
        code, out, err = main(line)
        if argv[0] == "export" and line[2].endswith(".onnx") and importlib.util.find_spec("onnx") is None:
            # without the export extra: one line naming it, before anything is loaded
            assert code == 2 and "fusedrl[export]" in err and len(err.strip().splitlines()) == 1, err
        else:
            assert code == 0, f"python train.py {' '.join(line)}: {err}"
        ran += 1
    assert ran == 2


def _subprocess(script: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=os.pathsep.join([ROOT, os.path.join(ROOT, "docs")]))
    return subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=900)


def test_the_worked_example_of_an_agent_registers_with_one_line_and_learns(tmp_path):
    """docs/examples/reinforce.py, registered as its one line in agents/__init__.py would:
    `--agent reinforce` trains cartpole far above a random policy's 20."""
    script = f"""
import agents
agents.REGISTRY = (*agents.REGISTRY, "examples.reinforce:AGENT")
import json, train
code = train.main(["--env", "cartpole", "--agent", "reinforce", "--total-steps", "200000", "--epochs", "4",
                   "--num-eval-envs", "16", "--no-progress", "--run-dir", {str(tmp_path)!r}])
lines = [json.loads(line) for line in open({str(tmp_path / "metrics.jsonl")!r})]
print("RESULT", code, lines[-1]["eval/episode_return"])
"""
    proc = _subprocess(script)
    assert proc.returncode == 0, proc.stderr[-3000:]
    code, final = proc.stdout.split("RESULT")[1].split()
    assert code == "0" and float(final) >= 150, proc.stdout[-2000:]


def test_the_worked_example_of_a_loop_owns_its_state_and_resumes_bitwise(tmp_path):
    """docs/examples/scaled_rewards.py: its loop's state (each env's running return and their
    statistics) lives in the training state, is checkpointed, and a resumed run equals an
    uninterrupted one bit for bit."""
    script = f"""
import agents
agents.REGISTRY = (*agents.REGISTRY, "examples.scaled_rewards:AGENT")
from examples import scaled_rewards
scaled_rewards.register()
from sim.run.checkpoints import checkpoint
from sim.run.config import defaults_for
from sim.run.trainer import train
cfg = defaults_for("cartpole", "ppo_scaled").replace(num_envs=8, batch_size=8, num_minibatches=2, unroll_length=16,
                                                      total_steps=8 * 256, epochs=4, num_eval_envs=2, progress=False)
train(cfg, run_dir={str(tmp_path / "one")!r}, log=lambda *a: None)
train(cfg, run_dir={str(tmp_path / "two")!r}, log=lambda *a: None, stop_after=2)
train(cfg.replace(resume={str(tmp_path / "two")!r}), log=lambda *a: None)
one, two = (checkpoint.load_leaves(p, checkpoint.read_meta(p))
            for p in (checkpoint.latest({str(tmp_path / "one")!r}), checkpoint.latest({str(tmp_path / "two")!r})))
assert sorted(one) == sorted(two) and all(one[k].tobytes() == two[k].tobytes() for k in one)
count = float(one[".loop.stats.count"])
print("RESULT", count, [k for k in one if k.startswith(".loop")])
"""
    proc = _subprocess(script)
    assert proc.returncode == 0, proc.stderr[-3000:]
    count = float(proc.stdout.split("RESULT")[1].split()[0])
    assert count == 8 * 256  # every env step's return went into the statistics
    assert ".loop.returns" in proc.stdout
