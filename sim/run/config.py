"""The one typed, frozen run configuration. Each field's docstring is its `--help` text.

Hyper-parameter names and meanings follow `brax.training` (a Brax config ports by copying
its numbers); per-environment defaults follow the published Brax training configs.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Literal, Optional

import tyro

AGENTS = ("ppo", "sac", "td3", "ddpg")
OFF_POLICY = ("sac", "td3", "ddpg")


class ConfigError(ValueError):
    """A bad config value: `flag` names the command-line flag to change."""

    def __init__(self, flag: str, message: str):
        super().__init__(f"--{flag}: {message}")
        self.flag = flag


@dataclasses.dataclass(frozen=True)
class Config:
    # ---- run ----
    env: str = "cartpole"
    """Environment name (see the README's table; e.g. cartpole, pendulum, ant, humanoid)."""
    backend: Optional[str] = None
    """Physics backend for Brax envs: mjx, generalized, positional or spring (default: the env's own)."""
    agent: Literal["ppo", "sac", "td3", "ddpg"] = "ppo"
    """Learning algorithm."""
    num_envs: int = 64
    """Parallel training environments."""
    total_steps: int = 500_000
    """Environment steps to train for (rounded up to whole epochs of whole iterations)."""
    seed: int = 0
    """Random seed of the whole run."""
    run_dir: Optional[str] = None
    """Where config.json and metrics.jsonl go (default: runs/<env>__<agent>__<seed>__<time>)."""
    overwrite: bool = False
    """Start over in a --run-dir that holds an earlier run: removes the files that run wrote (config.json, metrics.jsonl, checkpoints/, curve.png, W&B files) and nothing else (without it such a run dir is refused)."""
    epochs: int = 20
    """Number of epochs the run is split into: one compiled program call and one metrics line each."""
    eval_every: int = 1
    """Evaluate every N epochs (0: only after the last epoch, which always evaluates)."""
    num_eval_envs: int = 128
    """Parallel environments for the deterministic evaluation episodes."""
    progress: bool = True
    """Show a progress bar on stderr."""
    compile_cache: str = "auto"
    """Directory of JAX's persistent compilation cache, so a restart, resume or --play reuses compiled programs (auto: $XDG_CACHE_HOME/fusedrl/jax, else ~/.cache/fusedrl/jax; off: no cache)."""
    stall_timeout: float = 300.0
    """On a CPU backend, end the run (exit code 4) when a stage or an epoch keeps the process idle this many seconds: a deadlock, not work (0: never). Slow stages are reported either way."""

    # ---- checkpoints, evaluation and video ----
    resume: Optional[str] = None
    """Continue the run in this run directory from its newest checkpoint (its config.json gives the defaults; flags given override)."""
    checkpoint_every: int = 0
    """Write a checkpoint every N epochs into <run-dir>/checkpoints (0: only at the end and on Ctrl-C; -1: never)."""
    checkpoint_buffer: Literal["auto", "on", "off"] = "auto"
    """Off-policy: keep the replay buffer in checkpoints (auto: when it fits in half the free disk and host memory; without it a resume refills it with random actions)."""
    play: Optional[str] = None
    """Instead of training, evaluate the newest checkpoint of this run directory: --num-eval-envs deterministic episodes, mean/std return."""
    video: Optional[str] = None
    """With --play: render one deterministic episode offscreen into this .mp4 file."""

    # ---- Weights & Biases ----
    wandb: bool = False
    """Log the config once and every epoch's metrics to Weights & Biases (x-axis: env steps)."""
    wandb_project: str = "fusedrl"
    """W&B project."""
    wandb_entity: Optional[str] = None
    """W&B entity (user or team; default: the API key's default entity)."""
    wandb_group: Optional[str] = None
    """W&B group, to show runs (e.g. seeds) together."""
    wandb_tags: tuple[str, ...] = ()
    """W&B tags."""
    wandb_mode: Optional[Literal["online", "offline"]] = None
    """W&B mode (default: $WANDB_MODE, else online; online without an API key falls back to offline)."""

    # ---- devices and hosts ----
    devices: Optional[int] = None
    """Devices to shard the envs and batches over (default: all local devices). On a CPU-only
    host, N > 1 splits the CPU into N XLA devices, each stepping its share of the envs on its
    own thread: `--devices <cores>` uses every core (a run's results depend on N: its RNG
    streams are per device)."""
    coordinator: Optional[str] = None
    """Multi-host: address host:port of process 0 (or JAX_COORDINATOR_ADDRESS)."""
    num_processes: Optional[int] = None
    """Multi-host: total number of processes (or JAX_NUM_PROCESSES)."""
    process_id: Optional[int] = None
    """Multi-host: index of this process, 0 .. num_processes - 1 (or JAX_PROCESS_ID)."""

    # ---- shared hyper-parameters (brax.training names) ----
    episode_length: int = 500
    """Time limit of an episode, in environment steps."""
    action_repeat: int = 1
    """Repeat each policy action this many environment steps."""
    discounting: float = 0.99
    """Discount factor gamma."""
    learning_rate: float = 3e-4
    """Adam learning rate."""
    reward_scaling: float = 1.0
    """Rewards are multiplied by this before learning."""
    normalize_observations: bool = True
    """Normalise observations with running mean/std statistics."""
    batch_size: int = 256
    """PPO: trajectories per minibatch. Off-policy: transitions per gradient step."""
    max_grad_norm: Optional[float] = None
    """Clip gradients to this global norm (None: no clipping)."""
    policy_hidden_sizes: tuple[int, ...] = (64, 64)
    """Hidden layer sizes of the policy network."""
    value_hidden_sizes: tuple[int, ...] = (64, 64)
    """Hidden layer sizes of the value network (PPO) or each Q network (off-policy)."""
    activation: Literal["swish", "tanh", "relu", "elu"] = "tanh"
    """Hidden-layer activation."""
    matmul_dtype: Literal["float32", "bfloat16"] = "float32"
    """Operand dtype of the hidden-to-hidden matmuls of every network, forward and backward. bfloat16 multiplies in bfloat16 and sums in float32 (parameters, optimizer state and the input and output layers stay float32): faster where the hardware has bfloat16 matmuls (GPUs; CPUs with AVX512-BF16 or AMX), slower where it does not, and rounds differently, so a seed's run differs from its float32 run."""

    # ---- PPO ----
    unroll_length: int = 32
    """PPO: environment steps per trajectory between updates."""
    num_minibatches: int = 4
    """PPO: minibatches per pass over the collected data; batch_size * num_minibatches trajectories are collected per iteration."""
    num_updates_per_batch: int = 4
    """PPO: passes (epochs) of minibatch updates over each collected batch."""
    gae_lambda: float = 0.95
    """PPO: GAE lambda."""
    entropy_cost: float = 0.01
    """PPO: weight of the entropy bonus."""
    clipping_epsilon: float = 0.2
    """PPO: ratio clipping epsilon of the surrogate objective."""
    value_loss_coef: float = 0.5
    """PPO: weight of the value loss (0.5 * squared error)."""
    clip_value_loss: bool = False
    """PPO: clip the value update around the old value estimate, like the policy ratio."""
    normalize_advantage: bool = True
    """PPO: normalise advantages per minibatch."""
    anneal_lr: bool = False
    """Linearly anneal the learning rate to zero over the run."""

    # ---- off-policy (SAC / TD3 / DDPG) ----
    max_replay_size: Annotated[int, tyro.conf.arg(aliases=("--buffer-size",))] = 1_048_576
    """Off-policy: replay buffer capacity in transitions."""
    min_replay_size: int = 8192
    """Off-policy: transitions collected with random actions before learning starts."""
    grad_updates_per_step: int = 1
    """Off-policy: gradient steps per environment step of all envs (one iteration)."""
    tau: float = 0.005
    """Off-policy: Polyak averaging rate of the target networks."""
    policy_delay: int = 2
    """TD3: update the policy and targets every this many critic updates (DDPG: 1)."""
    exploration_noise: float = 0.1
    """TD3/DDPG: std of the Gaussian exploration noise on actions in [-1, 1]."""
    target_noise: float = 0.2
    """TD3: std of the target policy smoothing noise (DDPG: 0)."""
    target_noise_clip: float = 0.5
    """TD3: clip of the target policy smoothing noise."""
    init_alpha: float = 1.0
    """SAC: initial entropy temperature (learned towards the target entropy -action_dims)."""

    # ---- derived sizes ----
    @property
    def is_off_policy(self) -> bool:
        return self.agent in OFF_POLICY

    @property
    def steps_per_iteration(self) -> int:
        """Environment steps of one training iteration."""
        if self.is_off_policy:
            return self.num_envs * self.action_repeat
        return self.batch_size * self.num_minibatches * self.unroll_length * self.action_repeat

    @property
    def unrolls_per_iteration(self) -> int:
        """PPO: sequential unrolls of all envs per iteration."""
        return self.batch_size * self.num_minibatches // self.num_envs

    @property
    def prefill_iterations(self) -> int:
        """Off-policy: iterations of random actions that fill the buffer to min_replay_size."""
        return -(-self.min_replay_size // self.num_envs) if self.is_off_policy else 0

    @property
    def prefill_steps(self) -> int:
        """Off-policy: environment steps of the random-action prefill (counted in the budget)."""
        return self.prefill_iterations * self.num_envs * self.action_repeat

    @property
    def num_epochs(self) -> int:
        # Fewest whole epochs of iterations_per_epoch that cover the budget.
        return -(-self.total_iterations // self.iterations_per_epoch)

    @property
    def total_iterations(self) -> int:
        return max(1, -(-(self.total_steps - self.prefill_steps) // self.steps_per_iteration))

    @property
    def iterations_per_epoch(self) -> int:
        return -(-self.total_iterations // max(1, min(self.epochs, self.total_iterations)))

    @property
    def steps_per_epoch(self) -> int:
        return self.iterations_per_epoch * self.steps_per_iteration

    def validate(self) -> "Config":
        """Checks every value before anything compiles; raises ConfigError naming the flag."""
        import envs

        try:
            envs.check(self.env, self.backend)
        except ValueError as err:
            flag = "env" if "unknown env" in str(err) else "backend"
            raise ConfigError(flag, str(err)) from None
        positive = ["num_envs", "total_steps", "epochs", "num_eval_envs", "episode_length", "action_repeat",
                    "batch_size", "unroll_length", "num_minibatches", "num_updates_per_batch", "max_replay_size",
                    "grad_updates_per_step", "policy_delay"]
        for name in positive:
            value = getattr(self, name)
            if value < 1:
                raise ConfigError(name.replace("_", "-"), f"must be a positive integer, got {value}")
        if self.eval_every < 0:
            raise ConfigError("eval-every", f"must be >= 0, got {self.eval_every}")
        if self.stall_timeout < 0:
            raise ConfigError("stall-timeout", f"must be >= 0 seconds, got {self.stall_timeout}")
        if self.checkpoint_every < -1:
            raise ConfigError("checkpoint-every", f"must be >= -1, got {self.checkpoint_every}")
        if self.video is not None and self.play is None:
            raise ConfigError("video", "needs --play RUN_DIR (the run whose policy to film)")
        if self.video is not None and not self.video.lower().endswith(".mp4"):
            raise ConfigError("video", f"must be an .mp4 file path, got {self.video!r}")
        if self.resume is not None and self.play is not None:
            raise ConfigError("play", "cannot be combined with --resume")
        if self.overwrite and (self.resume is not None or self.play is not None):
            raise ConfigError("overwrite", "starts a fresh run: it cannot be combined with --resume or --play")
        if self.min_replay_size < 0:
            raise ConfigError("min-replay-size", f"must be >= 0, got {self.min_replay_size}")
        unit = {"discounting": (0.0, 1.0), "gae_lambda": (0.0, 1.0), "tau": (0.0, 1.0)}
        for name, (lo, hi) in unit.items():
            value = getattr(self, name)
            if not lo <= value <= hi:
                raise ConfigError(name.replace("_", "-"), f"must be in [{lo}, {hi}], got {value}")
        for name in ("learning_rate", "clipping_epsilon", "init_alpha"):
            if getattr(self, name) <= 0:
                raise ConfigError(name.replace("_", "-"), f"must be > 0, got {getattr(self, name)}")
        if self.max_grad_norm is not None and self.max_grad_norm <= 0:
            raise ConfigError("max-grad-norm", f"must be > 0 when set, got {self.max_grad_norm}")
        if any(h < 1 for h in self.policy_hidden_sizes + self.value_hidden_sizes):
            raise ConfigError("policy-hidden-sizes", "hidden sizes must be positive integers")
        if self.is_off_policy:
            if self.batch_size > self.max_replay_size:
                raise ConfigError("batch-size", f"{self.batch_size} exceeds --max-replay-size {self.max_replay_size}")
            if self.min_replay_size > self.max_replay_size:
                raise ConfigError("min-replay-size",
                                  f"{self.min_replay_size} exceeds --max-replay-size {self.max_replay_size}")
            if self.max_replay_size < self.num_envs:
                raise ConfigError("max-replay-size", f"must hold at least one batch of --num-envs {self.num_envs}")
        else:
            trajectories = self.batch_size * self.num_minibatches
            if trajectories % self.num_envs:
                lo = max(d for d in range(1, self.num_envs + 1) if trajectories % d == 0)
                hi = next(d for d in range(self.num_envs, trajectories + 1) if trajectories % d == 0)
                raise ConfigError(
                    "num-envs",
                    f"batch_size * num_minibatches = {trajectories} trajectories must divide by num_envs "
                    f"{self.num_envs}; use --num-envs {lo} or {hi}, or change --batch-size/--num-minibatches")
        return self


# Published Brax PPO settings (brax training colab), in brax.training names.
_BRAX_PPO = dict(episode_length=1000, normalize_observations=True, action_repeat=1, learning_rate=3e-4,
                 activation="swish", policy_hidden_sizes=(32, 32, 32, 32), value_hidden_sizes=(256,) * 5,
                 gae_lambda=0.95, clipping_epsilon=0.3, value_loss_coef=0.5, num_eval_envs=128)
PPO_DEFAULTS: dict[str, dict] = {
    "cartpole": dict(num_envs=32, total_steps=500_000, episode_length=500, unroll_length=32, batch_size=64,
                     num_minibatches=4, num_updates_per_batch=4, learning_rate=2.5e-3, entropy_cost=0.01,
                     discounting=0.99, max_grad_norm=0.5, anneal_lr=True, normalize_observations=False),
    "acrobot": dict(num_envs=32, total_steps=500_000, episode_length=500, unroll_length=32, batch_size=64,
                    num_minibatches=4, num_updates_per_batch=4, learning_rate=2.5e-3, max_grad_norm=0.5,
                    anneal_lr=True),
    "pendulum": dict(num_envs=64, total_steps=2_000_000, episode_length=200, unroll_length=32, batch_size=64,
                     num_minibatches=32, num_updates_per_batch=8, learning_rate=1e-3, entropy_cost=1e-3,
                     discounting=0.95, gae_lambda=0.95, reward_scaling=0.1, max_grad_norm=0.5, anneal_lr=True,
                     activation="swish"),
    "mountain_car_continuous": dict(num_envs=64, total_steps=2_000_000, episode_length=999, unroll_length=32,
                                    batch_size=64, num_minibatches=8, num_updates_per_batch=4, entropy_cost=0.01,
                                    discounting=0.99, max_grad_norm=0.5),
    "inverted_pendulum": dict(_BRAX_PPO, num_envs=2048, total_steps=2_000_000, reward_scaling=10, unroll_length=5,
                              num_minibatches=32, num_updates_per_batch=4, discounting=0.97, entropy_cost=1e-2,
                              batch_size=1024),
    "inverted_double_pendulum": dict(_BRAX_PPO, num_envs=2048, total_steps=20_000_000, reward_scaling=10,
                                     unroll_length=5, num_minibatches=32, num_updates_per_batch=4,
                                     discounting=0.97, entropy_cost=1e-2, batch_size=1024),
    "ant": dict(_BRAX_PPO, num_envs=4096, total_steps=50_000_000, reward_scaling=10, unroll_length=5,
                num_minibatches=32, num_updates_per_batch=4, discounting=0.97, entropy_cost=1e-2, batch_size=2048),
    "humanoid": dict(_BRAX_PPO, num_envs=2048, total_steps=50_000_000, reward_scaling=0.1, unroll_length=10,
                     num_minibatches=32, num_updates_per_batch=8, discounting=0.97, entropy_cost=1e-3,
                     batch_size=1024),
    "humanoidstandup": dict(_BRAX_PPO, num_envs=2048, total_steps=100_000_000, reward_scaling=0.1,
                            unroll_length=15, num_minibatches=32, num_updates_per_batch=8, discounting=0.97,
                            learning_rate=6e-4, entropy_cost=1e-2, batch_size=1024),
    "halfcheetah": dict(_BRAX_PPO, num_envs=2048, total_steps=50_000_000, reward_scaling=1, unroll_length=20,
                        num_minibatches=32, num_updates_per_batch=8, discounting=0.95, entropy_cost=1e-3,
                        batch_size=512),
    "reacher": dict(_BRAX_PPO, num_envs=2048, total_steps=50_000_000, reward_scaling=5, action_repeat=4,
                    unroll_length=50, num_minibatches=32, num_updates_per_batch=8, discounting=0.95,
                    entropy_cost=1e-3, batch_size=256),
    "pusher": dict(_BRAX_PPO, num_envs=2048, total_steps=50_000_000, reward_scaling=5, unroll_length=30,
                   num_minibatches=16, num_updates_per_batch=8, discounting=0.95, entropy_cost=1e-2,
                   batch_size=512),
}
# Envs without a published PPO config start from ant's.
for _name in ("hopper", "walker2d", "swimmer", "CartpoleBalance", "CheetahRun", "HumanoidWalk", "WalkerWalk"):
    PPO_DEFAULTS[_name] = dict(PPO_DEFAULTS["ant"], reward_scaling=1.0)

# Published Brax SAC settings (brax training colab).
_BRAX_SAC = dict(episode_length=1000, normalize_observations=True, action_repeat=1, num_envs=128,
                 batch_size=512, grad_updates_per_step=64, max_replay_size=1_048_576, min_replay_size=8192,
                 activation="relu", policy_hidden_sizes=(256, 256), value_hidden_sizes=(256, 256),
                 discounting=0.99, learning_rate=6e-4, num_eval_envs=128)
OFF_POLICY_DEFAULTS: dict[str, dict] = {
    "pendulum": dict(num_envs=16, total_steps=20_000, episode_length=200, batch_size=256, grad_updates_per_step=8,
                     max_replay_size=100_000, min_replay_size=1024, activation="relu",
                     policy_hidden_sizes=(256, 256), value_hidden_sizes=(256, 256), discounting=0.99,
                     learning_rate=1e-3, normalize_observations=False, num_eval_envs=32),
    "mountain_car_continuous": dict(num_envs=16, total_steps=100_000, episode_length=999, batch_size=256,
                                    grad_updates_per_step=8, max_replay_size=100_000, min_replay_size=4096,
                                    activation="relu", policy_hidden_sizes=(256, 256),
                                    value_hidden_sizes=(256, 256), learning_rate=1e-3,
                                    normalize_observations=False, num_eval_envs=32),
    "inverted_pendulum": dict(_BRAX_SAC, total_steps=100_000, reward_scaling=1.0),
    "hopper": dict(_BRAX_SAC, total_steps=6_553_600, reward_scaling=30, discounting=0.997),
    "walker2d": dict(_BRAX_SAC, total_steps=7_864_320, reward_scaling=5, discounting=0.997, batch_size=128,
                     grad_updates_per_step=32),
    "halfcheetah": dict(_BRAX_SAC, total_steps=5_000_000, reward_scaling=1.0, grad_updates_per_step=32),
}
for _name in ("ant", "humanoid", "humanoidstandup", "inverted_double_pendulum", "pusher", "reacher", "swimmer",
              "CartpoleBalance", "CheetahRun", "HumanoidWalk", "WalkerWalk"):
    OFF_POLICY_DEFAULTS[_name] = dict(_BRAX_SAC, total_steps=5_000_000, reward_scaling=1.0)


def defaults_for(env: str, agent: str = "ppo") -> Config:
    """The tuned default config of (env, agent); unknown names get the generic defaults."""
    table = OFF_POLICY_DEFAULTS if agent in OFF_POLICY else PPO_DEFAULTS
    overrides = dict(table.get(env, {}))
    if agent in OFF_POLICY and env in ("cartpole", "acrobot"):
        overrides = {}
    if agent == "ddpg":
        overrides.update(policy_delay=1, target_noise=0.0)
    return Config(env=env, agent=agent, **overrides)
