"""Every benchmark runs end to end at a tiny size and produces its figures (finite and
positive); the profiling benchmark counts matmul work as written by hand, and the shared
helpers time what they say."""

import json
import math
import os
import re
import shlex
import sys
import types

import pytest

import envs
from benchmarks import (buffer_scaling, checkpoint_cost, common, compare_revisions, cpu_linalg, distill,
                        env_throughput, es_vs_brax, learning_curves, nonfinite_cost, pbt, pbt_vs_ray, physics_profile, population,
                        ppo_ablation, ppo_profile, ppo_update, ppo_vs_brax, read_profile, sac_profile, sac_step_tpu,
                        sac_vs_brax, scaling, sim2real, startup, suite, tpu_compile, versus, wallclock)

# One iteration of 64 env steps of a PPO run, its flags (train.py's and the benchmarks').
TINY_PPO = ["--num-envs", "4", "--unroll-length", "8", "--batch-size", "4", "--num-minibatches", "2",
            "--num-updates-per-batch", "1", "--num-eval-envs", "4"]
TINY_PPO_SET = ["unroll_length=8", "batch_size=4", "num_minibatches=2", "num_updates_per_batch=1"]
# Most tests run 2 epochs of one such iteration (128 steps): their programs are then the same
# ones, compiled once into JAX's cache (tests/conftest.py) and read back by the others.


def positive(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def numbers(pattern: str, text: str) -> list[float]:
    """The figures `pattern`'s group matched in printed text, thousands separators dropped."""
    found = [float(m.replace(",", "")) for m in re.findall(pattern, text)]
    assert found, f"no {pattern!r} in:\n{text}"
    return found


# ---- the shared helpers ----


def test_timed_returns_the_result_and_best_of_the_least_seconds():
    import time

    out, seconds = common.timed(lambda x: time.sleep(0.05) or x * 2, 3)
    assert out == 6 and 0.05 <= seconds < 5  # the call's own time, not less
    calls = iter([0.08, 0.02, 0.05])
    assert 0.02 <= common.best_of(lambda: time.sleep(next(calls)), 3) < 0.05  # the least of the three


def test_physics_limit_on_one_device_and_under_a_mesh():
    import jax

    import envs
    from sim.core import parallel

    env = envs.make("cartpole")
    for mesh in (None, parallel.make_mesh(1)):
        rate = common.physics_limit(env, 8, 4, 1, jax.random.PRNGKey(0), mesh)
        assert positive(rate.steps_per_s) and positive(rate.compile_s), mesh
    line = common.physics_line("cartpole", "jax", 8, 4, rate)
    assert numbers(r"steps_per_s=([\d,]+)", line) == [round(rate.steps_per_s)]


def test_parse_set_and_result_lines():
    assert common.parse_set(["num-envs=4", "backend=positional", "sizes=(8, 8)"]) == [
        ("num_envs", 4), ("backend", "positional"), ("sizes", (8, 8))]
    assert common.read_result("noise\nRESULT {\"sps\": 1}\nRESULT {\"sps\": 2}\n") == {"sps": 2}
    assert common.read_result("no result") is None


def test_brax_sps_is_divided_by_the_epochs_it_counts():
    clock = versus.BraxClock()
    clock.start = (0.0, 0.0)
    for i, (step, sps) in enumerate(((0, 0.0), (100, 80.0), (200, 90.0))):
        clock.calls.append((10.0 * i + 1, 5.0 * i + 1, step, {"training/sps": sps, "eval/episode_reward": 1.0}))
        clock.evals.append((1.0, 0.5))
    figures = clock.timing(sps_counts=3)
    assert figures["brax_last_sps"] == 30.0
    assert figures["sps"] == 100 / 9.0 and figures["cpu_sps"] == 100 / 4.5
    assert figures["curve"] == [(0, 1.0), (100, 1.0), (200, 1.0)]


def test_learning_curves_reads_what_brax_s_clock_prints_and_our_metrics(tmp_path, capsys, monkeypatch):
    clock = versus.BraxClock()
    clock.start = (100.0, 0.0)
    for step, ret, wall in ((0, 5.0, 160.0), (100, 50.0, 230.0), (200, 70.0, 250.0)):
        monkeypatch.setattr(versus, "clocks", lambda wall=wall: (wall, 0.0))
        clock(step, {"eval/episode_reward": ret})
    peer_log = tmp_path / "brax.log"
    peer_log.write_text(capsys.readouterr().out)
    # Step 0 is left out; the first epoch's stamp (130 s, with the compile) counts as one steady epoch (20 s).
    assert learning_curves.peer_curve(str(peer_log)) == [(100, 50.0, 20.0), (200, 70.0, 40.0)]

    metrics = tmp_path / "metrics.jsonl"
    rows = [{"lr": 1.0}, {"env_steps": 100, "train_s": 3.0, "perf/eval_s": 1.0, "eval/episode_return": 60.0},
            {"env_steps": 150, "train_s": 4.5, "train/episode_return": 9.0},
            {"env_steps": 200, "train_s": 6.0, "perf/eval_s": 1.0, "eval/episode_return": 80.0}]
    metrics.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert learning_curves.ours_curve(str(metrics)) == [(100, 60.0, 4.0), (200, 80.0, 8.0)]

    out = str(tmp_path / "curves")
    learning_curves.main(["--ours", str(metrics), "--peer", str(peer_log), "--marks", "100,200", "--out", out])
    text = open(out + ".md").read()
    assert "| ours | metrics.jsonl | 60.0 | 80.0 | 8.0 |" in text
    assert "| Brax's PPO | brax.log | 50.0 | 70.0 | 40.0 |" in text
    assert "| ours | mean (seeds) | **60.0** (1) | **80.0** (1) | |" in text
    assert os.path.getsize(out + ".png") > 0
    with pytest.raises(SystemExit, match="no evaluation rows"):
        learning_curves.ours_curve(str(peer_log))


# ---- one test (at least) per script ----


def test_env_throughput_prints_its_figures(capsys):
    env_throughput.main(["--env", "cartpole", "--num-envs", "8", "--steps", "4", "--repeats", "1"])
    printed = capsys.readouterr().out
    assert all(map(positive, numbers(r"steps_per_s=([\d,]+)", printed) + numbers(r"compile_s=([\d.]+)", printed)))
    env_throughput.main(["--env", "cartpole", "--num-envs", "8", "--steps", "4", "--repeats", "1", "--auto-reset",
                         "--unroll-length", "2"])
    rates = numbers(r"([\d,]+) steps/s", capsys.readouterr().out)
    assert len(rates) == 3 and all(map(positive, rates))


def test_update_flops_counted_layer_by_layer_by_hand():
    # obs 4 -> policy (8,) -> 2 outputs; obs 4 -> value (16,) -> 1; T = 2 steps, 3 passes.
    hp = types.SimpleNamespace(policy_hidden_sizes=(8,), value_hidden_sizes=(16,), unroll_length=2,
                               num_updates_per_batch=3)
    cfg = types.SimpleNamespace(agent_config=hp, action_repeat=1)
    flops = ppo_profile.update_flops(cfg, obs_size=4, out_size=2)
    policy, value = 4 * 8 + 8 * 2, 4 * 16 + 16 * 1  # MACs per row: 48 and 80; first layers 32 and 64
    assert flops["rollout policy"] == 2 * policy
    assert flops["GAE values"] == 2 * value * (2 + 2) / 2
    # forward 2 MACs, weight gradients 2 MACs, input gradients 2 MACs but the first layer's.
    assert flops["update passes"] == 3 * ((6 * policy - 2 * 32) + (6 * value - 2 * 64))
    cfg.action_repeat = 2  # one network row per agent step: half as many per env step
    assert ppo_profile.update_flops(cfg, 4, 2)["update passes"] == flops["update passes"] / 2


def test_ppo_profile_runs_and_writes_its_figures(tmp_path, capsys):
    out = tmp_path / "profile.json"
    ppo_profile.main(["--env", "cartpole", "--num-envs", "4", "--physics-steps", "4", "--repeats", "1",
                      "--json", str(out), "--set", *TINY_PPO_SET])
    figures = json.loads(out.read_text())
    printed = capsys.readouterr().out
    assert "compound limit" in printed and "update alone" in printed
    for name in ("physics_sps", "matmul_peak_flops", "compound_sps", "rollout_s", "update_s", "train_sps"):
        assert math.isfinite(figures[name]) and figures[name] > 0, name
    t_physics = figures["steps_per_iteration"] / figures["physics_sps"]
    t_matmul = figures["steps_per_iteration"] * sum(figures["matmul_flops_per_step"].values()) \
        / figures["matmul_peak_flops"]
    assert math.isclose(figures["compound_sps"], figures["steps_per_iteration"] / (t_physics + t_matmul))
    assert figures["compound_sps"] < figures["physics_sps"]


def test_physics_profile_writes_a_line_per_variant(tmp_path, capsys):
    out = tmp_path / "physics.jsonl"
    physics_profile.main(["--env", "pendulum", "--num-envs", "4", "--steps", "2", "--repeats", "1",
                          "--variants", "highest,nudged,default,constant,renew", "--json", str(out)])
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["variant"] for r in records] == ["highest", "nudged", "default", "constant", "renew"]
    assert all(positive(r["steps_per_s"]) for r in records[:4])
    # drift against "highest": none for itself; the nudged actions move the state (a CPU
    # computes every precision alike, so "default" does not)
    assert records[0]["drift_p50"] == 0.0 and records[1]["drift_p90"] > 0.0 and records[2]["drift_p90"] == 0.0
    assert positive(records[4]["renew_s"]) and records[4]["envs"] == 4
    assert capsys.readouterr().out.count('"variant"') == 5


