"""The evolution agents' (ES, ARS) per-env defaults: chosen here (Brax publishes none for
these envs): one env per perturbed policy, so a generation is population_size episodes."""

from __future__ import annotations

ES_DEFAULTS: dict[str, dict] = {
    "cartpole": dict(num_envs=32, population_size=32, total_steps=1_000_000, episode_length=500, num_eval_envs=32,
                     learning_rate=0.1),
    "pendulum": dict(num_envs=64, population_size=64, total_steps=4_000_000, episode_length=200, num_eval_envs=32),
    # 16 members at Adam 0.03: 1000 from its 96th generation (1.54M env steps) on; 64 members at 0.01
    # evaluated at 158 after 16 generations (1.02M steps).
    "inverted_pendulum": dict(num_envs=16, population_size=16, learning_rate=0.03, total_steps=2_000_000,
                              episode_length=1000, num_eval_envs=32, normalize_observations=True),
    # Half Brax's ES population (its 128 noise vectors play 256 members; 64 pairs here, for a CPU's
    # generation), its 1,000-step episodes, observation statistics.
    "ant": dict(num_envs=128, population_size=128, total_steps=50_000_000, episode_length=1000,
                normalize_observations=True),
}
ARS_DEFAULTS: dict[str, dict] = {
    "cartpole": dict(num_envs=32, population_size=32, top_directions=8, total_steps=1_000_000, episode_length=500,
                     num_eval_envs=32, learning_rate=0.02),
    "pendulum": dict(num_envs=64, population_size=64, top_directions=16, total_steps=4_000_000, episode_length=200,
                     num_eval_envs=32, normalize_observations=True),
    # ARS V1 (raw observations) with a large step and noise: 1000 from 256k env steps on (3 seeds).
    # Normalised observations (V2) crept to 85-100 or reached 1000 and fell back: the running
    # statistics narrow as the pole stays up, which scales up the policy's effective gain.
    "inverted_pendulum": dict(num_envs=32, population_size=32, top_directions=8, total_steps=1_000_000,
                              episode_length=1000, num_eval_envs=32, learning_rate=0.1,
                              exploration_noise_std=0.1),
    # The ARS paper's Ant (V2: 60 directions, their 20 best, step 0.015, noise 0.025, observation
    # statistics), which are also Brax's ARS defaults; no reward shift here.
    "ant": dict(num_envs=120, population_size=120, top_directions=20, total_steps=50_000_000, episode_length=1000,
                learning_rate=0.015, exploration_noise_std=0.025, normalize_observations=True),
}
EVOSAX_DEFAULTS: dict[str, dict] = {
    "cartpole": dict(num_envs=32, population_size=32, total_steps=1_000_000, episode_length=500, num_eval_envs=32),
}
