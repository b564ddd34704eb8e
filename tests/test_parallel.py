"""Data parallelism on CPU with forced host devices, and two processes forming one mesh.

Each check runs in a fresh subprocess (tests/multidevice_checks.py) because the device
count must be set before JAX starts.
"""

import json
import os
import socket
import subprocess
import sys

import pytest

from tests.helpers import extra

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "tests", "multidevice_checks.py")


def _env(devices: int, **extra) -> dict:
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}")
    env.setdefault("FUSEDRL_JAX_CACHE", os.path.join(ROOT, ".jax_cache"))
    env.update(extra)
    return env


def _result(output: str) -> dict:
    lines = [line for line in output.splitlines() if line.startswith("RESULT ")]
    assert lines, output[-3000:]
    return json.loads(lines[-1][len("RESULT "):])


def run_check(check: str, devices: int, timeout: int = 600, **extra) -> dict:
    proc = subprocess.run([sys.executable, SCRIPT, check], capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT, env=_env(devices, **extra))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return _result(proc.stdout)


@pytest.mark.parametrize("devices", [2, pytest.param(4, marks=pytest.mark.slow)])  # (24 s for 4)
def test_gradients_match_single_device(devices):
    out = run_check("gradients", devices)
    # PPO: the loss gradient averaged over devices equals the global-batch gradient.
    assert out["ppo_grad_max_diff"] <= 1e-5 * max(1.0, out["ppo_grad_max"]), out
    # SAC: a whole update step (alpha, critic, actor, targets) equals the single-device step.
    assert out["sac_max_diff"] <= 1e-5, out
    # CrossQ: so does its step, batch statistics included (each device's normalises with the global ones)
    assert out["crossq_max_diff"] <= 1e-5 and out["crossq_stats_max_diff"] <= 1e-5, out


# fasttd3: each device's ring holds its own envs' steps, and its n-step sequences read them
# crossq: its batch statistics stay identical on every device
# shac: the policy's gradient through each device's envs, and the critic's, averaged over devices
# es: each device plays its own members, every device gathers all their fitness
# evosax: every device asks its strategy for the same members and is told the same fitness
# bc: each device's envs labelled by the same teacher, the student's gradients averaged
@pytest.mark.parametrize("agent, devices", [("ppo", 2), ("sac", 2), ("fasttd3", 2), ("crossq", 2), ("shac", 2),
                                            ("es", 2), ("evosax", 2), ("bc", 2),
                                            pytest.param("ppo", 4, marks=pytest.mark.slow)])
def test_epoch_keeps_parameters_identical_and_state_in_place(agent, devices):
    out = run_check(f"{agent}_epoch", devices)
    assert out["devices"] == devices
    assert out["params_identical"], out
    assert out["iterations_ok"], out
    assert out["env_shards_differ"], out  # each device steps its own envs
    assert out["shard_shape"][0] == devices
    assert out["loss_finite"]


@pytest.mark.parametrize("layout", ["spread", "split"])
def test_a_population_over_two_devices(layout):
    out = run_check(f"population_{layout}", 2)
    assert out["devices"] == 2 and out["spread"] == (layout == "spread")
    # spread: 2 seeds x 2 values = 4 members, 2 whole members per device, leaves [M, ...];
    # split: 3 seeds x 1 value = 3 members, each one's 8 envs split 4 + 4, leaves [M, n, ...]
    assert out["shape"][:3] == ([4, 8, 4] if layout == "spread" else [3, 2, 4]), out
    assert out["loss_shape"] == [out["members"]]
    assert out["iterations_ok"] and out["copies_identical"], out
    assert out["member_max_diff"] <= 1e-4, out


@pytest.mark.parametrize("layout", ["spread", "split"])
def test_a_pbt_step_over_two_devices_copies_what_its_lineage_says(layout):
    out = run_check(f"pbt_{layout}", 2)
    assert out["devices"] == 2 and out["spread"] == (layout == "spread")
    # member 1 (NaN fitness) and member 0 (the worst finite) copy the best: learner state for
    # both, envs and ring for member 1 only; checked leaf for leaf against the state before
    assert out["replaced"][:2] == [True, True] and not any(out["replaced"][2:]), out
    assert out["copied_as_told"] and out["sharding_kept"], out


def test_zero_size_state_leaves_keep_their_sharding_across_epochs():
    out = run_check("zero_size", 2)
    assert out == {"devices": 2, "epochs": 3, "all_stacked": True}, out


def test_cartpole_learns_on_two_devices():
    out = run_check("learns", 2, timeout=900)
    assert out["devices"] == 2
    assert out["eval_return"] >= 475, out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_processes_form_one_mesh_and_agree():
    address = f"127.0.0.1:{_free_port()}"
    procs = [subprocess.Popen([sys.executable, SCRIPT, "multihost"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, cwd=ROOT,
                              env=_env(2, JAX_COORDINATOR_ADDRESS=address, JAX_NUM_PROCESSES="2",
                                       JAX_PROCESS_ID=str(i)))
             for i in range(2)]
    outs = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=600)
        assert proc.returncode == 0, stderr[-3000:]
        outs.append(_result(stdout))
    assert {o["process"] for o in outs} == {0, 1}
    for o in outs:
        assert o["processes"] == 2 and o["devices"] == 4 and o["local_devices"] == 2
        assert o["local_identical"]
    assert outs[0]["param_sha256"] == outs[1]["param_sha256"]  # bitwise equal across hosts
    assert outs[0]["loss"] == outs[1]["loss"]


