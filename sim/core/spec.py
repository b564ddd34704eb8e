"""What the compiled core reads of a run: the narrow interface between the core and the run
harness. The harness's config (`sim.run.config.Config`) is one; the core never imports it."""

from __future__ import annotations

from typing import Any, Optional, Protocol


class RunSpec(Protocol):
    env: str  # the env's registry name, its backend and time limit, and the action repeat
    backend: Optional[str]
    episode_length: Optional[int]
    action_repeat: int
    num_envs: int  # envs of the whole run (of one device in `per_device(n)`)
    num_eval_envs: int
    num_seeds: int
    agent_config: Any  # the agent's config (its sizes and hyper-parameters)

    @property
    def agent_def(self) -> Any: ...  # the agent's declaration (agents.base.AgentDef)

    @property
    def kind(self) -> Any: ...  # its iteration kind: the loop that runs it

    @property
    def loop(self) -> Any: ...

    @property
    def population_size(self) -> int: ...  # members trained in one program (1: one run)

    @property
    def steps_per_iteration(self) -> int: ...

    @property
    def unrolls_per_iteration(self) -> int: ...

    @property
    def prefill_iterations(self) -> int: ...

    @property
    def iterations_per_epoch(self) -> int: ...

    @property
    def total_iterations(self) -> int: ...

    def validate(self) -> "RunSpec": ...  # the sizes checked (raises the harness's error)

    def device_count(self) -> int: ...  # devices the run shards over

    def per_device(self, n: int) -> "RunSpec": ...  # one of n devices' sizes

    def member_hp(self) -> Any: ...  # the members' hyper-parameters, stacked [M] (populations)
