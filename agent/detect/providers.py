"""Default options per execution provider: where compiled models are cached, CPU pinning.

The runtime passes options through untouched; these are the defaults the agent adds under
whatever ``detector.provider_options`` sets (a key the operator sets always wins). Option
names are the ones each provider's onnxruntime build accepts (checked against
onnxruntime-openvino 1.24 and the TensorRT provider documentation); an unknown key makes a
provider fail to load, and the runtime then falls back to the next one.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agent.provider_names import OPENVINO, TENSORRT

#: OpenVINO CPU plugin properties the agent sets through the provider's ``load_config``.
#: The plugin pins its inference threads to cores by default, choosing the cores per
#: compiled model: two sessions with one thread each were both pinned to the same core and
#: ran at half speed (measured: 2 sessions x 1 thread, INT8 640, 8.4 inferences/s pinned,
#: 15.5-18.4 unpinned, on a 2-core AMD EPYC). The agent's layout already keeps one thread
#: per core busy, and the capture thread needs to run somewhere too.
OPENVINO_CPU_CONFIG = {"ENABLE_CPU_PINNING": "NO"}


def cache_root(state_dir: Path, env: Mapping[str, str] | None = None) -> Path:
    """Directory for provider caches: systemd's CacheDirectory if set, else <state>/cache."""
    env = os.environ if env is None else env
    cache = env.get("CACHE_DIRECTORY", "")
    return Path(cache.split(":")[0]) if cache else state_dir / "cache"


def default_provider_options(provider: str, *, cache_dir: Path | None) -> dict[str, str]:
    """The agent's defaults for ``provider`` (empty for providers without any)."""
    if provider == OPENVINO:
        # CPU device at full FP32: OpenVINO would otherwise run bf16 on CPUs with AMX,
        # changing results. One stream: the engine's sessions x threads layout is the
        # throughput knob, as for the CPU provider.
        opts = {
            "device_type": "CPU",
            "precision": "FP32",
            "num_streams": "1",
            "load_config": json.dumps({"CPU": OPENVINO_CPU_CONFIG}),
        }
        # num_of_threads is per session: the runtime sets it from the session's thread
        # budget (intra_op_num_threads does not reach OpenVINO's own thread pool).
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
    cache_dir: Path | None,
) -> dict[str, dict[str, Any]]:
    """``options`` (keyed by provider) over the defaults of every provider in ``providers``.

    Cache directories named by the result are created (the provider would fail otherwise).
    """
    merged: dict[str, dict[str, Any]] = {k: dict(v) for k, v in options.items()}
    for provider in providers:
        defaults = default_provider_options(provider, cache_dir=cache_dir)
        if not defaults:
            continue
        own = merged.get(provider, {})
        if provider == OPENVINO and str(own.get("device_type", "CPU")).upper() != "CPU":
            defaults.pop("load_config", None)  # CPU plugin properties; not for GPU/NPU
        merged[provider] = {**defaults, **own}
        for key in ("cache_dir", "trt_engine_cache_path", "trt_timing_cache_path"):
            value = merged[provider].get(key)
            if isinstance(value, str | Path) and str(value):
                # An unwritable cache only costs start-up time; the provider says so itself.
                with contextlib.suppress(OSError):
                    Path(value).mkdir(parents=True, exist_ok=True)
    return merged
