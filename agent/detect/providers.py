"""Default options per execution provider: where compiled models are cached, threads.

The runtime passes options through untouched; these are the defaults the agent adds under
whatever ``detector.provider_options`` sets (a key the operator sets always wins). Option
names are the ones each provider's onnxruntime build accepts (checked against
onnxruntime-openvino 1.24 and the TensorRT provider documentation); an unknown key makes a
provider fail to load, and the runtime then falls back to the next one.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

OPENVINO = "OpenVINOExecutionProvider"
TENSORRT = "TensorrtExecutionProvider"


def cache_root(state_dir: Path, env: Mapping[str, str] | None = None) -> Path:
    """Directory for provider caches: systemd's CacheDirectory if set, else <state>/cache."""
    env = os.environ if env is None else env
    cache = env.get("CACHE_DIRECTORY", "")
    return Path(cache.split(":")[0]) if cache else state_dir / "cache"


def default_provider_options(
    provider: str, *, threads: int | None, cache_dir: Path | None
) -> dict[str, str]:
    """The agent's defaults for ``provider`` (empty for providers without any)."""
    if provider == OPENVINO:
        # CPU device at full FP32: OpenVINO would otherwise run bf16 on CPUs with AMX,
        # changing results. One stream: the engine's sessions x threads layout is the
        # throughput knob, as for the CPU provider.
        opts = {"device_type": "CPU", "precision": "FP32", "num_streams": "1"}
        if threads is not None:
            opts["num_of_threads"] = str(threads)
        if cache_dir is not None:
            opts["cache_dir"] = str(cache_dir / "openvino")
        return opts
    if provider == TENSORRT and cache_dir is not None:
        # Building an engine takes minutes on a Jetson: keep it across restarts.
        path = str(cache_dir / "tensorrt")
        return {
            "trt_engine_cache_enable": "True",
            "trt_engine_cache_path": path,
            "trt_timing_cache_enable": "True",
            "trt_timing_cache_path": path,
        }
    return {}


def with_defaults(
    options: Mapping[str, Mapping[str, Any]],
    providers: tuple[str, ...] | list[str],
    *,
    threads: int | None,
    cache_dir: Path | None,
) -> dict[str, dict[str, Any]]:
    """``options`` (keyed by provider) over the defaults of every provider in ``providers``.

    Cache directories named by the result are created (the provider would fail otherwise).
    """
    merged: dict[str, dict[str, Any]] = {k: dict(v) for k, v in options.items()}
    for provider in providers:
        defaults = default_provider_options(provider, threads=threads, cache_dir=cache_dir)
        if not defaults:
            continue
        merged[provider] = {**defaults, **merged.get(provider, {})}
        for key in ("cache_dir", "trt_engine_cache_path", "trt_timing_cache_path"):
            value = merged[provider].get(key)
            if isinstance(value, str | Path) and str(value):
                # An unwritable cache only costs start-up time; the provider says so itself.
                with contextlib.suppress(OSError):
                    Path(value).mkdir(parents=True, exist_ok=True)
    return merged
