"""Each agent's per-env defaults: the published training configs it starts from, as data
beside the agents (an `AgentDef`'s `defaults`), in brax.training's flag names. A key is an
env's registry name; a variant env (e.g. cartpole_no_vel) takes those of the env it is tuned
as (`envs.tuned_as`)."""