def test_ppo_ablation_runs_each_arm_as_one_population(tmp_path, capsys):
    out = str(tmp_path / "ablation")
    ppo_ablation.main(["--env", "cartpole", "--seeds", "2", "--arms", "ours,brax", "--out", out,
                       "--flags", " ".join(TINY_PPO + ["--total-steps", "128", "--epochs", "2"])])
    results = json.load(open(out + ".json"))["arms"]
    assert list(results) == ["ours", "brax"] and results["brax"]["flags"] == ppo_ablation.ARMS["brax"]
    for arm in results.values():
        assert len(arm["final"]) == 2 and sorted(arm["curves"]) == ["0", "1"]
        assert all(curve[-1][0] == 128 for curve in arm["curves"].values())
        assert all(len({step for step, _ in curve}) == len(curve) for curve in arm["curves"].values())
    assert "| brax | `--gae-per-minibatch" in open(out + ".md").read()
    with pytest.raises(SystemExit, match="unknown"):
        ppo_ablation.main(["--arms", "nope"])


def test_member_curves_leave_out_the_population_s_lines_of_means(tmp_path):
    rows = [{"member": 0, "config": 0, "env_steps": 10, "eval/episode_return": 1.0},
            {"member": 1, "config": 0, "env_steps": 10, "eval/episode_return": 3.0},
            {"config": 0, "seeds": 2, "env_steps": 10, "eval/episode_return": 2.0},
            {"member": 0, "config": 0, "env_steps": 20, "eval/episode_return": None}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert common.member_curves(str(tmp_path)) == {0: [(10, 1.0)], 1: [(10, 3.0)]}
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"epoch": 1, "env_steps": 5, "eval/episode_return": 7.0}))
    assert common.member_curves(str(tmp_path)) == {0: [(5, 7.0)]}  # a run of one member


