"""JAX's persistent compilation cache, on by default, and whether each program came from it.

A restart, a resume, `play` or a second run of the same config loads its compiled programs
from the cache directory instead of compiling them again (humanoid at 4096 envs: minutes).
"""

from __future__ import annotations

import contextlib
import os
import threading

import jax

MIN_COMPILE_SECONDS = 0.2  # programs that compile faster than this are not worth a cache entry
_events: dict[int, dict] = {}  # per thread: {"requests": n, "hits": k}
_listening = False


def directory(setting: str) -> str | None:
    """The cache directory a --compile-cache value names (None: off)."""
    if setting == "off":
        return None
    if setting == "auto":
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        return os.path.join(base, "fusedrl", "jax")
    return os.path.abspath(os.path.expanduser(setting))


def enable(setting: str) -> str | None:
    """Points JAX at the cache (before anything compiles); returns its directory or None."""
    path = directory(setting)
    jax.config.update("jax_enable_compilation_cache", path is not None)
    if path is not None:
        jax.config.update("jax_compilation_cache_dir", path)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    _listen()
    return path


def _listen() -> None:
    global _listening
    if _listening:
        return

    def on_event(event: str, **kwargs) -> None:
        counts = _events.setdefault(threading.get_ident(), {"requests": 0, "hits": 0})
        if event == "/jax/compilation_cache/compile_requests_use_cache":
            counts["requests"] += 1
        elif event == "/jax/compilation_cache/cache_hits":
            counts["hits"] += 1

    jax.monitoring.register_event_listener(on_event)
    _listening = True


@contextlib.contextmanager
def watch():
    """Yields a dict that, after the body, says how the calling thread's compilations in it
    used the cache (JAX reports them in the thread that compiles): {"requests": n, "hits": k};
    `describe()` words it."""
    _listen()
    mine = _events.setdefault(threading.get_ident(), {"requests": 0, "hits": 0})
    before = dict(mine)
    seen = {"requests": 0, "hits": 0}
    try:
        yield seen
    finally:
        seen.update({k: mine[k] - before[k] for k in seen})


def describe(seen: dict) -> str:
    if not seen["requests"]:
        return "compile cache off"
    if seen["hits"] >= seen["requests"]:
        return "compile cache hit"
    return "compile cache miss" if not seen["hits"] else "compile cache partly hit"
