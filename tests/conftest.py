"""Shared test setup: JAX's persistent compilation cache keeps repeated runs fast."""

import os

import jax
import pytest

_CACHE = os.environ.get("FUSEDRL_JAX_CACHE", os.path.join(os.path.dirname(os.path.dirname(__file__)), ".jax_cache"))
jax.config.update("jax_compilation_cache_dir", _CACHE)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


@pytest.fixture(scope="session", autouse=True)
def _teachers(request):
    """The small teacher runs the distillation agents' tests read (tests/helpers.py
    `teacher_dir`), trained once per session where a collected test names one of them."""
    from tests.helpers import DISTILLING, make_teachers

    if any(name in item.nodeid for item in request.session.items for name in (*DISTILLING, "distill")):
        make_teachers()