def test_ppo_ablation_peer_arm_runs_brax_once_per_member_seed(tmp_path, monkeypatch):
    seen = []

    def fake_brax(cfg):  # Brax's trainer itself is timed by benchmarks, not here
        seen.append((cfg.seed, cfg.num_envs, cfg.agent_config.batch_size))
        return {"curve": [(0, 1.0), (64, 10.0 * cfg.seed)], "epoch_s": 1.0, "epochs_timed": 1, "compile_s": 2.0}

    monkeypatch.setattr(ppo_vs_brax, "run_brax_ppo", fake_brax)
    out = str(tmp_path / "peer")
    ppo_ablation.main(["--env", "cartpole", "--seeds", "2", "--arms", "peer", "--out", out,
                       "--flags", "--num-envs 16 --batch-size 16 --seed 3"])
    assert seen == [(3, 16, 16), (4, 16, 16)]
    peer = json.load(open(out + ".json"))["arms"]["peer"]
    assert peer["final"] == [30.0, 40.0] and peer["mean"] == 35.0 and peer["wall_s"] == 6.0


def test_read_profile_sums_device_time_under_the_deepest_mjx_stage():
    assert read_profile.stage_of("jit(run)/while/body/vmap()/step/forward/fwd_position/kinematics/mul") == "kinematics"
    assert read_profile.stage_of("jit(run)/vmap(step)/forward/solve/jit(_cholesky)/cholesky") == "solve"
    assert read_profile.stage_of("jit(run)/while/body/vmap(vmap())/dot_general") == "outside MJX"
    rows = [{"tf_op_name": "a/forward/solve/x", "total_self_time": 30.0, "category": "custom-call"},
            {"tf_op_name": "a/forward/fwd_position/crb/y", "total_self_time": 10.0, "category": "loop fusion"},
            {"tf_op_name": "a/b", "total_self_time": 5.0, "category": "loop fusion"}]
    s = read_profile.summarize(rows)
    assert s["total_us"] == 45.0 and s["by_stage"] == {"solve": 30.0, "crb": 10.0, "outside MJX": 5.0}
    assert s["by_category"] == {"custom-call": 30.0, "loop fusion": 15.0}
    assert [r["tf_op_name"] for r in s["top"]] == ["a/forward/solve/x", "a/forward/fwd_position/crb/y", "a/b"]


# A TPU-compiled module's text as libtpu writes it (shortened): a loop the compiler made from a
# gather (512 trips), a loop JAX wrote, and a layout copy of a replay ring in the entry.
TPU_HLO = """HloModule jit__epoch, is_scheduled=true

%wide.while_cond.36 (wide.param.72: (s32[], f32[512,261])) -> pred[] {
  %constant.15917 = s32[]{:T(128)} constant(512)
  %wide.param.72 = (s32[]{:T(128)}, f32[512,261]{1,0:T(8,128)S(1)}) parameter(0)
  %get-tuple-element.46355 = s32[]{:T(128)} get-tuple-element(%wide.param.72), index=0
  ROOT %compare.649 = pred[]{:T(512)} compare(%get-tuple-element.46355, %constant.15917), direction=LT
}

ENTRY %main.711 (state_loop_ring_rows_data_0_.1: f32[1048576,263]) -> f32[1048576,263] {
  %state_loop_ring_rows_data_0_.1 = f32[1048576,263]{0,1:T(8,128)} parameter(0)
  %copy.6642 = f32[1048576,263]{1,0:T(8,128)} copy(%state_loop_ring_rows_data_0_.1), backend_config={"estimated_cycles":"8901381"}
  %copy.12 = f32[512,261]{1,0:T(8,128)} copy(%x), backend_config={}
  %while.1773 = (s32[]{:T(128)}, f32[512,261]{1,0:T(8,128)S(1)}) while(%tuple.2440), condition=%wide.while_cond.36, body=%wide.while_body.36.sunk, metadata={op_name="jit(_epoch)/while/body/closed_call/gather" stack_frame_id=574}
  %while.1761 = (s32[]{:T(128)}, f32[256]{0:T(256)}) while(%tuple.2451), condition=%wide.region_211.606, body=%wide.region_210.605, metadata={op_name="jit(_epoch)/while/body/closed_call/while" stack_frame_id=3}
  ROOT %copy.6699 = f32[1048576,263]{0,1:T(8,128)} copy(%copy.6642)
}
"""


def test_tpu_compile_finds_the_loops_the_compiler_made_and_the_large_copies():
    assert tpu_compile.made_loops(TPU_HLO) == [
        {"op": "gather", "trips": 512, "op_name": "jit(_epoch)/while/body/closed_call/gather"}]
    assert tpu_compile.summary(tpu_compile.made_loops(TPU_HLO) * 2) == "gather x512 (2)"
    assert tpu_compile.summary([]) == "none"
    ring = 1048576 * 263 * 4
    assert tpu_compile.large_copies(TPU_HLO) == [{"shape": "f32[1048576,263]", "layout": "{1,0}", "bytes": ring},
                                                 {"shape": "f32[1048576,263]", "layout": "{0,1}", "bytes": ring}]


@pytest.mark.parametrize("script, argv", [("tpu_compile", ["--env", "pendulum", "--agent", "sac"]),
                                          ("sac_step_tpu", [])])
def test_tpu_compiling_scripts_without_libtpu_are_one_line(monkeypatch, script, argv):
    # Without a TPU compiler (CI installs none) the script says what to install.
    import importlib.util
    if importlib.util.find_spec("libtpu") is not None:
        pytest.skip("libtpu is installed here")
    for name in ("TPU_ACCELERATOR_TYPE", "TPU_WORKER_HOSTNAMES", "TPU_SKIP_MDS_QUERY"):
        monkeypatch.setenv(name, os.environ.get(name, ""))
    monkeypatch.setattr(sys, "path", list(sys.path))
    with pytest.raises(SystemExit) as exit_:
        {"tpu_compile": tpu_compile, "sac_step_tpu": sac_step_tpu}[script].main([*argv, "--libtpu", "/nonexistent"])
    assert "install libtpu" in str(exit_.value)


