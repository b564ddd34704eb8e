# PPO (or FastTD3 with `--agent fasttd3`) on one of Playground's robots at its published size on a
# lent accelerator, for at most SECONDS of training, in a run that continues across calls and
# across leases. Writes to $OUT the training log, the policy exported to numpy (ENV_policy.npz, for
# `benchmarks/sim2sim_file.py` here) and the run itself, small enough to bring back: its config,
# metrics and newest checkpoint, written without the envs' states (`--checkpoint-envs off`:
# about 5 MiB at 8,192 envs against hundreds with them).
#
#   bash benchmarks/device_setup.sh bash benchmarks/robot_device.sh G1JoystickFlatTerrain 480 [train.py flags...]
#
# A second call on the same warm machine continues the run from its newest checkpoint, its programs
# from the compile cache. On a fresh machine it continues the run found in
# benchmarks/device_runs/ENV/ (copy $OUT/run/ there from the previous lease's files: it travels
# with the working tree). Flags after the seconds go to train.py (a resumed run keeps its config;
# flags given override it). Carried: the wheels of benchmarks/device_setup.sh (its Python 3.11
# mujoco alone), Playground's (`pip download --no-deps playground==0.2.0 -d .whl-tpu/any`) and the
# robot's assets alone (`benchmarks/carry_robot_assets.py unitree_g1`).
ENV_NAME=${1:?usage: robot_device.sh ENV [SECONDS] [train.py flags...]}
SECONDS_TO_TRAIN=${2:-480}
shift 2 || shift $#
RUN=/tmp/robot_runs/$ENV_NAME
CARRIED=benchmarks/device_runs/$ENV_NAME
if [ ! -f "$RUN/config.json" ] && [ -f "$CARRIED/config.json" ]; then
  mkdir -p "$(dirname "$RUN")" && cp -r "$CARRIED" "$RUN" && echo "continuing the run carried in $CARRIED"
fi
python3 -c "import mujoco_playground, envs.robots; print('robots ok')" 2>&1 | grep -v "Failed to import warp" | tail -3
timeout -s TERM -k 60 "$SECONDS_TO_TRAIN" python3 train.py --env "$ENV_NAME" --epochs 100 --run-dir "$RUN" \
    --resume-if-exists --checkpoint-every 1 --keep-checkpoints 2 --checkpoint-envs off --stop-grace 40 "$@" 2>&1 \
    | tee -a "$OUT/${ENV_NAME}_train.log" | grep -v "Failed to import warp"
python3 train.py export "$RUN" "$OUT/${ENV_NAME}_policy.npz" 2>&1 | tail -2
NEWEST=$(ls -d "$RUN"/checkpoints/epoch_* 2>/dev/null | sort | tail -1)
mkdir -p "$OUT/run/checkpoints"
cp "$RUN/config.json" "$RUN/metrics.jsonl" "$OUT/run/" 2>/dev/null
[ -n "$NEWEST" ] && cp -r "$NEWEST" "$OUT/run/checkpoints/"
ls -la "$OUT" "$OUT/run/checkpoints"
