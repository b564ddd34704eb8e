"""The profiling benchmark runs end to end on a small config, and counts matmul work as
written by hand."""

import json
import math
import types

from benchmarks import ppo_profile


def test_update_flops_counted_layer_by_layer_by_hand():
    # obs 4 -> policy (8,) -> 2 outputs; obs 4 -> value (16,) -> 1; T = 2 steps, 3 passes.
    hp = types.SimpleNamespace(policy_hidden_sizes=(8,), value_hidden_sizes=(16,), unroll_length=2,
                               num_updates_per_batch=3)
    cfg = types.SimpleNamespace(hp=hp, action_repeat=1)
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
    ppo_profile.main(["--env", "cartpole", "--num-envs", "32", "--physics-steps", "4", "--repeats", "1",
                      "--json", str(out)])
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