# A scan's loop body with three fusions, one of which holds a convolution (shortened).
STEP_HLO = """HloModule jit_updates

%fused_dot (p: f32[512,256]) -> f32[512,256] {
  ROOT %convolution.1 = f32[512,256]{1,0} convolution(%p, %w), dim_labels=bf_io->bf
}

%fused_add (p: f32[256]) -> f32[256] {
  ROOT %add.1 = f32[256]{0} add(%p, %p)
}

%region_0.44 (param: (s32[], f32[256])) -> (s32[], f32[256]) {
  %param = (s32[]{:T(128)}, f32[256]{0}) parameter(0)
  %get-tuple-element.1 = f32[256]{0} get-tuple-element(%param), index=1
  %fusion.1 = f32[512,256]{1,0} fusion(%get-tuple-element.1), kind=kOutput, calls=%fused_dot
  %fusion.2 = f32[256]{0} fusion(%get-tuple-element.1), kind=kLoop, calls=%fused_add
  %fusion.3 = f32[256]{0} fusion(%fusion.2), kind=kLoop, calls=%fused_add
  ROOT %tuple.1 = (s32[]{:T(128)}, f32[256]{0}) tuple(%get-tuple-element.1, %fusion.3)
}

ENTRY %main (a: f32[256]) -> f32[256] {
  %while.1 = (s32[]{:T(128)}, f32[256]{0}) while(%tuple.0), condition=%cond, body=%region_0.44
}
"""


def test_sac_step_tpu_counts_the_ops_of_the_steps_loop_body():
    assert sac_step_tpu.body_ops(STEP_HLO) == {"ops": 6, "fusions": 3, "convolutions": 1}


def test_ppo_update_prints_its_figures(capsys):
    # The sizes of test_ppo_profile's run, whose update program this one then shares.
    ppo_update.main(["--env", "cartpole", "--num-envs", "4", "--repeats", "1", "--set", *TINY_PPO_SET,
                     "total_steps=64", "epochs=1"])
    printed = capsys.readouterr().out
    assert " s best of 1 " in printed and positive(numbers(r"([\d.]+) ms per gradient", printed)[0])


def test_sac_profile_prints_its_figures(capsys):
    sac_profile.main(["--env", "pendulum", "--backend", "jax", "--num-envs", "4", "--batch-size", "8",
                      "--grad-updates-per-step", "2", "--max-replay-size", "64", "--fill", "32", "--iterations", "2",
                      "--repeats", "1"])
    printed = capsys.readouterr().out
    times = numbers(r":\s+([\d.]+) ms", printed)
    assert len(times) == 5 and all(map(positive, times))
    assert positive(numbers(r"([\d,]+) env steps/s", printed)[0])


def test_buffer_scaling_prints_its_figures(capsys):
    buffer_scaling.main(["--capacities", "1e3", "4e3", "--batch", "8", "--loops", "4", "--repeats", "1"])
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if re.match(r"\s+\d+\s+\d", line)]
    assert len(rows) == 2
    assert all(positive(float(x)) for row in rows for x in row[2:5])  # add, sample, one add per call (us)


def test_checkpoint_cost_writes_its_figures(tmp_path, capsys):
    out = tmp_path / "cost.json"
    checkpoint_cost.main(["--saves", "1", "--dir", str(tmp_path), "--json", str(out), "--env", "cartpole",
                          *TINY_PPO, "--total-steps", "128", "--epochs", "2", "--devices", "1"])
    (figures,) = json.loads(out.read_text())
    assert "checkpoint" in capsys.readouterr().out
    for name in ("checkpoint_bytes", "epoch_s", "save_s_median", "share_every_epoch", "default_every"):
        assert positive(figures[name]), name


def test_checkpoint_cost_sizes_a_checkpoint_with_and_without_the_envs(tmp_path, capsys):
    out = tmp_path / "sizes.json"
    checkpoint_cost.main(["--sizes", "--json", str(out), "--env", "cartpole", *TINY_PPO, "--devices", "1"])
    (figures,) = json.loads(out.read_text())
    assert "with --checkpoint-envs off" in capsys.readouterr().out
    assert 0 < figures["without_envs_bytes"] < figures["checkpoint_bytes"]


def test_nonfinite_cost_times_a_run_without_flags_and_puts_them_back():
    from sim.core import engine

    overrides = common.parse_set(["num_envs=4", *TINY_PPO_SET, "total_steps=128", "epochs=2"])
    assert positive(nonfinite_cost.steps_per_second("cartpole", "ppo", False, 1, overrides))
    assert engine.nonfinite_flags is nonfinite_cost.REAL


@pytest.mark.slow
def test_nonfinite_cost_prints_its_figures(capsys):
    nonfinite_cost.main(["--jobs", "cartpole:ppo", "--set", "num_envs=4", *TINY_PPO_SET, "total_steps=128", "epochs=2",
                         "--repeats", "1"])
    printed = capsys.readouterr().out
    assert all(map(positive, numbers(r"with flags ([\d,]+)", printed) + numbers(r"ratio ([\d.]+)", printed)))


def test_scaling_worker_prints_its_result(capsys):
    scaling.main(["--worker", "--n", "1", "--total-envs", "4", "--env", "cartpole", "--epochs", "2",
                  "--iterations", "1", "--set", *TINY_PPO_SET])
    result = common.read_result(capsys.readouterr().out)
    assert result["devices"] == 1 and positive(result["sps"]) and positive(result["compile_s"])


