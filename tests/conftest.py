"""Shared test setup: JAX's persistent compilation cache keeps repeated runs fast."""

import os

import jax

_CACHE = os.environ.get("FUSEDRL_JAX_CACHE", os.path.join(os.path.dirname(os.path.dirname(__file__)), ".jax_cache"))
jax.config.update("jax_compilation_cache_dir", _CACHE)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
