"""An agent's optimizer: an optax chain built from its config, its hyper-parameters injected.

    clip_by_global_norm(max_grad_norm) -> scale_by_adam(b1, b2)
        [-> add_decayed_weights(weight_decay): AdamW's decoupled decay] -> scale_by_learning_rate(learning_rate)

wrapped in `optax.inject_hyperparams`, so the learning rate, the clipping norm and the decay
are arrays of the optimizer state, not constants of the program. Their values come from the
agent state's `hp` (the config's, a population member's, PBT's latest) and are written into
the optimizer state before every step (`Optimizer.step`): sweeps and PBT change them without
a recompile. An unset `max_grad_norm` is +inf in `hp`: the clip then leaves finite gradients
bit for bit as they are.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax

# The hyper-parameters each chain reads, by their names in the agent state's `hp`.
ADAM_HYPER = ("learning_rate", "max_grad_norm")
ADAMW_HYPER = ADAM_HYPER + ("weight_decay",)


def _adam_chain(b1: float, b2: float) -> Callable[..., optax.GradientTransformation]:
    def chain(learning_rate, max_grad_norm):
        return optax.chain(optax.clip_by_global_norm(max_grad_norm), optax.scale_by_adam(b1=b1, b2=b2),
                           optax.scale_by_learning_rate(learning_rate))

    return chain


def _adamw_chain(b1: float, b2: float) -> Callable[..., optax.GradientTransformation]:
    def chain(learning_rate, max_grad_norm, weight_decay):
        return optax.chain(optax.clip_by_global_norm(max_grad_norm), optax.scale_by_adam(b1=b1, b2=b2),
                           optax.add_decayed_weights(weight_decay), optax.scale_by_learning_rate(learning_rate))

    return chain


@dataclasses.dataclass(frozen=True)
class Optimizer:
    """One agent's optimizer: `init(params, hp)` and `step(grads, opt_state, params, hp)`."""

    transform: Callable[..., optax.GradientTransformation]  # inject_hyperparams of the chain
    hyper: tuple[str, ...]  # the hyper-parameters it reads from `hp`

    def values(self, hp, **overrides) -> dict:
        """Its hyper-parameters' current values: `hp`'s (float32 arrays), or `overrides`
        (e.g. an annealed learning rate)."""
        return {name: jnp.asarray(overrides[name] if name in overrides else getattr(hp, name), jnp.float32)
                for name in self.hyper}

    def init(self, params, hp) -> optax.OptState:
        return self.transform(**self.values(hp)).init(params)

    def step(self, grads, opt_state, params, hp, **overrides) -> tuple[Any, optax.OptState]:
        """(params, opt_state) after one step on `grads` with the current hyper-parameters."""
        values = self.values(hp, **overrides)
        opt_state = opt_state._replace(hyperparams=values)
        updates, opt_state = self.transform(**values).update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state


def adam(b1: float = 0.9, b2: float = 0.999) -> Optimizer:
    """Adam with gradient clipping (`max_grad_norm`) and `learning_rate` from `hp`."""
    return Optimizer(optax.inject_hyperparams(_adam_chain(b1, b2), hyperparam_dtype=jnp.float32), ADAM_HYPER)


def adamw(b1: float = 0.9, b2: float = 0.999) -> Optimizer:
    """AdamW (decoupled `weight_decay`: p -= lr * (adam + weight_decay * p)), clipped, from `hp`."""
    return Optimizer(optax.inject_hyperparams(_adamw_chain(b1, b2), hyperparam_dtype=jnp.float32), ADAMW_HYPER)


def steps_done(opt_state) -> jax.Array:
    """int32: the optimizer steps taken (the injected state counts them)."""
    return opt_state.count