@pytest.mark.slow
def test_scaling_runs_a_worker_process(capsys):
    scaling.main(["--env", "cartpole", "--devices", "1", "--epochs", "1", "--iterations", "1", "--cpu",
                  "--as-configured", "--set", "num_envs=4", *TINY_PPO_SET])
    (row,) = [line.split() for line in capsys.readouterr().out.splitlines() if line.startswith("configured")]
    assert positive(float(row[4].replace(",", ""))) and float(row[5]) == 1.0  # steps/s; efficiency of 1 device


def test_cpu_linalg_reads_env_throughput():
    sps, compile_s = cpu_linalg.measure("unrolled", ["benchmarks/env_throughput.py", "--env", "cartpole",
                                                     "--num-envs", "4", "--steps", "2", "--repeats", "1"])
    assert positive(sps) and positive(compile_s)
    assert all(os.path.exists(os.path.join(common.ROOT, command[0])) for _, command in cpu_linalg.rows(False))


@pytest.mark.slow
def test_cpu_linalg_reads_a_scaling_worker():
    sps, compile_s = cpu_linalg.measure("pool", ["benchmarks/scaling.py", "--worker", "--n", "1", "--total-envs", "4",
                                                 "--env", "cartpole", "--epochs", "1", "--iterations", "1",
                                                 "--set", *TINY_PPO_SET])
    assert positive(sps) and positive(compile_s)


def test_train_flags_in_benchmarks_parse():
    """The train.py commands the process-spawning benchmarks hold are ones train.py accepts."""
    import train

    commands = [*compare_revisions.COMMANDS.values(), *(flags for _, flags, _ in population.JOBS),
                population.PUREJAXRL_FLAGS, *map(shlex.split, startup.DEFAULT_COMMANDS),
                *checkpoint_cost.JOBS.values()]
    for flags in commands:
        assert train.parse_config(flags).total_steps > 0, flags


@pytest.mark.slow
def test_startup_one_start(tmp_path):
    result = startup.start(["--env", "cartpole", *TINY_PPO, "--total-steps", "128", "--epochs", "2",
                            "--devices", "1"], str(tmp_path / "cache"), timeout=600)
    # a cold start on an empty cache: every program asked for, none found
    assert not result["hang"] and result["cache"]["requests"] > 0 and result["cache"]["hits"] == 0
    assert all(positive(result[k]) for k in ("compile_s", "total_s", "wall_s"))
    assert startup.summary([1.0, 3.0, 2.0]) == "2.0 (1.0-3.0)"


@pytest.mark.slow
def test_compare_revisions_runs_train_in_a_tree():
    sps, final, memory = compare_revisions.run(common.ROOT, ["--env", "cartpole", *TINY_PPO, "--total-steps", "128",
                                                             "--epochs", "1"])
    assert positive(sps) and math.isfinite(float(final)) and memory.endswith("iB")


def test_wallclock_scales_every_published_config_one_way():
    fasttd3 = {"num_envs": 1024, "batch_size": 32768, "max_replay_size": 1024 * 10_240, "min_replay_size": 10_240}
    assert wallclock.scaled(fasttd3, 128) == {"num_envs": 128, "batch_size": 4096, "max_replay_size": 128 * 10_240,
                                              "min_replay_size": 1280}
    ppo = {"num_envs": 2048, "batch_size": 1024, "num_minibatches": 32, "unroll_length": 30}
    assert wallclock.scaled(ppo, 128) == {"num_envs": 128, "batch_size": 64}
    assert wallclock.iteration_steps(ppo, wallclock.scaled(ppo, 128)) == 64 * 32 * 30
    sac = {"num_envs": 128, "batch_size": 512, "max_replay_size": 4 << 20, "min_replay_size": 8192}
    assert wallclock.scaled(sac, 128) == {} and wallclock.scaled(fasttd3, 0) == {}  # as published
    with pytest.raises(SystemExit, match="do not divide"):
        wallclock.scaled({"num_envs": 1000, "batch_size": 8}, 128)
    es = {"num_envs": 128, "population_size": 128, "episode_length": 1000}  # a generation: every env's episode
    assert wallclock.scaled(es, 128) == {} and wallclock.iteration_steps(es, {}) == 128 * 1000


def test_wallclock_reads_the_latest_evaluation_at_each_mark():
    curve = [(50.0, 1000, 1.0), (130.0, 2000, None), (310.0, 3000, 3.0), (610.0, 4000, 4.0)]
    assert wallclock.at_minute(curve, 0.5) == (None, None)
    assert wallclock.at_minute(curve, 5) == (1.0, 1000) and wallclock.at_minute(curve, 6) == (3.0, 3000)
    results = {"t/m": {"config": {"num_envs": 8}, "flags": {}, "curve": curve}}
    row = wallclock.table(results, ["t"], ["m"], 10).splitlines()[-1]
    assert row == "| t | m | 8 | 1.0 | 3.0 | 3,000 | 10 |"  # 610 s is past the 10 minutes


def test_pbt_cost_times_its_step_against_an_epoch():
    figures = pbt.cost(2)
    assert figures["members"] == 2 and all(positive(figures[k]) for k in ("step_s", "epoch_s", "ratio"))
    text = pbt.table({"cost": [figures]})
    assert text.splitlines()[-1].startswith("| 2 | ")


def test_pbt_vs_ray_gives_ray_one_epoch_per_iteration():
    """Ray's side resumes a trial's run one epoch at a time: the budget of epoch e is the
    prefill plus e epochs of the run's own length (Ray itself is not in this environment)."""
    args = types.SimpleNamespace(env="pendulum", agent="sac", total_steps=20_000, epochs=10, seed=0)
    size = pbt_vs_ray.sizes(sys.executable, pbt_vs_ray.base_flags(args))
    assert size["epochs"] == 10 and size["prefill"] + 10 * size["epoch"] >= 20_000 > size["prefill"] + 9 * size["epoch"]


