# PPO on Go1JoystickFlatTerrain at Playground's published size (8,192 envs, its brax_ppo_config)
# on a lent accelerator, for at most SECONDS of training; writes to $OUT the training log, the
# run's metrics, config and summary, and the policy exported to numpy (go1_policy.npz) for
# `benchmarks/sim2sim_file.py` here. Carried: the wheels of benchmarks/device_setup.sh and
# Go1's assets alone (`benchmarks/carry_robot_assets.py unitree_go1`):
#
#   bash benchmarks/device_setup.sh bash benchmarks/go1_device.sh 420
SECONDS_TO_TRAIN=${1:-420}
RUN=/tmp/go1_run
python3 -c "import mujoco_playground, envs.robots; print('robots ok')" 2>&1 | grep -v "Failed to import warp" | tail -3
timeout -s TERM "$SECONDS_TO_TRAIN" python3 train.py --env Go1JoystickFlatTerrain --epochs 100 --run-dir $RUN \
    --keep-checkpoints 1 --overwrite 2>&1 | tee "$OUT/go1_train.log" | grep -v "Failed to import warp"
python3 train.py export $RUN "$OUT/go1_policy.npz" 2>&1 | tail -2
cp $RUN/metrics.jsonl $RUN/config.json $RUN/summary.json "$OUT/" 2>/dev/null
ls -la "$OUT"
