"""ONNX Runtime sessions and execution-provider selection. Knows nothing of YOLO."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from agent.detect.sniff import HEAD_BYTES, sniff
from agent.errors import ModelError, ProviderError
from agent.log import get_logger
from agent.provider_names import CPU, OPENVINO, PREFERENCE, canonical_provider

log = get_logger("runtime")

_DTYPES: dict[str, type[np.floating]] = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
}


def resolve_providers(requested: Sequence[str], available: Sequence[str]) -> list[str]:
    """Ordered providers to try. Unknown names in an explicit list are an error."""
    if list(requested) == ["auto"]:
        return [p for p in PREFERENCE if p in available]
    wanted = [canonical_provider(p) for p in requested]
    missing = [p for p in wanted if p not in available]
    if missing:
        raise ProviderError(
            f"execution provider(s) {', '.join(missing)} not in this onnxruntime build "
            f"(available: {', '.join(available)}); install the matching onnxruntime package "
            "or use providers: [auto]"
        )
    return wanted


def cpu_first(spec: SessionSpec) -> bool:
    """Whether sessions of ``spec`` are tried on the CPU provider first."""
    candidates = resolve_providers(spec.providers, ort.get_available_providers())
    return bool(candidates) and candidates[0] == CPU


@dataclass(frozen=True, slots=True)
class SessionSpec:
    """How to build a session: providers to try in order, threads, options."""

    providers: tuple[str, ...] = ("auto",)
    threads: int | None = None
    provider_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    allow_spinning: bool = False


def session_provider_options(spec: SessionSpec, provider: str) -> dict[str, Any]:
    """The options one session of ``spec`` passes to ``provider``.

    OpenVINO runs its own thread pool, which ``intra_op_num_threads`` does not reach: it
    gets the session's thread budget as ``num_of_threads`` (unless the operator set one),
    or each session of an N sessions x 1 thread layout would take every core.
    """
    options = dict(spec.provider_options.get(provider, {}))
    if provider == OPENVINO and spec.threads is not None:
        options.setdefault("num_of_threads", str(spec.threads))
    return options


@dataclass(frozen=True, slots=True)
class InputSpec:
    name: str
    shape: tuple[int | str | None, ...]
    dtype: type[np.floating]


def _not_onnx(model: Path | bytes) -> str:
    """'cannot load model X: not an ONNX model (the file is a JPEG ...)' for a parse failure."""
    if isinstance(model, Path):
        try:
            with model.open("rb") as f:
                kind = sniff(f.read(HEAD_BYTES))
        except OSError:
            kind = None
        name = str(model)
    else:
        kind, name = sniff(model[:HEAD_BYTES]), "<bytes>"
    detail = f" (the file is {kind})" if kind and not kind.startswith("not ") else ""
    return f"cannot load model {name}: not an ONNX model{detail}"


class Runtime:
    """One ORT session on the first provider that works, with its I/O contract read off it."""

    def __init__(self, model: Path | bytes, spec: SessionSpec) -> None:
        self.spec = spec
        candidates = resolve_providers(spec.providers, ort.get_available_providers())
        if not candidates:
            raise ProviderError("no execution provider available in this onnxruntime build")
        errors: list[str] = []
        for provider in candidates:
            try:
                self.session = self._create(model, provider)
            except ModelError:
                raise
            except Exception as e:  # any provider failure means "try the next"
                reason = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
                log.warning("provider_failed", provider=provider, reason=reason)
                errors.append(f"{provider}: {reason}")
                continue
            self.provider = self.session.get_providers()[0]
            self.provider_options: dict[str, Any] = dict(
                self.session.get_provider_options().get(self.provider, {})
            )
            break
        else:
            raise ProviderError("no execution provider could load the model: " + "; ".join(errors))
        inputs = self.session.get_inputs()
        if len(inputs) != 1:
            raise ModelError(f"expected a model with one image input, it has {len(inputs)}")
        i = inputs[0]
        if i.type not in _DTYPES:
            raise ModelError(f"model input {i.name!r} has type {i.type}; expected float or float16")
        self.input = InputSpec(i.name, tuple(i.shape), _DTYPES[i.type])
        self.output_names = [o.name for o in self.session.get_outputs()]
        self.output_shapes = [tuple(o.shape) for o in self.session.get_outputs()]
        self.metadata: dict[str, str] = dict(self.session.get_modelmeta().custom_metadata_map)

    def _create(self, model: Path | bytes, provider: str) -> ort.InferenceSession:
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.inter_op_num_threads = 1
        if self.spec.threads is not None:
            opts.intra_op_num_threads = self.spec.threads
        # Spinning intra-op threads steal the capture thread's core on a 2-4 core device.
        opts.add_session_config_entry(
            "session.intra_op.allow_spinning", "1" if self.spec.allow_spinning else "0"
        )
        opts.log_severity_level = 3
        options = session_provider_options(self.spec, provider)
        source = str(model) if isinstance(model, Path) else model
        try:
            # enable_fallback=0: onnxruntime-gpu otherwise catches a provider that fails to
            # load, prints a banner on stdout (into `detect --json` output) and retries on
            # its own fallback list; the loop in __init__ does that, with a log line.
            session = ort.InferenceSession(
                source, sess_options=opts, providers=[(provider, options)], enable_fallback=0
            )
        except Exception as e:
            text = str(e)
            if "INVALID_PROTOBUF" in text:
                raise ModelError(_not_onnx(model)) from e
            if "NO_SUCHFILE" in text or "Load model" in text:
                raise ModelError(
                    f"cannot load model {model if isinstance(model, Path) else '<bytes>'}: "
                    f"{text.splitlines()[0][:200]}"
                ) from e
            raise
        actual = session.get_providers()[0]
        if actual != provider:
            # A provider whose libraries do not load (TensorRT without libnvinfer) does not
            # make onnxruntime fail: it builds the session on the CPU instead.
            raise ProviderError(
                f"{provider} could not be created (its libraries did not load); "
                f"onnxruntime fell back to {actual}"
            )
        return session

    def run(self, tensor: npt.NDArray[np.floating]) -> list[npt.NDArray[np.float32]]:
        """Run the model on one input tensor; returns the outputs in model order."""
        result: list[npt.NDArray[np.float32]] = self.session.run(
            self.output_names, {self.input.name: tensor}
        )
        return result