def test_sim2real_reads_plays_robustness_table_and_tabulates_the_arms():
    printed = ("pendulum / ppo, checkpoint of epoch 1: return -1.00 +- 0.50 over 4 ...\nphysics       return\n"
               "nominal       -120.50 +- 3.00\nm=2           -310.25 +- 9.10  (-189.75)\n"
               "m=0.3,l=1.5   -1.5e+03 +- 2.00  (-1379.50)\n")
    got = sim2real.returns(printed)
    assert got == {"nominal": -120.5, "m=2": -310.25, "m=0.3,l=1.5": -1500.0}
    other = {"nominal": -100.5, "m=2": -290.25, "m=0.3,l=1.5": -1300.0}
    result = {"config": {"settings": ["m=2", "m=0.3,l=1.5"]},
              "runs": [{"arm": "nominal", "seed": 0, "returns": got}, {"arm": "privileged", "seed": 1, "returns": other},
                       {"arm": "privileged", "seed": 0, "returns": got}]}
    assert sim2real.table(result).splitlines()[2:] == [
        "| privileged | 0 | -120.5 | -310.2 | -1500.0 | -905.1 | -1500.0 |",
        "| privileged | 1 | -100.5 | -290.2 | -1300.0 | -795.1 | -1300.0 |",
        "| nominal | 0 | -120.5 | -310.2 | -1500.0 | -905.1 | -1500.0 |",
        "| **privileged** | mean of 2 | -110.5 | -300.2 | -1400.0 | -850.1 | -1400.0 |"]


@pytest.mark.slow
def test_sim2real_trains_each_arm_and_plays_its_settings(tmp_path):
    out = str(tmp_path / "s2r")
    sim2real.main(["--env", "pendulum", "--randomize", "m=0.5:1.5", "--settings", "m=2", "--total-steps", "128",
                   "--epochs", "1", "--eval-envs", "4", "--arms", "privileged,nominal", "--out", out,
                   "--scale=" + " ".join(TINY_PPO)])
    runs = json.load(open(out + ".json"))["runs"]
    assert [r["arm"] for r in runs] == ["privileged", "nominal"] and all(set(r["returns"]) == {"nominal", "m=2"}
                                                                          for r in runs)


@pytest.mark.slow
def test_pbt_experiment_runs_both_arms(tmp_path):
    out = str(tmp_path / "pbt")
    pbt.main(["--values", "1e-3,1e-2", "--total-steps", "2048", "--epochs", "2", "--repeats", "1", "--only",
              "experiment", "--out", out])
    runs = json.load(open(out + ".json"))["runs"]
    assert [r["pbt"] for r in runs] == [False, True] and all(len(r["finals"]) == 2 for r in runs)
    assert "| PBT | 0 |" in open(out + ".md").read()


@pytest.mark.slow
def test_wallclock_runs_a_task_for_its_minutes(tmp_path):
    out = str(tmp_path / "wc")
    wallclock.main(["--tasks", "pendulum", "--methods", "sac", "--minutes", "0.1", "--eval-seconds", "2",
                    "--out", out])
    result = json.load(open(out + ".json"))["pendulum/sac"]
    assert result["curve"][-1][0] >= 6 and all(positive(r) for _, r, _ in result["curve"])
    assert os.path.exists(out + "_pendulum.png") and "| pendulum | sac |" in open(out + ".md").read()


def test_distill_reads_when_a_run_solves_cartpole_and_holds_it():
    points = [{"env_steps": 10 * i, "eval": e} for i, e in enumerate([100.0, 480.0, 300.0, 476.0, 500.0], 1)]
    assert distill.first_solved(points) == 20 and distill.held_from(points) == 40
    assert distill.held_from(points[:3]) is None and distill.first_solved(points[:1]) is None


def test_distill_reuses_a_kept_run_only_if_it_was_trained_with_the_flags(tmp_path):
    flags = ["--env", "cartpole", *TINY_PPO, "--total-steps", "128", "--epochs", "2"]
    run = str(tmp_path / "run")
    distill.train(run, flags, log=lambda *a: None)
    reused = distill.train(run, flags, log=lambda *a: None)  # finished: read back
    assert reused["wall_s"] is None and len(reused["curve"]) == 2
    with pytest.raises(SystemExit, match="num_envs"):
        distill.train(run, [*flags, "--num-envs", "2"], log=lambda *a: None)


@pytest.mark.slow
def test_population_one_program_against_processes(tmp_path):
    flags = ["--env", "cartpole", *TINY_PPO, "--total-steps", "128", "--epochs", "1", "--eval-every", "0"]
    job = population.one_program_vs_processes(flags, 2, str(tmp_path), dict(os.environ, JAX_PLATFORMS="cpu"))
    assert all(positive(job[k]) for k in ("separate_s", "population_s", "population_train_s", "speedup"))
    assert "| tiny | 2 |" in population.report({"jobs": {"tiny": job}, "members": []})


@pytest.mark.slow
def test_population_against_purejaxrl(tmp_path):
    checkout = os.environ.get("PUREJAXRL_DIR")
    if not checkout:
        pytest.skip("PureJaxRL is an external checkout: set PUREJAXRL_DIR (and PUREJAXRL_PYTHON) to run it")
    python = os.environ.get("PUREJAXRL_PYTHON", sys.executable)
    out = population.against_purejaxrl(checkout, python, 1, str(tmp_path), dict(os.environ, JAX_PLATFORMS="cpu"))
    assert positive(out["purejaxrl"]["train_s"]) and positive(out["ours"]["train_s"])


# ---- the trainer comparisons and the suite's table of them ----

