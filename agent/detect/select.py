"""Execution-provider selection by measurement (``detector.select: benchmark``).

Every candidate provider loads the active model, runs a few warm detections on real
images, interleaved round by round so that thermal throttling or a background job hits
all candidates alike, and is timed (median inference time). A candidate counts only if its
post-NMS detections match the CPU provider's: INT8 kernels of different providers round
differently, so raw tensors never match exactly, but the boxes, classes and scores a
subscriber sees must. The fastest matching candidate wins. The choice is cached in the
state dir per (model sha256, provider set, onnxruntime version, options), so later
starts skip the measurement.

A provider may run its own file of the same model (``detector.provider_models``: the INT8
model quantized for OpenVINO, say). It is then timed on that file, and its detections
must match the CPU provider's on the CPU provider's file: what is compared is the
(provider, model) pair a subscriber would get.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from agent.cv import cv2
from agent.detect.detections import Detections
from agent.detect.detector import Detector, Thresholds, check_model_file, sha256_file
from agent.detect.nms import iou_matrix
from agent.detect.providers import cache_root, with_defaults
from agent.detect.runtime import SessionSpec, resolve_providers
from agent.errors import ModelError, ProviderError
from agent.log import get_logger
from agent.provider_names import CPU
from agent.settings import resolve_path

log = get_logger("select")

REFERENCE = CPU
#: Providers ``auto`` never benchmarks: Azure runs the model on a remote endpoint.
EXCLUDED = frozenset({"AzureExecutionProvider"})
CACHE_FILE = "provider-select.json"
CACHE_SCHEMA = "edge-vision/provider-select/1"
CACHE_MAX_ENTRIES = 16
#: Used for the comparison when the caller's threshold leaves the reference with nothing
#: to compare (an empty scene): low-confidence candidates still show a broken provider.
PROBE_CONF = 0.05
#: Bundled pictures with people, a bus and a tie: something real to compare providers on.
SAMPLE_IMAGES = ("assets/bus.jpg", "assets/zidane.jpg")


@dataclass(frozen=True, slots=True)
class Tolerance:
    """How close a candidate's detections must be to the reference's.

    A detection scoring within ``score_abs`` of the confidence threshold may be present on
    one side only (it sits on the edge); every other one needs a partner of the same class
    with IoU >= ``iou_min`` and a score within ``score_abs``.
    """

    iou_min: float = 0.8
    score_abs: float = 0.08

    def __post_init__(self) -> None:
        if not 0.0 < self.iou_min <= 1.0 or not 0.0 <= self.score_abs < 1.0:
            raise ValueError(f"invalid tolerance {self}")


@dataclass(frozen=True, slots=True)
class Trial:
    """One provider's measurement."""

    provider: str
    load_ms: float | None = None
    median_ms: float | None = None
    detections: int | None = None
    matches_reference: bool = False
    error: str | None = None

    @property
    def usable(self) -> bool:
        return self.error is None and self.matches_reference and self.median_ms is not None

    def to_json(self) -> dict[str, Any]:
        return {
            "provider": self.provider,
            "load_ms": self.load_ms,
            "median_ms": self.median_ms,
            "detections": self.detections,
            "matches_reference": self.matches_reference,
            "error": self.error,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Trial:
        return cls(
            provider=str(data["provider"]),
            load_ms=_opt_float(data.get("load_ms")),
            median_ms=_opt_float(data.get("median_ms")),
            detections=None if data.get("detections") is None else int(data["detections"]),
            matches_reference=bool(data.get("matches_reference")),
            error=None if data.get("error") is None else str(data["error"]),
        )


@dataclass(frozen=True, slots=True)
class Selection:
    """The chosen provider, the measurements behind it, and the candidates it came from."""

    provider: str
    candidates: tuple[str, ...]
    trials: tuple[Trial, ...]
    from_cache: bool
    key: str

    def providers_in_order(self) -> tuple[str, ...]:
        """The winner first, then the other usable candidates fastest first, CPU last.

        Pass this as ``SessionSpec.providers``: if the winner cannot load after all (a GPU
        gone missing), the runtime falls back down the list as usual.
        """
        rest = sorted(
            (t for t in self.trials if t.usable and t.provider != self.provider),
            key=lambda t: t.median_ms if t.median_ms is not None else float("inf"),
        )
        order = [self.provider] + [t.provider for t in rest if t.provider != REFERENCE]
        if REFERENCE not in order:
            order.append(REFERENCE)
        return tuple(order)


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


def candidate_providers(spec: SessionSpec, available: Sequence[str]) -> tuple[str, ...]:
    """Providers to measure: what ``spec.providers`` resolves to, without remote ones."""
    resolved = resolve_providers(spec.providers, available)
    return tuple(p for p in resolved if p not in EXCLUDED)


def provider_model(models: Mapping[str, Path] | None, provider: str, default: Path) -> Path:
    """The model file ``provider`` runs: its own from ``models``, else ``default``."""
    return (models or {}).get(provider, default)


def cache_key(
    model_sha256: str,
    candidates: Sequence[str],
    ort_version: str,
    spec: SessionSpec,
    provider_models: Mapping[str, str] | None = None,
) -> str:
    """Stable key of one measurement's conditions (``provider_models``: provider -> sha256)."""
    ident: dict[str, Any] = {
        "model_sha256": model_sha256,
        "providers": sorted(candidates),
        "onnxruntime": ort_version,
        "threads": spec.threads,
        "provider_options": {
            k: {kk: str(vv) for kk, vv in v.items()}
            for k, v in sorted(spec.provider_options.items())
            if k in candidates
        },
    }
    own = {p: sha for p, sha in sorted((provider_models or {}).items()) if p in candidates}
    if own:  # absent otherwise, so that keys cached before provider_models stay valid
        ident["provider_models"] = own
    text = json.dumps(ident, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def compare_detections(
    ref: Detections, got: Detections, *, conf_threshold: float, tol: Tolerance
) -> str | None:
    """None if ``got`` matches ``ref`` within ``tol``, else why not (one line)."""
    for a, b, side in ((ref, got, "reference"), (got, ref, "candidate")):
        iou = iou_matrix(a.xyxy, b.xyxy) if len(a) and len(b) else np.zeros((len(a), len(b)))
        for i in range(len(a)):
            score = float(a.score[i])
            if score < conf_threshold + tol.score_abs:
                continue  # on the threshold's edge: may be missing on the other side
            same = (b.class_id == a.class_id[i]) & (np.abs(b.score - score) <= tol.score_abs)
            ok = same & (iou[i] >= tol.iou_min) if len(b) else same
            if not bool(np.any(ok)):
                best = float(iou[i].max()) if len(b) else 0.0
                return (
                    f"{side} detection {a.labels[i]} {score:.2f} at "
                    f"{[round(float(v), 1) for v in a.xyxy[i]]} has no partner "
                    f"(best IoU {best:.2f})"
                )
    return None


def _error_text(e: BaseException) -> str:
    text = str(e).splitlines()[0] if str(e) else type(e).__name__
    return text[:200]


#: Builds the detector for one provider: ``(model_path, spec, thresholds) -> Detector``.
DetectorFactory = Callable[[Path, SessionSpec, Thresholds], Detector]


def _real_detector(model_path: Path, spec: SessionSpec, thresholds: Thresholds) -> Detector:
    # Runtime raises ProviderError when a session comes up on another provider than asked.
    return Detector(model_path, spec, thresholds=thresholds)


def _measure(
    model_path: Path,
    models: Mapping[str, Path],
    images: Sequence[npt.NDArray[np.uint8]],
    spec: SessionSpec,
    candidates: Sequence[str],
    thresholds: Thresholds,
    *,
    warmup: int,
    runs: int,
    tol: Tolerance,
    make_detector: DetectorFactory,
) -> list[Trial]:
    detectors: dict[str, Detector] = {}
    load_ms: dict[str, float] = {}
    errors: dict[str, str] = {}
    for provider in candidates:
        t0 = time.perf_counter()
        try:
            path = provider_model(models, provider, model_path)
            det = make_detector(path, replace(spec, providers=(provider,)), thresholds)
            for _ in range(warmup):
                for image in images:
                    det.detect(image)
        except ModelError:
            raise
        except Exception as e:  # a provider that cannot run the model is just not a candidate
            errors[provider] = _error_text(e)
            log.warning("provider_trial_failed", provider=provider, reason=errors[provider])
            continue
        detectors[provider] = det
        load_ms[provider] = (time.perf_counter() - t0) * 1e3
    if REFERENCE not in detectors:
        raise ProviderError(
            f"{REFERENCE} cannot run the model, so no provider can be validated: "
            + errors.get(REFERENCE, "not available")
        )

    times: dict[str, list[float]] = {p: [] for p in detectors}
    for _ in range(runs):
        for provider, det in detectors.items():
            try:
                for image in images:
                    times[provider].append(det.detect(image).times.inference_ms)
            except Exception as e:  # a provider failing mid-run is out as well
                errors[provider] = _error_text(e)
    reference = detectors[REFERENCE]

    trials: list[Trial] = []
    for provider in candidates:
        if provider not in detectors or provider in errors:
            trials.append(Trial(provider, error=errors.get(provider, "failed")))
            continue
        mismatch, count = _compare_all(reference, detectors[provider], images, thresholds, tol)
        trials.append(
            Trial(
                provider,
                load_ms=round(load_ms[provider], 1),
                median_ms=round(statistics.median(times[provider]), 2),
                detections=count,
                matches_reference=mismatch is None,
                error=None if mismatch is None else f"output differs from CPU: {mismatch}",
            )
        )
    return trials


def _compare_all(
    reference: Detector,
    candidate: Detector,
    images: Sequence[npt.NDArray[np.uint8]],
    thresholds: Thresholds,
    tol: Tolerance,
) -> tuple[str | None, int]:
    """First mismatch over all images (None if none) and the candidate's detection count."""
    probes = [thresholds]
    ref_total = sum(len(reference.detect(im).detections) for im in images)
    if ref_total == 0 and thresholds.conf > PROBE_CONF:
        probes.append(replace(thresholds, conf=PROBE_CONF))
    count = 0
    try:
        for th in probes:
            reference.thresholds = th
            candidate.thresholds = th
            for image in images:
                ref = reference.detect(image).detections
                got = candidate.detect(image).detections
                if th is thresholds:
                    count += len(got)
                why = compare_detections(ref, got, conf_threshold=th.conf, tol=tol)
                if why is not None:
                    return why, count
    finally:
        reference.thresholds = thresholds
        candidate.thresholds = thresholds
    return None, count


def _load_cache(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        log.warning("provider_cache_unreadable", path=str(path), reason=_error_text(e))
        return {}
    if not isinstance(data, dict) or data.get("schema") != CACHE_SCHEMA:
        return {}
    entries = data.get("entries")
    return entries if isinstance(entries, dict) else {}


def _save_cache(path: Path, entries: dict[str, Any]) -> None:
    if len(entries) > CACHE_MAX_ENTRIES:
        newest = sorted(entries, key=lambda k: str(entries[k].get("created_at", "")))
        entries = {k: entries[k] for k in newest[-CACHE_MAX_ENTRIES:]}
    text = json.dumps({"schema": CACHE_SCHEMA, "entries": entries}, indent=1, sort_keys=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as e:  # not fatal: the next start measures again
        log.warning("provider_cache_not_saved", path=str(path), reason=_error_text(e))
        with contextlib.suppress(OSError):
            tmp.unlink()


def format_table(trials: Sequence[Trial], chosen: str | None = None) -> str:
    """The measurements as a plain-text table (for logs and the CLI)."""
    rows = [("provider", "load ms", "median ms", "dets", "matches", "note")]
    for t in trials:
        rows.append(
            (
                ("* " if t.provider == chosen else "  ") + t.provider,
                "-" if t.load_ms is None else f"{t.load_ms:.0f}",
                "-" if t.median_ms is None else f"{t.median_ms:.2f}",
                "-" if t.detections is None else str(t.detections),
                "yes" if t.matches_reference else "no",
                t.error or "",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    return "\n".join(
        ("  ".join(c.ljust(w) for c, w in zip(r[:5], widths, strict=True)) + "  " + r[5]).rstrip()
        for r in rows
    )


def select_provider(
    model_path: Path,
    images: Sequence[npt.NDArray[np.uint8]],
    *,
    spec: SessionSpec,
    state_dir: Path,
    thresholds: Thresholds | None = None,
    warmup: int = 2,
    runs: int = 5,
    tolerance: Tolerance | None = None,
    available: Sequence[str] | None = None,
    use_cache: bool = True,
    measure_single: bool = False,
    make_detector: DetectorFactory = _real_detector,
    models: Mapping[str, Path] | None = None,
) -> Selection:
    """Choose the fastest provider whose detections match the CPU provider's.

    ``images``: one or more real BGR frames (a camera frame, a bundled sample picture);
    the comparison is only as strong as what they show. ``spec`` gives the providers to
    consider (``auto`` or a list), threads and provider options; the result's
    ``providers_in_order()`` is what to build the real sessions with. A single candidate
    is chosen without measuring unless ``measure_single``. ``available`` and
    ``make_detector`` replace onnxruntime's provider list and the Detector constructor
    (tests stand in a fake accelerator with them). ``models``: a provider's own file of the
    model, timed instead of ``model_path`` for that provider (see ``provider_model``).
    Raises ProviderError if the CPU reference cannot run the model, ModelError if the model
    itself is bad.
    """
    if not images:
        raise ValueError("select_provider needs at least one image")
    if warmup < 0 or runs < 1:
        raise ValueError(f"warmup must be >= 0 and runs >= 1, got {warmup}, {runs}")
    thresholds = thresholds or Thresholds()
    tol = tolerance or Tolerance()
    avail = list(ort.get_available_providers() if available is None else available)
    candidates = candidate_providers(spec, avail)
    if REFERENCE not in candidates and REFERENCE in avail:
        candidates = (*candidates, REFERENCE)  # the reference is always measured
    own = {p: m for p, m in (models or {}).items() if p in candidates}
    for path in (model_path, *own.values()):
        check_model_file(path)
    sha = sha256_file(model_path)
    own_sha = {p: sha256_file(m) for p, m in own.items()}
    key = cache_key(sha, candidates, ort.__version__, spec, own_sha)
    cache_path = state_dir / CACHE_FILE

    if use_cache:
        entry = _load_cache(cache_path).get(key)
        if isinstance(entry, dict) and entry.get("provider") in candidates:
            with contextlib.suppress(KeyError, TypeError, ValueError):
                cached = tuple(Trial.from_json(t) for t in entry.get("trials", []))
                sel = Selection(str(entry["provider"]), candidates, cached, True, key)
                log.info("provider_selected", provider=sel.provider, cached=True, key=key)
                return sel

    if len(candidates) == 1 and not measure_single:
        only = Trial(candidates[0], matches_reference=True, error=None)
        return Selection(candidates[0], candidates, (only,), False, key)

    log.info("provider_benchmark_start", candidates=list(candidates), runs=runs)
    trials = _measure(
        model_path,
        own,
        images,
        spec,
        candidates,
        thresholds,
        warmup=warmup,
        runs=runs,
        tol=tol,
        make_detector=make_detector,
    )
    usable = [t for t in trials if t.usable]
    best = min(usable, key=lambda t: t.median_ms if t.median_ms is not None else float("inf"))
    for t in trials:
        log.info("provider_trial", **t.to_json())
    log.info(
        "provider_selected",
        provider=best.provider,
        cached=False,
        key=key,
        table="\n" + format_table(trials, best.provider),
    )
    selection = Selection(best.provider, candidates, tuple(trials), False, key)
    if use_cache:
        entries = _load_cache(cache_path)
        entries[key] = {
            "provider": best.provider,
            "model_sha256": sha,
            **({"provider_models": own_sha} if own_sha else {}),
            "providers": sorted(candidates),
            "onnxruntime": ort.__version__,
            "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "trials": [t.to_json() for t in trials],
        }
        _save_cache(cache_path, entries)
    return selection


def default_images() -> list[npt.NDArray[np.uint8]]:
    """The bundled sample pictures: from the source tree, or <prefix>/assets of a service
    install (install.sh copies them next to the venv)."""
    found: list[npt.NDArray[np.uint8]] = []
    for name in SAMPLE_IMAGES:
        for path in (resolve_path(name), Path(sys.prefix).parent / name):
            image = cv2.imread(str(path), cv2.IMREAD_COLOR) if path.is_file() else None
            if image is not None:
                found.append(image)
                break
    return found


def prepare_spec(
    spec: SessionSpec,
    *,
    model_path: Path,
    state_dir: Path,
    select: str = "first",
    images: Sequence[npt.NDArray[np.uint8]] = (),
    available: Sequence[str] | None = None,
    threads: int | None = None,
    models: Mapping[str, Path] | None = None,
) -> tuple[SessionSpec, Selection | None]:
    """The SessionSpec to build the real sessions with, and the measurement if one ran.

    Adds the provider defaults (OpenVINO device/precision/pinning/cache, TensorRT engine
    cache) under the operator's options, then with ``select == "benchmark"`` measures the
    candidates on ``images`` (default: the bundled samples) and puts the winner first.
    With ``"first"`` the order stays the configured one. ``threads``: the thread count of
    the sessions that carry the load (the layout's worker sessions), which the candidates
    are timed with; a provider that wins with all cores can lose with one per session.
    ``models``: providers' own model files (each provider is timed on its own).
    """
    avail = list(ort.get_available_providers() if available is None else available)
    candidates = candidate_providers(spec, avail)
    options = with_defaults(spec.provider_options, candidates, cache_dir=cache_root(state_dir))
    spec = replace(spec, provider_options=options)
    if select != "benchmark":
        return spec, None
    imgs = list(images) or default_images()
    if not imgs:
        log.warning("provider_benchmark_skipped", reason="no image to compare providers on")
        return spec, None
    timed = spec if threads is None else replace(spec, threads=threads)
    sel = select_provider(
        model_path, imgs, spec=timed, state_dir=state_dir, available=avail, models=models
    )
    return replace(spec, providers=sel.providers_in_order()), sel


__all__ = [
    "DetectorFactory",
    "Selection",
    "Tolerance",
    "Trial",
    "candidate_providers",
    "compare_detections",
    "default_images",
    "format_table",
    "prepare_spec",
    "provider_model",
    "select_provider",
]
