"""Provider selection by measurement with real onnxruntime (CPU) and a stand-in accelerator.

Only the CPU provider exists on the test machines, so a second provider is simulated: a
Detector on the CPU that reports faster inference and, in some tests, wrong boxes or a
load failure. Everything else (sessions, timing loop, comparison, cache file) is real.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
import pytest
from pydantic import ValidationError

from agent.cv import cv2
from agent.detect.detections import Detections
from agent.detect.detector import Detector, DetectResult, StageTimes, Thresholds, sha256_file
from agent.detect.inputs import provider_models, session_spec
from agent.detect.runtime import SessionSpec, session_provider_options
from agent.detect.select import CACHE_FILE, cache_key, prepare_spec, select_provider
from agent.errors import ModelError, ProviderError
from agent.messages import ModelInfoMessage
from agent.settings import DetectorSettings
from tests.agent_proc import ROOT, AgentProc, pick_model

FAKE = "FakeGpuExecutionProvider"
CPU = "CPUExecutionProvider"
AVAILABLE = [FAKE, CPU]
SPEC = SessionSpec(providers=(FAKE, CPU), threads=1)


class FakeAccelerator(Detector):
    """CPU detector posing as an accelerator: ``speedup`` x faster (4), optionally with
    shifted boxes."""

    shift_px = 0.0
    speedup = 4.0

    def detect(self, image: npt.NDArray[np.uint8]) -> DetectResult:
        r = super().detect(image)
        d = r.detections
        dets = Detections(d.xyxy + np.float32(self.shift_px), d.score, d.class_id, d.labels)
        times = StageTimes(r.times.preprocess_ms, r.times.inference_ms / self.speedup, 0.0)
        return DetectResult(dets, times)


class Factory:
    """Builds detectors like select_provider's default, with FAKE mapped to FakeAccelerator."""

    def __init__(self, *, shift_px: float = 0.0, fail: bool = False, speedup: float = 4.0) -> None:
        self.shift_px = shift_px
        self.fail = fail
        self.speedup = speedup
        self.calls: list[str] = []
        self.paths: dict[str, Path] = {}

    def __call__(self, path: Path, spec: SessionSpec, thresholds: Thresholds) -> Detector:
        self.calls.append(spec.providers[0])
        self.paths[spec.providers[0]] = path
        if spec.providers[0] != FAKE:
            return Detector(path, spec, thresholds=thresholds)
        if self.fail:
            raise RuntimeError("CUDA failure 100: no CUDA-capable device is detected")
        det = FakeAccelerator(path, replace(spec, providers=(CPU,)), thresholds=thresholds)
        det.shift_px = self.shift_px
        det.speedup = self.speedup
        return det


@pytest.fixture(scope="module")
def images() -> list[npt.NDArray[np.uint8]]:
    image = cv2.imread(str(ROOT / "assets" / "bus.jpg"))
    assert image is not None
    return [image]


def _select(state: Path, images, factory: Factory, **kwargs):
    return select_provider(
        pick_model(),
        images,
        spec=kwargs.pop("spec", SPEC),
        state_dir=state,
        warmup=1,
        runs=2,
        available=AVAILABLE,
        make_detector=factory,
        **kwargs,
    )


@pytest.mark.timeout(60)
def test_fastest_matching_provider_wins_and_is_cached(tmp_path, images):
    """A faster provider with the CPU's detections is chosen; the next start reuses it."""
    factory = Factory()
    sel = _select(tmp_path, images, factory)
    assert sel.provider == FAKE and not sel.from_cache
    assert sel.providers_in_order() == (FAKE, CPU)
    trials = {t.provider: t for t in sel.trials}
    assert trials[FAKE].matches_reference and trials[CPU].matches_reference
    assert trials[FAKE].detections == trials[CPU].detections
    assert trials[FAKE].detections is not None and trials[FAKE].detections > 0
    assert trials[FAKE].median_ms is not None and trials[CPU].median_ms is not None
    assert trials[FAKE].median_ms < trials[CPU].median_ms

    cache = json.loads((tmp_path / CACHE_FILE).read_text())
    (entry,) = cache["entries"].values()
    assert entry["provider"] == FAKE
    assert entry["providers"] == sorted(AVAILABLE)
    assert entry["onnxruntime"] == ort.__version__
    assert len(entry["model_sha256"]) == 64

    again = Factory()
    cached = _select(tmp_path, images, again)
    assert cached.from_cache and cached.provider == FAKE and cached.key == sel.key
    assert again.calls == [], "a cached choice must not load any session"