PPO_VS_BRAX = ["--env", "cartpole", "--backend", "jax", *TINY_PPO, "--total-steps", "128", "--epochs", "2",
               "--sim-steps", "4"]
# The sizes of test_sac_profile's run: the two share their compiled programs (JAX's cache).
SAC_VS_BRAX = ["--env", "pendulum", "--backend", "jax", "--num-envs", "4", "--batch-size", "8",
               "--grad-updates-per-step", "2", "--min-replay-size", "4", "--max-replay-size", "64",
               "--total-steps", "12", "--epochs", "1", "--num-eval-envs", "8", "--sim-steps", "4"]


def sides(path, names) -> dict:
    """The comparison's JSON figures, each side's checked finite and positive."""
    figures = json.loads(path.read_text())
    assert positive(figures["raw_sim_sps"]) and sorted(figures["sides"]) == sorted(names)
    for side in figures["sides"].values():
        for name in ("sps", "cpu_sps", "compile_s", "epoch_s", "of_sim"):
            assert positive(side[name]), name
        assert math.isfinite(side["return"])
    return figures


@pytest.fixture(scope="module")
def ours_alone(tmp_path_factory):
    """ppo_vs_brax.py's side of ours alone, its JSON figures."""
    out = tmp_path_factory.mktemp("ppo_vs_brax") / "ours.json"
    ppo_vs_brax.main([*PPO_VS_BRAX, "--only", "ours", "--json", str(out)])
    return sides(out, ["ours"])


def test_ppo_vs_brax_ours(ours_alone):
    assert ours_alone["sides"]["ours"]["env_steps"] == 128


def test_suite_tables_a_comparison(ours_alone):
    text = suite.table({"ppo-vs-brax": ours_alone}, quick=True)
    (row,) = [line for line in text.splitlines() if line.startswith("| ppo-vs-brax: ours")]
    cells = [cell.strip() for cell in row.split("|")[1:-1]]
    assert cells[1] == "cartpole, jax, 4" and all(positive(float(c.replace(",", ""))) for c in cells[2:6])
    assert set(suite.lines(True)) == set(suite.lines(False))
    for argv in suite.lines(True).values():
        assert argv == ["population"] or os.path.exists(os.path.join(common.ROOT, "benchmarks", argv[0]))


def test_suite_summary_records_a_line_against_its_peer(ours_alone, tmp_path):
    path = tmp_path / "summary.json"
    suite.append_summary(str(path), "alone", ["ppo_vs_brax.py", "--env", "cartpole"], ours_alone)
    both = dict(ours_alone, sides={**ours_alone["sides"], "brax": dict(ours_alone["sides"]["ours"], sps=1.0,
                                                                     raw_sim_xla_sps=2.0)})
    suite.append_summary(str(path), "versus", ["ppo_vs_brax.py"], both)
    suite.append_summary(str(path), "failed", ["ppo_vs_brax.py"], {"failed": 1, "error": ""})
    alone, versus = [json.loads(line) for line in path.read_text().splitlines()]
    ours = ours_alone["sides"]["ours"]["sps"]
    assert alone["case"] == "alone" and alone["peer"] is None and alone["ratio"] is None
    assert alone["command"] == "python benchmarks/ppo_vs_brax.py --env cartpole" and positive(alone["compile_s"])
    assert math.isclose(alone["of_raw_physics"], ours / ours_alone["raw_sim_sps"])
    assert versus["peer"] == 1.0 and math.isclose(versus["ratio"], ours) and versus["peer_raw_physics"] == 2.0


@pytest.mark.slow
def test_suite_runs_a_line_in_its_own_process(tmp_path):
    with open(tmp_path / "log", "w") as log:
        result = suite.run_script("tiny", ["ppo_vs_brax.py", *PPO_VS_BRAX, "--only", "ours"], str(tmp_path), log)
    assert "failed" not in result and positive(result["sides"]["ours"]["sps"])
    assert "cpu" in suite.machine()


def test_sac_vs_brax_ours(tmp_path, capsys):
    sac_vs_brax.main([*SAC_VS_BRAX, "--only", "ours", "--json", str(tmp_path / "ours.json")])
    figures = sides(tmp_path / "ours.json", ["ours"])
    assert positive(figures["sides"]["ours"]["grad_sps"]) and "grad steps/s" in capsys.readouterr().out


def test_sac_vs_brax_times_a_fast_agent_alone(tmp_path):
    sac_vs_brax.main(["--agent", "fasttd3", "--only", "ours", "--env", "pendulum", "--backend", "jax", "--num-envs", "8",
                      "--batch-size", "32", "--grad-updates-per-step", "2", "--min-replay-size", "16",
                      "--max-replay-size", "512", "--total-steps", "64", "--epochs", "2", "--num-eval-envs", "4",
                      "--sim-steps", "4", "--json", str(tmp_path / "fast.json")])
    figures = sides(tmp_path / "fast.json", ["ours"])
    assert figures["config"]["agent"] == "fasttd3" and positive(figures["sides"]["ours"]["grad_sps"])


def test_sac_vs_brax_runs_ours_at_the_default_precision_without_the_raw_sim(tmp_path, capsys):
    sac_vs_brax.main(["--agent", "fasttd3", "--only", "ours", "--matmul-dtype", "default", "--env", "pendulum",
                      "--backend", "jax", "--num-envs", "8", "--batch-size", "32", "--grad-updates-per-step", "2",
                      "--min-replay-size", "16", "--max-replay-size", "512", "--total-steps", "64", "--epochs", "2",
                      "--num-eval-envs", "4", "--sim-steps", "0", "--json", str(tmp_path / "default.json")])
    figures = json.loads((tmp_path / "default.json").read_text())
    assert list(figures["sides"]) == ["ours-default"] and positive(figures["sides"]["ours-default"]["sps"])
    assert math.isnan(figures["raw_sim_sps"]) and math.isnan(figures["sides"]["ours-default"]["of_sim"])
    out = capsys.readouterr().out
    assert "ours-default: setup+compile" in out and "raw simulation limit: not measured" in out


