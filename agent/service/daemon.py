"""The agent process: wiring, supervision loop, signals, graceful shutdown.

Threads: one per camera (capture), N inference workers, paho's network thread, the spool
sender, the command worker, the model-update worker, and this supervisor (main thread:
heartbeat, log summary, systemd watchdog). One stop event, owned here.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import onnxruntime as ort

from agent import __version__
from agent.capture.base import CameraStatus
from agent.capture.camera import CameraWorker
from agent.capture.exitgate import EXIT_WAIT_S, close_capture
from agent.capture.latest import RoundRobinFeed
from agent.cv import cv2
from agent.detect.detector import (
    Detector,
    describe_model,
    model_file_problem,
    provider_fit_hint,
)
from agent.detect.inputs import provider_models, session_spec, thresholds
from agent.detect.runtime import SessionSpec, resolve_providers
from agent.detect.select import candidate_providers, prepare_spec, provider_model
from agent.errors import BrokerError, ConfigError, ModelError, ProviderError
from agent.log import get_logger
from agent.messages import (
    CameraStatusMessage,
    CommandReply,
    CommandsHealth,
    ModelInfoMessage,
    ModelSummary,
    utc_ts,
)
from agent.mqtt.client import Inbound, MqttLink
from agent.mqtt.sweep import read_retained
from agent.osthread import name_os_thread
from agent.redact import redact, redact_bytes
from agent.regions.looker import Looker, make_looker
from agent.service.control import CommandRouter, Reply
from agent.service.engine import (
    InferenceEngine,
    ModelSet,
    Processed,
    build_model_set,
    cpu_budget,
    layout,
)
from agent.service.guard import CommandGuard, command_keys
from agent.service.handlers import CommandHandlers
from agent.service.health import CameraFigures, build_heartbeat, summary_line
from agent.service.homeassistant import (
    CameraObjectTopics,
    DiscoveryMessage,
    birth_topic,
    discovery_messages,
    removal_messages,
)
from agent.service.metrics import MetricsEndpoint
from agent.service.notify import Notifier
from agent.service.objects import ObjectsService
from agent.service.overrides import RuntimeOverrides
from agent.service.publish import DetectionPublisher
from agent.service.stopsignals import StopSignals
from agent.settings import AgentSettings, DetectorSettings, resolve_path
from agent.stats import ProcessStats
from agent.update.manager import UpdateManager
from agent.update.store import ModelRecord, ModelStore

log = get_logger("daemon")

SHUTDOWN_TIMEOUT_S = 10.0
#: From SIGTERM to a forced exit with every thread's stack logged: the shutdown's own
#: bound, the capture call that may still be in flight at exit, and 2 s of slack; under
#: the unit's TimeoutStopSec (20 s), so the log says why before systemd's SIGKILL.
STOP_BOUND_S = SHUTDOWN_TIMEOUT_S + EXIT_WAIT_S + 2.0
#: The inference loop ticks at least every 0.2 s (idle waits included); a loop silent for
#: this long (or twice the watchdog ping interval, if longer) is hung.
WATCHDOG_STALE_MIN_S = 5.0


def load_model_set(
    ds: DetectorSettings,
    spec: SessionSpec,
    path: Path,
    cores: int,
    *,
    name: str | None = None,
    version: int | None = None,
    coarse: Path | None = None,
) -> ModelSet:
    """Load ``path`` once per worker (and the latency session) with the layout for ``cores``;
    ``coarse``: region mode's model of coarse looks, once per worker (None: ``path``)."""
    workers, threads, latency = layout(ds, cores)
    th = thresholds(ds)

    def make(n_threads: int, model: Path = path) -> Detector:
        return Detector(
            model,
            replace(spec, threads=n_threads),
            thresholds=th,
            name=name if model == path else None,
            version=version if model == path else None,
            any_size=ds.by_regions,
        )

    models = build_model_set(lambda t: make(threads if t == 1 else t), workers, latency)
    if coarse is not None:
        whole = build_model_set(lambda t: make(threads, coarse), workers, None)
        models = replace(models, coarse=whole.workers, load_ms=models.load_ms + whole.load_ms)
    log.info(
        "model_loaded",
        model=str(path),
        name=models.info.name,
        version=models.info.version,
        sha256=models.info.sha256[:12],
        provider=models.info.provider,
        workers=workers,
        threads=threads,
        latency_threads=latency,
        load_ms=round(models.load_ms),
        **({"coarse_model": str(coarse)} if coarse is not None else {}),
        # Region mode: sheets cut to what they hold (a model taking any size) or whole.
        **(
            {"sheets": "cut to size" if models.workers[0].sheet_stride else "whole"}
            if ds.by_regions
            else {}
        ),
    )
    hint = provider_fit_hint(models.workers[0].runtime.metadata, models.info.provider)
    if hint:
        log.warning(
            "model_provider_mismatch", model=str(path), provider=models.info.provider, hint=hint
        )
    return models


