# PPO on Go1JoystickFlatTerrain at Playground's published size (8,192 envs, its brax_ppo_config)
# on a lent accelerator, for at most SECONDS of training; writes to $OUT the training log, the
# run's metrics, config and summary, and the policy exported to numpy (go1_policy.npz) for
# `benchmarks/sim2sim_file.py` here. A second call on the same (still warm) machine continues
# the run from its newest checkpoint (one per epoch), its programs from the compile cache.
# Carried: the wheels of benchmarks/device_setup.sh (its Python 3.11 mujoco alone: 64 MiB a call),
# Playground's (`pip download --no-deps playground==0.2.0 -d .whl-tpu/any`) and Go1's assets alone
# (`benchmarks/carry_robot_assets.py unitree_go1`):
#
#   bash benchmarks/device_setup.sh bash benchmarks/go1_device.sh 420 [train.py flags...]
#
# Three such calls (450, 535 and 370 s) trained the walking policy of benchmarks/results/go1_walk/.
#
# Flags after the seconds go to train.py on the first call (a resumed run keeps its config).
SECONDS_TO_TRAIN=${1:-420}
shift || true
RUN=/tmp/go1_run
python3 -c "import mujoco_playground, envs.robots; print('robots ok')" 2>&1 | grep -v "Failed to import warp" | tail -3
timeout -s TERM -k 60 "$SECONDS_TO_TRAIN" python3 train.py --env Go1JoystickFlatTerrain --epochs 100 --run-dir $RUN \
    --resume-if-exists --checkpoint-every 1 --keep-checkpoints 2 --stop-grace 40 "$@" 2>&1 \
    | tee -a "$OUT/go1_train.log" | grep -v "Failed to import warp"
python3 train.py export $RUN "$OUT/go1_policy.npz" 2>&1 | tail -2
cp $RUN/metrics.jsonl $RUN/config.json $RUN/summary.json "$OUT/" 2>/dev/null
ls -la "$OUT"