@pytest.mark.timeout(60)
def test_faster_provider_with_different_detections_is_rejected(tmp_path, images):
    """Shifted boxes (a broken kernel) disqualify a provider however fast it is."""
    sel = _select(tmp_path, images, Factory(shift_px=60.0))
    assert sel.provider == CPU
    fake = next(t for t in sel.trials if t.provider == FAKE)
    assert not fake.matches_reference
    assert fake.error is not None and "differs from CPU" in fake.error


@pytest.mark.timeout(60)
def test_provider_that_cannot_load_is_skipped(tmp_path, images):
    """A provider failing to create its session is recorded and CPU is chosen."""
    sel = _select(tmp_path, images, Factory(fail=True))
    assert sel.provider == CPU
    fake = next(t for t in sel.trials if t.provider == FAKE)
    assert fake.error is not None and "CUDA failure" in fake.error
    assert sel.providers_in_order() == (CPU,)


@pytest.mark.timeout(60)
def test_changed_conditions_measure_again(tmp_path, images):
    """Different threads (part of the key) miss the cache; a corrupt cache is rewritten."""
    _select(tmp_path, images, Factory())
    factory = Factory()
    sel = _select(tmp_path, images, factory, spec=replace(SPEC, threads=2))
    assert not sel.from_cache and FAKE in factory.calls
    assert len(json.loads((tmp_path / CACHE_FILE).read_text())["entries"]) == 2

    (tmp_path / CACHE_FILE).write_text("{not json")
    sel = _select(tmp_path, images, Factory())
    assert not sel.from_cache
    assert json.loads((tmp_path / CACHE_FILE).read_text())["schema"]


#: Another real file of the same weights: the INT8 model quantized for OpenVINO.
OWN_MODEL = ROOT / "models" / "yolo11n-pose-320-int8-openvino.onnx"


@pytest.mark.timeout(60)
def test_provider_runs_and_is_timed_on_its_own_model(tmp_path, images):
    """provider_models: each provider is timed on its own file; the files are in the key.
    (That file, quantized for OpenVINO, runs slower than the main one on the CPU: 4.4x on
    an AMX Xeon, where a 4x stand-in lost to the CPU; this one claims 50x.)"""
    factory = Factory(speedup=50.0)
    sel = _select(tmp_path, images, factory, models={FAKE: OWN_MODEL})
    assert factory.paths == {FAKE: OWN_MODEL, CPU: pick_model()}
    # Its detections on its own file match the CPU's on the main one: the pair counts.
    assert sel.provider == FAKE
    assert all(t.matches_reference for t in sel.trials)
    (entry,) = json.loads((tmp_path / CACHE_FILE).read_text())["entries"].values()
    assert entry["provider_models"] == {FAKE: sha256_file(OWN_MODEL)}

    # Another own file is another measurement; an entry for a provider that is not a
    # candidate changes nothing (same key as without provider_models).
    other = Factory()
    again = _select(tmp_path, images, other, models={FAKE: pick_model()})
    assert not again.from_cache and again.key != sel.key
    assert other.paths[FAKE] == pick_model()
    plain = _select(tmp_path, images, Factory(), models={"OpenVINOExecutionProvider": OWN_MODEL})
    assert plain.key == cache_key(
        sha256_file(pick_model()), plain.candidates, ort.__version__, SPEC
    )

    with pytest.raises(ModelError, match="model file not found"):
        _select(tmp_path, images, Factory(), models={FAKE: tmp_path / "missing.onnx"})