class Agent:
    """One running agent. ``run()`` blocks until stopped and returns the exit code."""

    def __init__(self, settings: AgentSettings) -> None:
        self.settings = settings
        self.stop = threading.Event()
        self.boot_id = uuid.uuid4().hex
        self.t_start = time.monotonic()
        self.notifier = Notifier()
        self.system = ProcessStats()
        self._camera_states: dict[str, str] = {}
        try:
            settings.state_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ConfigError(
                f"state_dir {settings.state_dir} is not writable ({e.strerror}); "
                "set state_dir or EDGE_AGENT__STATE_DIR to a writable directory"
            ) from e
        # config/set values kept from earlier runs, over the file and environment, before
        # any part reads the settings.
        self.overrides = RuntimeOverrides.start(settings)
        self.link = MqttLink.from_settings(settings, self.stop, boot_id=self.boot_id)
        self.topics = self.link.topics
        self.cores = cpu_budget()
        self._load_models()
        self.objects = (
            ObjectsService(settings, self.link, self.topics, self.boot_id)
            if settings.objects.enabled
            else None
        )
        self.publisher = DetectionPublisher(
            self.link,
            self.topics,
            settings.device_id,
            self.boot_id,
            settings.mqtt.qos,
            settings.publish.mode,
            observers=[self._observe],
            objects=self.objects,
        )
        self.lookers = self._lookers()
        self.publisher.lookers = self.lookers
        self.publisher.motion_off_s = settings.motion.off_delay_s
        self.feed = RoundRobinFeed()
        # A recording read losslessly in region mode hands over its next frame once the
        # last one's tracks are back, so each frame is planned with them (as offline).
        self.cameras = {
            c.id: CameraWorker(
                c,
                self.feed.add(c.id, one_in_flight=c.id in self.lookers and not c.realtime),
                self.stop,
                on_status=self._camera_status,
            )
            for c in settings.cameras
        }
        self.engine = InferenceEngine(
            self.models, self.feed, self.publisher, self.stop, lookers=self.lookers
        )
        # A kept class filter needs the model's labels: checked now that it is loaded.
        self.overrides.apply_held(settings, self._check_detector)
        self.engine.set_thresholds(thresholds(settings.detector))
        self.router = CommandRouter(self._send_reply, self.stop, self._guard())
        # Its own ProcessStats: a scrape must not shift the heartbeat's CPU window.
        self._metrics_system = ProcessStats()
        self.metrics = MetricsEndpoint(
            settings.metrics, lambda: self.heartbeat(self._metrics_system)
        )
        if self.objects is not None:
            self.objects.on_event = self.metrics.count_event
        self.updates = UpdateManager(
            settings.models,
            self.store,
            bundled=self.bundled,
            swap=self._swap_model,
            latest_frame=self._latest_frame,
            session_spec=replace(self.spec, threads=1),
        )
        self.handlers = CommandHandlers(self)
        self.handlers.register(self.router)
        self._discovery: list[DiscoveryMessage] = []

    def _check_detector(self, ds: DetectorSettings) -> None:
        """Raise ConfigError if the loaded model cannot take ``ds``'s class filter."""
        self.models.workers[0].check_thresholds(thresholds(ds))

    def _guard(self) -> CommandGuard:
        s, p = self.settings, self.settings.mqtt.topic_prefix
        return CommandGuard(
            s.commands,
            command_keys(s.commands, s.models),
            reply_space=self.topics.reply(""),
            # Where a reply must never land: anything an agent acts on or publishes (a
            # spoofed status or count), and what Home Assistant reads.
            forbidden=[
                *self.topics.cmd_subscriptions(),
                *self.topics.upload_subscriptions(),
                f"{p}/#",
                f"{s.homeassistant.discovery_prefix}/#",
            ],
            state_dir=s.state_dir,
        )

    def _lookers(self) -> dict[str, Looker]:
        """Motion and region planning per camera (region mode only)."""
        if not self.settings.detector.by_regions:
            return {}
        return {c.id: make_looker(self.settings, c) for c in self.settings.cameras}

    # -- models ------------------------------------------------------------------------------
    def _load_models(self) -> None:
        """Start on the store's active model (a pushed one), else the configured one."""
        s = self.settings
        self.store = ModelStore(s.state_dir, crash_loop_starts=s.models.crash_loop_starts)
        configured = resolve_path(s.detector.live_model)
        problem = model_file_problem(configured)
        if problem is not None:
            raise ModelError(
                f"detector.model {configured} {problem} (set detector.model to an .onnx file)"
            )
        own = provider_models(s.detector)
        base = session_spec(s.detector)
        # Read before the start is counted: a broken configured file is a config error, not
        # a crash that the crash-loop guard would hold against a pushed model.
        described = {path: describe_model(path) for path in {configured, *own.values()}}
        decision = self.store.record_start()
        self.spec, self.selection = prepare_spec(
            base, model_path=decision.path or configured, state_dir=s.state_dir,
            select=s.detector.select, threads=layout(s.detector, self.cores)[1],
            models=own if decision.path is None else None,
        )  # fmt: skip
        # The configured model, or the chosen provider's own file of it (provider_models);
        # it is also what a rollback past every pushed model returns to.
        runs_on = candidate_providers(self.spec, ort.get_available_providers())[:1]
        bundled = provider_model(own, runs_on[0], configured) if runs_on else configured
        name, version, sha = described[bundled]
        self.bundled = ModelRecord.external(bundled, sha, name, version)
        while True:
            record = decision.record or self.bundled
            path = decision.path or bundled
            try:
                self.models = load_model_set(
                    s.detector, self.spec, path, self.cores,
                    name=record.name, version=record.version,
                    coarse=self._coarse_model(decision.path is None),
                )  # fmt: skip
                if decision.path is None:
                    self._refit_bundled(own, configured, described)
                break
            except (ModelError, ProviderError) as e:
                if decision.path is None:
                    raise
                decision = self.store.fall_back(f"cannot load {path}: {e}")
        self.activated_at = time.time()
        prev = self.store.previous
        self.previous_model = (
            ModelSummary(name=prev.name, version=prev.version, sha256=prev.sha256) if prev else None
        )

    def _coarse_model(self, bundled: bool) -> Path | None:
        """The coarse looks' model while the bundled models run (a pushed one runs all)."""
        return self.settings.detector.coarse_model if bundled else None

    def _refit_bundled(
        self,
        own: dict[str, Path],
        configured: Path,
        described: dict[Path, tuple[str, int, str]],
    ) -> None:
        """Run the file of the provider the sessions came up on, not the one chosen.

        The chosen provider (a cached choice, say) can fail to build the worker sessions;
        they then come up on the next provider, still on the chosen one's file of the model
        (``provider_models``): correct but slow, as an OpenVINO file on the CPU provider.
        Reload with the file of the provider that runs, which also goes first in the
        session order, so that a swap or a rollback does not try the failed one first.
        """
        actual = self.models.info.provider
        fits = provider_model(own, actual, configured)
        if fits.resolve() == Path(self.bundled.file):
            return
        log.warning(
            "provider_model_refit",
            provider=actual,
            model=str(fits),
            instead_of=self.bundled.file,
            reason="the chosen provider could not build the sessions",
        )
        order = resolve_providers(self.spec.providers, ort.get_available_providers())
        spec = replace(self.spec, providers=(actual, *(p for p in order if p != actual)))
        name, version, sha = described[fits]
        try:
            models = load_model_set(
                self.settings.detector, spec, fits, self.cores, name=name, version=version,
                coarse=self._coarse_model(True),
            )  # fmt: skip
        except (ModelError, ProviderError) as e:  # keep the sessions that work
            log.warning("provider_model_refit_failed", model=str(fits), reason=str(e))
            return
        self.spec, self.models = spec, models
        self.bundled = ModelRecord.external(fits, sha, name, version)

    def _swap_model(self, path: Path, record: ModelRecord) -> None:
        """Update manager's swap: load off the inference thread, switch between two frames."""
        bundled = path.resolve() == Path(self.bundled.file).resolve()
        new = load_model_set(
            self.settings.detector, self.spec, path, self.cores,
            name=record.name, version=record.version, coarse=self._coarse_model(bundled),
        )  # fmt: skip
        old = self.engine.swap(new)
        prev = self.store.previous
        self.previous_model = (
            ModelSummary(name=prev.name, version=prev.version, sha256=prev.sha256)
            if prev
            else ModelSummary(name=old.info.name, version=old.info.version, sha256=old.info.sha256)
        )
        self.activated_at = time.time()
        log.info(
            "model_swapped",
            name=record.name,
            version=record.version,
            sha256=record.sha256[:12],
            old_sha256=old.info.sha256[:12],
        )
        self.publish_model_info()
        self.publish_discovery()

    def _latest_frame(self) -> Any:
        """A copy of the newest processed frame (validation runs candidates on it)."""
        for cid in self.cameras:
            last = self.publisher.camera(cid).last
            if last is not None:
                return last.frame.image.copy()
        return None

    def labels(self) -> list[str]:
        """The labels the agent reports: the class filter if one is set, else the model's."""
        classes = self.settings.detector.classes
        info = self.engine.models.info
        if not classes:
            return list(info.labels)
        return [c if isinstance(c, str) else info.labels[c] for c in classes]

    def _object_topics(self) -> dict[str, CameraObjectTopics]:
        if self.objects is None:
            return {}
        zones, lines = self.objects.zone_keys(), self.objects.line_keys()
        return {cid: CameraObjectTopics(zones[cid], lines[cid]) for cid in self.cameras}

    def publish_discovery(self) -> None:
        """Home Assistant discovery configs (retained), when enabled."""
        ha = self.settings.homeassistant
        if not ha.enabled:
            return
        labels = self.labels()
        messages = discovery_messages(
            self.topics,
            version=__version__,
            cameras={cid: labels for cid in self.cameras},
            discovery_prefix=ha.discovery_prefix,
            health_interval_s=self.settings.health.interval_s,
            objects=self._object_topics(),
            motion=list(self.lookers),
        )
        for m in removal_messages(self._discovery, messages):
            self.link.clear_state(m.topic)
        for m in messages:
            self.link.publish_state(m.topic, m.payload)
        self._discovery = messages

    # -- callbacks ---------------------------------------------------------------------------
    def _observe(self, p: Processed) -> None:
        self.handlers.observe(p)
        if p.times is not None:
            self.metrics.observe_inference(p.frame.camera_id, p.times.inference_ms)

    def _camera_status(self, status: CameraStatus) -> None:
        state = status.state.contract
        was = self._camera_states.get(status.camera_id)
        self._camera_states[status.camera_id] = state
        # A camera that stops because the agent stops is no camera_offline: shutdown ends
        # its events.
        lost = was == "streaming" and state != "streaming" and not self.stop.is_set()
        if self.objects is not None and lost:
            self.objects.close_camera(status.camera_id, "camera_offline")
        if state != "streaming" and not self.stop.is_set():
            # A camera that sees nothing reports nobody and no motion, not its last frame's.
            self.publisher.reset_camera(status.camera_id, self.labels())
        msg = CameraStatusMessage(
            state=state,
            reason=(status.cause or status.reason) or None,
            ts=utc_ts(status.ts),
            detail=redact(status.reason) if status.cause not in ("", status.reason) else None,
        )
        self.link.publish_state(self.topics.camera_status(status.camera_id), msg.to_bytes())

    def _send_reply(self, reply: Reply) -> None:
        from agent.messages import ReplyError

        payload = CommandReply(
            id=reply.id,
            ok=reply.ok,
            result=reply.result,
            error=ReplyError(**reply.error) if reply.error else None,
            ts=utc_ts(reply.ts),
        ).to_bytes()
        payload = redact_bytes(payload)  # an error may quote a URL with its credentials
        self.link.publish_reply(reply.name, payload, reply.response_topic, reply.correlation_data)

    def _on_ha_birth(self, msg: Inbound) -> None:
        # Home Assistant restarted: its discovery configs are retained, but resend the
        # state so its entities get values at once.
        if msg.payload == b"online":
            self.publish_discovery()

    def _on_command(self, msg: Inbound) -> None:
        name = self.topics.parse_cmd(msg.topic)
        if name is None:
            return
        self.router.submit(
            name,
            msg.payload,
            retained=msg.retain,
            response_topic=msg.response_topic,
            correlation_data=msg.correlation_data,
            topic=msg.topic,
        )

    def publish_model_info(self) -> None:
        info = self.engine.models.info
        prev = self.previous_model
        msg = ModelInfoMessage(
            name=info.name,
            version=info.version,
            sha256=info.sha256,
            precision=info.precision,
            provider=info.provider,
            input_hw=info.input_hw,
            labels=list(info.labels),
            task=info.task,
            activated_at=utc_ts(self.activated_at),
            previous=prev,
        )
        self.link.publish_state(self.topics.model, redact_bytes(msg.to_bytes()))

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        # OpenCV's own thread pool (resize, split) adds nothing here: the workers already
        # run one frame per core, and its pool threads wake and wait beside the inference
        # sessions. Measured (docs/bench/README.md, machine B, "Pipeline overhead"): a
        # 2-worker pipeline ran 2-9% faster with it off.
        cv2.setNumThreads(1)
        for f in self.topics.cmd_subscriptions():
            self.link.subscribe(f, self._on_command)
        for f in self.topics.upload_subscriptions():
            self.link.subscribe(f, self.handlers.on_upload)
        if self.settings.homeassistant.enabled:
            birth = birth_topic(self.settings.homeassistant.discovery_prefix)
            self.link.subscribe(birth, self._on_ha_birth)
        self.metrics.start()
        for cid in self.cameras:
            self.publisher.reset_camera(cid, self.labels())
        self.link.start()
        if self.objects is not None:
            self.objects.start(self.labels())
        self.publish_model_info()
        self.publish_discovery()
        self.router.start()
        self.updates.start()
        for worker in self.cameras.values():
            worker.start()
        self.engine.start()
        threading.Thread(target=self._own_retained, name="retained-sweep", daemon=True).start()
        # READY once the model is loaded, cameras are started and the broker was tried.
        self.link.wait_connected(2.0)
        self.notifier.ready(f"running {len(self.cameras)} camera(s)")
        log.info(
            "agent_started",
            device=self.settings.device_id,
            boot_id=self.boot_id,
            version=__version__,
            cameras=list(self.cameras),
            broker=f"{self.settings.mqtt.host}:{self.settings.mqtt.port}",
            connected=self.link.connected,
        )

    def _own_retained(self) -> None:
        """Once connected: clear every retained topic of this device (and Home Assistant
        discovery config) that the running configuration does not produce."""
        name_os_thread("retained-sweep")
        s = self.settings
        filters = [
            f"{self.topics.base}/#",
            f"{s.homeassistant.discovery_prefix}/+/{s.device_id}/+/config",
        ]
        for attempt in range(3):
            while not self.link.connected:
                if self.stop.wait(0.5):
                    return
            try:
                found = read_retained(
                    s.mqtt, filters, client_id=f"{self.link.client_id}-sweep-{self.boot_id[:8]}"
                )
            except (BrokerError, ConfigError) as e:
                log.warning("retained_sweep_failed", attempt=attempt + 1, error=str(e))
                if self.stop.wait(5.0):
                    return
                continue
            keep = {self.topics.health, self.topics.model}
            keep |= {self.topics.camera_status(cid) for cid in self.cameras}
            cleared = [
                t
                for t, payload in sorted(found.items())
                if payload and t not in keep and self.link.clear_unowned(t)
            ]
            log.info("retained_swept", found=len(found), cleared=len(cleared), topics=cleared[:50])
            return

    def camera_figures(self) -> dict[str, CameraFigures]:
        out = {}
        for cid, w in self.cameras.items():
            st = w.stats()
            out[cid] = CameraFigures(
                state=self._camera_states.get(cid, "offline"),
                fps_in=st.fps_in,
                frames_dropped=st.frames_dropped,
                reconnects=st.reconnects,
                last_frame_age_s=st.last_frame_age_s,
            )
        return out

    def heartbeat(self, system: ProcessStats | None = None) -> Any:
        return build_heartbeat(
            device_id=self.settings.device_id,
            boot_id=self.boot_id,
            uptime_s=time.monotonic() - self.t_start,
            engine=self.engine,
            publisher=self.publisher,
            cameras=self.camera_figures(),
            link=self.link.stats(),
            system=system or self.system,
            commands=CommandsHealth(
                received=self.router.received, rejected=self.router.rejected, **self.router.refused
            ),
            objects_reason=None if self.objects is None else self.objects.state.degraded_reason,
        )

    def healthy(self) -> bool:
        """Progress check for the systemd watchdog: inference loop ticking, MQTT alive.

        A camera that is down does not count against it: the loop still ticks while it
        waits for frames, and the camera's state is reported on its status topic.
        """
        wd = self.notifier.watchdog_interval_s or 0.0
        stale_after = max(WATCHDOG_STALE_MIN_S, 2 * wd)
        ticking = time.monotonic() - self.engine.last_tick < stale_after
        return ticking and self.link.network_alive() and self.link.stall_reason() is None

    def supervise(self) -> None:
        interval = self.settings.health.interval_s
        summary_every = self.settings.publish.summary_interval_s
        wd = self.notifier.watchdog_interval_s
        next_hb = time.monotonic()
        next_summary = time.monotonic() + summary_every
        next_wd = time.monotonic()
        while not self.stop.wait(0.2):
            now = time.monotonic()
            if wd is not None and now >= next_wd:
                next_wd = now + wd
                if self.healthy():
                    self.notifier.watchdog()
                else:
                    log.error(
                        "watchdog_withheld",
                        last_tick_age_s=round(now - self.engine.last_tick, 1),
                        stall=self.link.stall_reason(),
                    )
            if now >= next_hb:
                next_hb = now + interval
                hb = self.heartbeat()
                payload = redact_bytes(hb.to_bytes())
                self.link.publish_state(self.topics.health, payload, expiry_s=3 * interval)
            if now >= next_summary:
                next_summary = now + summary_every
                hb = self.heartbeat()
                counts = {cid: self.publisher.camera(cid).counts for cid in self.cameras}
                line = summary_line(hb, counts)
                self.notifier.status(line)
                log.info("summary", line=line)

    def shutdown(self) -> None:
        self.notifier.stopping()
        self.stop.set()
        deadline = time.monotonic() + SHUTDOWN_TIMEOUT_S
        self.engine.join(max(0.1, min(5.0, deadline - time.monotonic())))
        if self.objects is not None:
            # Every open event gets its end before the link flushes and says "stopped": the
            # ends are spooled once objects.json is saved, which on a slow disk (ext4 with
            # `discard`: up to 0.7 s a save seen; an SD card) may be one save behind another;
            # 2 s stay for the link to send what the spool holds.
            self.objects.close("shutdown", max(0.1, min(5.0, deadline - time.monotonic() - 2.0)))
        for w in self.cameras.values():
            w.stop(max(0.1, min(2.0, deadline - time.monotonic())))
        self.updates.close(max(0.1, min(2.0, deadline - time.monotonic())))
        self.router.join(0.5)
        for cid in self.cameras:
            self.publisher.clear_camera(cid)  # a stopped agent sees nobody
        self.metrics.close()
        self.link.close(max(0.5, deadline - time.monotonic()))
        # No OpenCV call may return into a finalizing interpreter (see capture.exitgate).
        close_capture(max(0.5, deadline - time.monotonic()))
        log.info("agent_stopped", uptime_s=round(time.monotonic() - self.t_start, 1))
        self.notifier.close()

    def run(self) -> int:
        # The process's main: the watcher stays for the rest of its life, atexit included.
        StopSignals(self.stop, STOP_BOUND_S).install()
        try:
            self.start()
            self.supervise()
        finally:
            self.shutdown()
        return 0
