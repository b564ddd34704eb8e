# PPO on Go1JoystickFlatTerrain at Playground's published size (8,192 envs, its brax_ppo_config)
# on a lent accelerator: `benchmarks/robot_device.sh` for Go1 (what it writes, what it carries,
# how a run continues across calls and leases):
#
#   bash benchmarks/device_setup.sh bash benchmarks/go1_device.sh 420 [train.py flags...]
#
# Three calls of this script's earlier form (450, 535 and 370 s; the same run with whole
# checkpoints, in /tmp/go1_run, as of commit 220c70a) trained the walking policy of
# benchmarks/results/go1_walk/.
exec bash "$(dirname "$0")/robot_device.sh" Go1JoystickFlatTerrain "$@"