@pytest.mark.timeout(60)
def test_own_model_with_other_detections_is_rejected(tmp_path, images):
    """A provider's file that sees other things than the CPU's loses, however fast."""
    factory = Factory(shift_px=60.0)
    sel = _select(tmp_path, images, factory, models={FAKE: OWN_MODEL})
    assert factory.paths[FAKE] == OWN_MODEL
    assert sel.provider == CPU


@pytest.mark.timeout(60)
def test_cpu_only_build_needs_no_measurement(tmp_path, images):
    """With this machine's onnxruntime (CPU + Azure), 'auto' picks CPU without a benchmark."""
    factory = Factory()
    sel = select_provider(
        pick_model(), images, spec=SessionSpec(), state_dir=tmp_path, make_detector=factory
    )
    assert sel.provider == CPU and sel.candidates == (CPU,)
    assert factory.calls == []


@pytest.mark.timeout(60)
def test_cpu_reference_failure_is_an_error(tmp_path, images):
    """Without a working CPU reference nothing can be validated: ProviderError."""

    def broken(path: Path, spec: SessionSpec, thresholds: Thresholds) -> Detector:
        raise RuntimeError(f"{spec.providers[0]} exploded")

    with pytest.raises(ProviderError, match="CPUExecutionProvider cannot run the model"):
        select_provider(
            pick_model(),
            images,
            spec=SPEC,
            state_dir=tmp_path,
            available=AVAILABLE,
            make_detector=broken,
        )


@pytest.mark.timeout(60)
def test_prepare_spec_adds_defaults_and_orders_by_measurement(tmp_path, monkeypatch):
    """prepare_spec merges provider defaults; 'benchmark' puts the measured winner first."""
    monkeypatch.delenv("CACHE_DIRECTORY", raising=False)
    spec = SessionSpec(threads=2)
    first, none = prepare_spec(
        spec,
        model_path=pick_model(),
        state_dir=tmp_path,
        available=["OpenVINOExecutionProvider", CPU],
    )
    assert none is None and first.providers == ("auto",)
    ov = first.provider_options["OpenVINOExecutionProvider"]
    assert ov["cache_dir"] == str(tmp_path / "cache" / "openvino")
    assert json.loads(ov["load_config"]) == {"CPU": {"ENABLE_CPU_PINNING": "NO"}}
    # Threads are per session: Runtime adds each session's own budget.
    assert "num_of_threads" not in ov
    per_session = session_provider_options(first, "OpenVINOExecutionProvider")
    assert per_session["num_of_threads"] == "2"
    assert (tmp_path / "cache" / "openvino").is_dir()

    bench, sel = prepare_spec(spec, model_path=pick_model(), state_dir=tmp_path, select="benchmark")
    assert sel is not None and sel.provider == CPU
    assert bench.providers == (CPU,)

    # Timed with the worker sessions' thread count; the sessions keep their own.
    one, sel1 = prepare_spec(
        spec, model_path=pick_model(), state_dir=tmp_path, select="benchmark", threads=1
    )
    assert one.threads == 2 and sel1 is not None
    plain, _ = prepare_spec(spec, model_path=pick_model(), state_dir=tmp_path)
    sha = sha256_file(pick_model())
    assert sel1.key == cache_key(sha, sel1.candidates, ort.__version__, replace(plain, threads=1))
    assert sel.key == cache_key(sha, sel.candidates, ort.__version__, plain)
    assert sel1.key != sel.key


