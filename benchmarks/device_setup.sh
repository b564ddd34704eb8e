# Runs a command on a lent accelerator machine that has JAX but not the project's other needs
# and no network: installs them under /tmp/site from wheels carried in .whl-tpu/ (those the
# machine's own index lacks) and from its index (file:///opt/pypi/simple), then runs "$@".
#
#   bash benchmarks/device_setup.sh python3 benchmarks/suite.py --lease --only ppo-vs-brax --out $OUT/suite.md
#
# Fetch the carried wheels first, here (about 62 MB, under the 64 MiB a call carries):
#   P="--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64"
#   pip download -q --no-deps --only-binary=:all: -d .whl-tpu/any brax==0.14.2 mujoco-mjx==3.17.0 \
#       tyro docstring_parser typeguard shtab jaxopt trimesh glfw
#   for v in 3.11 3.12; do pip download -q --no-deps --only-binary=:all: --python-version $v \
#       --implementation cp $P -d .whl-tpu/cp${v/./} mujoco==3.17.0; done
# `av` (video only) is left out for its 35 MB: a stand-in module takes its place.
python3 -V; python3 -c 'import platform;print(platform.libc_ver())'
PYV=$(python3 -c 'import sys;print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
export PIP_CONFIG_FILE=/dev/null
PIP="python3 -m pip install --isolated -q --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site"
t0=$(date +%s)
if [ ! -d /tmp/site/brax ]; then
  $PIP --no-index .whl-tpu/any/*.whl .whl-tpu/$PYV/mujoco-*.whl || echo "CARRIED WHEELS FAILED"
  NAMES="matplotlib contourpy cycler fonttools kiwisolver packaging pyparsing python-dateutil six tqdm scipy flax optax orbax-checkpoint tensorstore absl-py etils ml-collections msgpack pyyaml rich pygments markdown-it-py mdurl typing-extensions humanize simplejson protobuf cloudpickle xxhash lxml pillow treescope toolz chex nest-asyncio aiofiles importlib-resources zipp fsspec"
  $PIP --only-binary=:all: --index-url file:///opt/pypi/simple $NAMES 2>/dev/null || for n in $NAMES; do $PIP --only-binary=:all: --index-url file:///opt/pypi/simple $n 2>/dev/null || echo "MISSING $n"; done
fi
mkdir -p /tmp/shim && printf '"""stand-in: no video is rendered on this machine"""\n' > /tmp/shim/av.py
export PYTHONPATH=$PYTHONPATH:/tmp/site:/tmp/shim
echo "setup $(( $(date +%s) - t0 )) s"
python3 -c "import jax, flax, optax, mujoco, brax; print(jax.__version__, jax.devices(), 'flax', flax.__version__, 'optax', optax.__version__, 'mujoco', mujoco.__version__); import brax.envs, mujoco.mjx, tyro, train, benchmarks.versus; import brax.training.agents.ppo.train; print('imports ok')" 2>&1 | grep -v "Failed to import" | tail -5
export PYTHONUNBUFFERED=1
"$@"