def test_train_py_across_two_processes_logs_and_checkpoints_from_process_0(tmp_path):
    address = f"127.0.0.1:{_free_port()}"
    run_dir = tmp_path / "run"
    flags = ["--env", "cartpole", "--num-envs", "8", "--batch-size", "8", "--num-minibatches", "2",
             "--unroll-length", "8", "--total-steps", "512", "--epochs", "2", "--num-eval-envs", "4",
             "--episode-length", "50", "--run-dir", str(run_dir), "--coordinator", address, "--num-processes", "2"]

    def run_both(extra):
        procs = [subprocess.Popen([sys.executable, os.path.join(ROOT, "train.py"), *flags, *extra,
                                   "--process-id", str(i)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=_env(2))
                 for i in range(2)]
        outs = [proc.communicate(timeout=600) for proc in procs]
        for proc, (stdout, stderr) in zip(procs, outs):
            assert proc.returncode == 0, stderr[-3000:]
        return outs

    outs = run_both(["--checkpoint-every", "1"])
    assert "compiled in" in outs[0][0] and "compiled in" not in outs[1][0]
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["env_steps"] for r in records] == [256, 512]  # one writer: no duplicated lines
    assert (run_dir / "checkpoints" / "epoch_000002" / "state.bin").exists()
    # Both processes resume from process 0's checkpoint, each restoring its own shards.
    outs = run_both(["--resume", str(run_dir), "--total-steps", "1024"])
    assert "resuming" in outs[0][0]
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["env_steps"] for r in records] == [256, 512, 1024]  # the new config: 512-step epochs


# 4 members spread over the 4 devices (19 s; spread over one process's two devices by default
# in test_a_population_over_two_devices); 3: each split over them
@pytest.mark.parametrize("seeds", [pytest.param(4, marks=pytest.mark.slow), 3])
def test_a_population_across_two_processes(tmp_path, seeds):
    address = f"127.0.0.1:{_free_port()}"
    run_dir = tmp_path / "run"
    flags = ["--env", "cartpole", "--num-envs", "8", "--batch-size", "8", "--num-minibatches", "2",
             "--unroll-length", "8", "--total-steps", "512", "--epochs", "2", "--num-eval-envs", "4",
             "--episode-length", "50", "--run-dir", str(run_dir), "--coordinator", address, "--num-processes", "2",
             "--num-seeds", str(seeds)]
    procs = [subprocess.Popen([sys.executable, os.path.join(ROOT, "train.py"), *flags, "--process-id", str(i)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=_env(2))
             for i in range(2)]
    outs = [proc.communicate(timeout=600) for proc in procs]
    for proc, (stdout, stderr) in zip(procs, outs):
        assert proc.returncode == 0, stderr[-3000:]
    layout = "whole members spread over the devices" if seeds == 4 else "each split over the devices"
    assert layout in outs[0][0] and "ranked by IQM" in outs[0][0] and "compiled in" not in outs[1][0]
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert sorted((r["epoch"], r["member"]) for r in records if "member" in r) == [
        (e, m) for e in (1, 2) for m in range(seeds)]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert [m["seed"] for m in summary["members"]] == list(range(seeds))
    assert all(m["eval_return"] is not None for m in summary["members"])


# ---- the default device count of a CPU host ----
@pytest.mark.parametrize("cores, flags, want", [
    (2, dict(env="ant"), 2),  # 4096 envs, batches of 2048: both cores
    (3, dict(env="ant"), 2),  # 3 divides neither: the most cores that divide
    (32, dict(env="humanoid"), 32),  # 2048 envs, batches of 1024
    (4, dict(env="ant", num_envs=6, batch_size=6), 3),
    (2, dict(env="ant", num_envs=7, batch_size=7), None),  # one device
    pytest.param(4, dict(env="CheetahRun"), 4, marks=extra("playground")),  # 2048 envs, batches of 1024
    (4, dict(env="cartpole"), None),  # the networks dominate: one device
    (4, dict(env="pendulum", agent="sac"), None),
    (4, dict(env="ant", agent="sac"), None),  # a replay agent's gradient steps dominate
    (2, dict(env="cartpole", num_seeds=3), 1),  # a population: cores that divide its members
    (4, dict(env="cartpole", num_seeds=6), 3),
])
def test_a_cpu_host_trains_on_as_many_cores_as_divide_the_run(monkeypatch, cores, flags, want):
    from sim.run import devices as parallel
    from sim.run.config import defaults_for

    monkeypatch.setattr(parallel, "host_cores", lambda: cores)
    flags = dict(flags)
    cfg = defaults_for(flags.pop("env"), flags.pop("agent", "ppo")).replace(**flags)
    assert parallel.default_devices(cfg) == want


def test_a_resume_continues_on_the_device_count_its_run_trained_on(tmp_path):
    from sim.run.checkpoints.checkpoint import load_run_config
    from sim.run.config import defaults_for

    cfg = defaults_for("cartpole", "ppo")
    for given, derived, want in ((None, 2, 2), (None, 1, 1), (4, 4, 4), (None, None, None)):
        saved = dict(cfg.replace(devices=given).to_dict(), derived={} if derived is None else {"devices": derived})
        (tmp_path / "config.json").write_text(json.dumps(saved))
        assert load_run_config(str(tmp_path)).hosts.devices == want