@pytest.mark.timeout(90)
def test_providers_command_prints_the_table(tmp_path):
    """`edge-agent providers` measures on the bundled samples and names the choice."""
    env = {**os.environ, "EDGE_AGENT__STATE_DIR": str(tmp_path), "ORT_DISABLE_TELEMETRY": "1"}
    r = subprocess.run(
        [sys.executable, "-m", "agent", "providers", "--runs", "1", "--model", str(pick_model())],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=80,
        check=False,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert "chosen: CPUExecutionProvider (measured now)" in r.stdout, r.stdout
    # The default layout runs one thread per worker session, and is timed that way.
    assert "timed with 1 thread(s) per session" in r.stdout, r.stdout
    assert (tmp_path / CACHE_FILE).is_file()
    # The daemon (default settings, 1-thread worker sessions) finds the command's choice.
    _, sel = prepare_spec(
        session_spec(DetectorSettings()),
        model_path=pick_model(),
        state_dir=tmp_path,
        select="benchmark",
        threads=1,
    )
    assert sel is not None and sel.from_cache and sel.provider == CPU


@pytest.mark.timeout(90)
def test_agent_runs_the_providers_own_model(broker, recorder, tmp_path):
    """The daemon loads the file of the provider that runs (provider_models), and says so."""
    own = {"select": "benchmark", "provider_models": {"cpu": str(OWN_MODEL)}}
    agent = AgentProc(broker, tmp_path, overrides={"detector": own})
    topic = f"{agent.topic_base}/model"
    rec = recorder(broker, [topic])
    agent.start()
    try:
        assert rec.wait_for(lambda r: bool(r.on(topic)), 60), agent.tail()
        info = ModelInfoMessage.model_validate_json(rec.on(topic)[-1].payload)
        assert info.sha256 == sha256_file(OWN_MODEL)
        assert info.provider == CPU
    finally:
        agent.close()


def _refused_at_start(tmp_path: Path, detector: dict, *messages: str) -> None:
    """The agent started with these detector settings exits non-zero, and its log says
    each of ``messages``."""
    agent = AgentProc(None, tmp_path, overrides={"detector": detector}).start()
    try:
        assert agent.wait(45) != 0
        for message in messages:
            assert message in agent.tail(), agent.tail()
    finally:
        agent.close()


@pytest.mark.timeout(60)
def test_missing_provider_model_is_a_config_error(tmp_path):
    """A provider_models file that is not there stops the start with the key to fix."""
    bad = {"provider_models": {"openvino": str(tmp_path / "nope.onnx")}}
    # The key as the runtime reads it: 'openvino' is OpenVINOExecutionProvider.
    _refused_at_start(
        tmp_path, bad, "detector.provider_models.OpenVINOExecutionProvider", "nope.onnx not found"
    )


def test_provider_models_keys_are_checked():
    """Short and full names map to one provider; a misspelt or repeated one is refused."""
    model = str(OWN_MODEL)
    ok = provider_models(DetectorSettings(provider_models={"openvino": model}))
    assert ok == {"OpenVINOExecutionProvider": OWN_MODEL.resolve()}
    # Checked where the config is read, as every other bad value (a one-line ConfigError).
    with pytest.raises(ValidationError, match=r"provider_models\n.*'openvno': unknown provider"):
        DetectorSettings(provider_models={"openvno": model})
    twice = {"openvino": model, "OpenVINOExecutionProvider": model}
    with pytest.raises(ValidationError, match="OpenVINOExecutionProvider is named twice"):
        DetectorSettings(provider_models=twice)


def test_provider_options_keys_are_checked():
    """A short key reaches its provider under the full name; a misspelt or repeated one is refused.

    The runtime looks options up by the full name: before this check an ``openvino:`` entry
    was kept as written and never applied, and a misspelt one was dropped without a word.
    """
    short = session_spec(DetectorSettings(provider_options={"openvino": {"device_type": "GPU"}}))
    assert short.provider_options == {"OpenVINOExecutionProvider": {"device_type": "GPU"}}
    ov = session_provider_options(replace(short, threads=1), "OpenVINOExecutionProvider")
    assert ov == {"device_type": "GPU", "num_of_threads": "1"}
    full = DetectorSettings(provider_options={FAKE: {"x": "1"}, "cpu": {}})
    assert session_spec(full).provider_options == {FAKE: {"x": "1"}, CPU: {}}
    with pytest.raises(ValidationError, match=r"provider_options\n.*'openvno': unknown provider"):
        DetectorSettings(provider_options={"openvno": {"device_type": "GPU"}})
    twice = {"OpenVINOExecutionProvider": {}, "OpenVINO": {"precision": "FP16"}}
    with pytest.raises(ValidationError, match="OpenVINOExecutionProvider is named twice"):
        DetectorSettings(provider_options=twice)


@pytest.mark.timeout(60)
def test_misspelt_provider_options_key_stops_the_agent(tmp_path):
    """The running agent refuses a misspelt provider_options key with the key to fix."""
    bad = {"provider_options": {"tensorrt_": {"trt_fp16_enable": "True"}}}
    _refused_at_start(
        tmp_path, bad, "detector.provider_options = {...}", "'tensorrt_': unknown provider"
    )


def _fallback_agent(tmp_path, monkeypatch):
    """An Agent whose chosen provider (CUDA, with its own file) cannot build sessions."""
    from agent.detect import runtime as rt
    from agent.service.daemon import Agent
    from agent.settings import AgentSettings

    listed = ["CUDAExecutionProvider", CPU]
    real = rt.ort.InferenceSession

    def session(source, sess_options=None, providers=None, **kw):
        return real(source, sess_options=sess_options, providers=[CPU], **kw)

    monkeypatch.setattr(rt.ort, "get_available_providers", lambda: listed)
    monkeypatch.setattr(rt.ort, "InferenceSession", session)
    settings = AgentSettings(
        device_id="refit",
        state_dir=tmp_path / "state",
        mqtt={"host": "127.0.0.1", "port": 1},
        cameras=[{"id": "front", "source": str(ROOT / "assets" / "vtest.avi")}],
        detector={
            "model": str(pick_model()),
            "providers": ["cuda", "cpu"],
            "provider_models": {"cuda": str(OWN_MODEL)},
        },
    )
    return Agent(settings)


@pytest.mark.timeout(90)
def test_a_failed_refit_keeps_the_sessions_that_run(tmp_path, monkeypatch):
    """If the fallback provider cannot load its own file, the agent runs on as it came up."""
    from agent.service import daemon

    real = daemon.load_model_set

    def refuse_the_cpu_file(ds, spec, path, cores, **kw):
        if path.resolve() == pick_model().resolve():
            raise ProviderError("no execution provider could load the model: test")
        return real(ds, spec, path, cores, **kw)

    monkeypatch.setattr(daemon, "load_model_set", refuse_the_cpu_file)
    agent = _fallback_agent(tmp_path, monkeypatch)
    try:
        info = agent.engine.models.info
        assert info.provider == CPU
        assert info.sha256 == sha256_file(OWN_MODEL)
        assert agent.bundled.file == str(OWN_MODEL.resolve())
    finally:
        agent.shutdown()


@pytest.mark.timeout(90)
def test_sessions_that_fall_back_run_their_providers_own_file(tmp_path, monkeypatch):
    """The chosen provider cannot build the worker sessions: they come up on the next
    provider, and that provider's file of the model is what they run, not the chosen one's.

    onnxruntime here lists CUDA, and a CUDA session comes up on the CPU provider, as
    onnxruntime-gpu does on a machine whose CUDA libraries are missing (the runtime refuses
    that session and moves on to the CPU provider).
    """
    configured = pick_model()
    agent = _fallback_agent(tmp_path, monkeypatch)
    try:
        info = agent.engine.models.info
        assert info.provider == CPU
        assert info.sha256 == sha256_file(configured) != sha256_file(OWN_MODEL)
        assert Path(info.path).resolve() == configured.resolve()
        # A rollback past every pushed model returns to this file, on this provider first.
        assert agent.bundled.file == str(configured.resolve())
        assert agent.spec.providers[0] == CPU
        assert agent.updates._spec.providers[0] == CPU  # its candidate checks, too
    finally:
        agent.shutdown()