@pytest.mark.slow
def test_ppo_vs_brax_both_sides(tmp_path):
    pytest.importorskip("brax")
    ppo_vs_brax.main(["--env", "inverted_pendulum", "--backend", "positional", *TINY_PPO, "--total-steps", "128",
                      "--epochs", "2", "--sim-steps", "4", "--json", str(tmp_path / "both.json")])
    brax = sides(tmp_path / "both.json", ["ours", "brax"])["sides"]["brax"]
    assert positive(brax["brax_last_sps"])


@pytest.mark.slow
def test_sac_vs_brax_both_sides(tmp_path):
    pytest.importorskip("brax")
    flags = [*SAC_VS_BRAX[4:], "--env", "inverted_pendulum", "--backend", "positional"]
    sac_vs_brax.main([*flags, "--json", str(tmp_path / "both.json")])
    brax = sides(tmp_path / "both.json", ["ours", "brax"])["sides"]["brax"]
    assert positive(brax["grad_sps"]) and positive(brax["brax_last_sps"])


@pytest.mark.slow
@pytest.mark.parametrize("agent", ["es", "ars"])
def test_es_vs_brax_runs_as_many_generations_on_both_sides(tmp_path, agent):
    pytest.importorskip("brax")
    es_vs_brax.main(["--agent", agent, "--population-size", "4", "--generations", "3", "--epochs", "1",
                     "--episode-length", "20", "--num-eval-envs", "4", "--sim-steps", "4",
                     "--json", str(tmp_path / "both.json")])
    figures = sides(tmp_path / "both.json", ["ours", "brax"])["sides"]
    assert figures["ours"]["generations"] == figures["brax"]["generations"] == 3
    assert figures["ours"]["env_steps"] == figures["brax"]["env_steps"] == 3 * 4 * 20
    assert positive(figures["brax"]["sps"]) and positive(figures["ours"]["sps"])


def test_program_census_counts_the_physics_copies_by_their_batch():
    import jax
    import jax.numpy as jnp

    from benchmarks import program_census

    def two_batches(a, b):
        return jnp.sum(jax.vmap(jnp.linalg.cholesky)(a)) + jnp.sum(jax.vmap(jnp.linalg.cholesky)(b))

    text = jax.jit(two_batches).lower(jax.ShapeDtypeStruct((8, 5, 5), jnp.float32),
                                      jax.ShapeDtypeStruct((2, 5, 5), jnp.float32)).as_text()
    got = program_census.census(text)
    assert got["cholesky"] == {2: 1, 8: 1} and got["while"] == 0 and got["lines"] > 10
    table = program_census.table(["--env", "cartpole", "--num-envs", "8", "--batch-size", "8", "--num-minibatches",
                                  "2", "--num-eval-envs", "2"])
    assert table.count("\n") == 7 and "| starts |" in table and "| epoch |" in table and "none |" in table


@pytest.mark.slow
def test_the_robot_device_script_brings_back_a_small_run_and_continues_it(tmp_path):
    """benchmarks/robot_device.sh (a lent accelerator's long robot runs): its $OUT holds the run
    with its newest checkpoint and no env states; on a fresh machine the run copied back under
    benchmarks/device_runs/ENV continues from that checkpoint. Here on cartpole, `python3` being
    this interpreter."""
    import shutil
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "python3").write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')
    (shim / "python3").chmod(0o755)
    carried = os.path.join(root, "benchmarks", "device_runs", "cartpole")
    assert not os.path.exists(carried)

    def call(out, total):
        out.mkdir()
        env = dict(os.environ, OUT=str(out), PATH=f"{shim}:{os.environ['PATH']}", TMPDIR=str(tmp_path))
        flags = [*TINY_PPO, "--total-steps", str(total), "--epochs", "2", "--no-progress"]
        proc = subprocess.run(["bash", "benchmarks/robot_device.sh", "cartpole", "300", *flags], cwd=root, env=env,
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc.stdout, (out / "cartpole_train.log").read_text()

    try:
        shutil.rmtree("/tmp/robot_runs/cartpole", ignore_errors=True)
        _, log = call(tmp_path / "first", 128)
        run = tmp_path / "first" / "run"
        (newest,) = os.listdir(run / "checkpoints")
        meta = json.loads((run / "checkpoints" / newest / "meta.json").read_text())
        assert newest == "epoch_000002" and meta["left_out"] and not any(
            e["path"].startswith(".env.") for e in meta["leaves"])
        assert (tmp_path / "first" / "cartpole_policy.npz").stat().st_size > 0
        shutil.rmtree("/tmp/robot_runs/cartpole")  # a fresh machine
        shutil.copytree(run, carried)
        stdout, log = call(tmp_path / "second", 256)
        assert "continuing the run carried in benchmarks/device_runs/cartpole" in stdout
        assert "holds no env states" in log and "from /tmp/robot_runs/cartpole/checkpoints/epoch_000002" in log, log
        records = [json.loads(line) for line in (tmp_path / "second" / "run" / "metrics.jsonl").open()]
        assert [r["epoch"] for r in records] == [1, 2, 3] and records[-1]["env_steps"] == 256
    finally:
        shutil.rmtree(carried, ignore_errors=True)
        shutil.rmtree("/tmp/robot_runs/cartpole", ignore_errors=True)


def test_brax_s_env_runs_on_the_backend_ours_defaults_to_when_none_is_given():
    assert versus.brax_env("inverted_pendulum", None).backend == envs.check("inverted_pendulum") == "mjx"
    assert versus.brax_env("inverted_pendulum", "positional").backend == "positional"
