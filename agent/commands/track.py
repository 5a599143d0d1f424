"""`edge-agent track`: the objects pipeline offline on a recording, to place zones and lines.

Samples a video file or image folder as the live agent would (the camera's ``fps`` cap,
``--fps`` overriding it), runs the detector on those frames as fast as it can, with the
file's own timing for the tracker, then the same objects stage the agent runs, and
writes an annotated video (boxes with track ids, zones, lines and their counts) and the
events as JSON lines. Zones, lines and masks come from the camera in the config.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
import numpy.typing as npt

from agent.capture.base import FrameSource
from agent.capture.factory import make_source
from agent.capture.pacing import RateGate, file_gate
from agent.commands.common import add_config_arg, settings_from_args
from agent.cv import cv2
from agent.detect.detections import Detections
from agent.detect.detector import Detector
from agent.detect.inputs import build_detector
from agent.errors import ConfigError, SourceError
from agent.messages import EventMessage, ModelRef
from agent.objects.stage import CameraObjects, LineKey, ObjectsOutput
from agent.regions.looker import Looker, look_and_detect, make_looker
from agent.render.draw import draw_scene
from agent.settings import AgentSettings, CameraSettings, DetectorSettings

DEFAULT_FPS = 10.0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "track", help="track objects in a recording: annotated video, events, line counts"
    )
    p.add_argument("source", help="video file or image folder (or any camera source)")
    p.add_argument("--camera", default=None, help="camera of the config whose zones to use")
    p.add_argument("--draw", type=Path, default=None, metavar="OUT.mp4", help="annotated video")
    p.add_argument("--events", type=Path, default=None, metavar="OUT.jsonl", help="events")
    p.add_argument(
        "--fps",
        type=float,
        default=None,
        help="frames sampled per second (default: the camera's fps, else every frame; "
        "an image folder is played at this rate)",
    )
    p.add_argument("--max-frames", type=int, default=None, help="stop after this many frames")
    add_config_arg(p)
    p.set_defaults(handler=run)


def _camera(args: argparse.Namespace, cameras: list[CameraSettings]) -> CameraSettings:
    if args.camera is None:
        base = cameras[0]
    else:
        found = [c for c in cameras if c.id == args.camera]
        if not found:
            ids = ", ".join(c.id for c in cameras)
            raise ConfigError(f"--camera {args.camera}: no such camera in the config ({ids})")
        base = found[0]
    return base.model_copy(update={"source": args.source, "realtime": False, "loop": False})


def _checked_settings(args: argparse.Namespace) -> AgentSettings:
    _check(args)
    return settings_from_args(args)


def _check(args: argparse.Namespace) -> None:
    if args.fps is not None and not 0 < args.fps <= 240:
        raise ConfigError(f"--fps {args.fps}: must be in (0, 240]")
    if args.max_frames is not None and args.max_frames < 1:
        raise ConfigError(f"--max-frames {args.max_frames}: must be >= 1")
    if args.draw is not None and args.draw.suffix.lower() not in (".mp4", ".avi"):
        raise ConfigError(f"--draw {args.draw}: write a .mp4 or .avi file")


def _open(camera: CameraSettings) -> FrameSource:
    source = make_source(camera)
    try:
        source.open()
    except SourceError as e:
        raise SourceError(f"cannot open {camera.source}: {e}") from e
    return source


def _writer(path: Path, fps: float, size_wh: tuple[int, int]) -> Any:
    codec = "mp4v" if path.suffix.lower() == ".mp4" else "MJPG"
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter.fourcc(*codec), fps, size_wh)
    if not writer.isOpened():
        raise SourceError(f"--draw {path}: OpenCV cannot write this file")
    return writer


@dataclass
class Offline:
    """One camera's detection and objects pipeline as the agent runs it (whole frames, or
    regions with their coarse looks), on this thread: ``step`` a frame at a time, in order."""

    detector: Detector
    whole: Detector | None  # region mode's model of coarse looks (None: ``detector``)
    looker: Looker | None  # region mode's motion and planning (None: whole frames)
    stage: CameraObjects
    model: ModelRef

    @classmethod
    def of(cls, settings: AgentSettings, camera: CameraSettings) -> Offline:
        ds = settings.detector
        detector = build_detector(ds, any_size=ds.by_regions)
        info = detector.info
        return cls(
            detector,
            _coarse_detector(ds),
            make_looker(settings, camera) if ds.by_regions else None,
            CameraObjects(camera, settings.device_id, "offline", settings.objects),
            ModelRef(name=info.name, version=info.version, sha256=info.sha256),
        )

    def step(
        self, image: npt.NDArray[np.uint8], t: float, ts: float
    ) -> tuple[Detections | None, ObjectsOutput]:
        """The frame captured at ``t`` (seconds, the tracker's clock; ``ts``: wall time)."""
        return _step(self.detector, self.looker, self.stage, image, t, ts, self.model, self.whole)


def run(args: argparse.Namespace) -> int:
    settings = _checked_settings(args)
    camera = _camera(args, settings.cameras)
    pipe = Offline.of(settings, camera)
    info, stage = pipe.detector.info, pipe.stage
    source = _open(camera)
    gate, media_fps = _sampling(args, camera, source)
    fps = media_fps if gate is None else 1.0 / gate.period  # of the frames processed
    t = 0.0
    events_out: IO[str] | None = None
    writer = None
    counts = {"frames": 0, "looked": 0, "new": 0, "update": 0, "end": 0}
    t0 = time.time()
    wall = time.perf_counter()

    def emit(events: list[EventMessage]) -> None:
        for e in events:
            counts[e.type] += 1
            if events_out is not None:
                events_out.write(e.to_bytes().decode() + "\n")

    try:
        if args.events is not None:
            events_out = open(args.events, "w", encoding="utf-8")  # noqa: SIM115
        for index, image in _frames(source, gate, media_fps):
            if args.max_frames is not None and counts["frames"] >= args.max_frames:
                break
            t = index / media_fps
            wh = (image.shape[1], image.shape[0])
            dets, out = pipe.step(image, t, t0 + t)
            emit(out.events)
            counts["frames"] += 1
            counts["looked"] += dets is not None
            if args.draw is not None:
                if writer is None:
                    writer = _writer(args.draw, fps, wh)
                kept = out.detections if out.detections is not None else Detections.empty()
                writer.write(draw_scene(image, kept, out.track_ids, stage))
        emit(stage.close("shutdown", t0 + t + 1.0 / fps).events)
    finally:
        source.close()
        if writer is not None:
            writer.release()
        if events_out is not None:
            events_out.close()
    took = time.perf_counter() - wall
    return _summary(args, counts, took, stage.line_labels(_reported(settings, info.labels)))


def _sampling(
    args: argparse.Namespace, camera: CameraSettings, source: FrameSource
) -> tuple[RateGate | None, float]:
    """The fps cap's gate (None: every frame) and the recording's frame rate, as the live
    reader takes them (``--fps`` over the camera's ``fps``); says which on stderr."""
    cap = args.fps if args.fps is not None else camera.fps
    media_fps = source.fps or cap or DEFAULT_FPS
    where = "--fps" if args.fps is not None else f"cameras.{camera.id}.fps"
    if cap is None:
        says = f"every frame ({where} not set; --fps N samples N a second, as the agent would)"
    elif cap >= media_fps:
        says = f"every frame (the recording's {media_fps:g} fps is within {where} {cap:g})"
    else:
        how = "" if args.fps is not None else "; --fps overrides"
        says = f"sampling at {cap:g} fps ({where}){how}"
    print(f"edge-agent track: {says}", file=sys.stderr)
    return file_gate(cap, media_fps), media_fps


def _frames(
    source: FrameSource, gate: RateGate | None, media_fps: float
) -> Iterator[tuple[int, npt.NDArray[np.uint8]]]:
    """(index in the recording, image) of the frames the gate passes at their media time;
    the others are skipped undecoded, as the live reader skips them."""
    index = 0
    while True:
        if gate is None or gate.admit(index / media_fps):
            image = source.read()
            if image is None:
                return
            yield index, image
        elif not source.skip():
            return
        index += 1


def _step(
    detector: Detector,
    looker: Looker | None,
    stage: CameraObjects,
    image: npt.NDArray[np.uint8],
    t: float,
    ts: float,
    model: ModelRef,
    whole: Detector | None = None,
) -> tuple[Detections | None, ObjectsOutput]:
    """One frame as the agent sees it: the whole frame, or its regions (region mode;
    ``whole``: the model of its coarse looks, None: ``detector``)."""
    wh = (int(image.shape[1]), int(image.shape[0]))
    cut = stage.scene.update(image)
    if looker is None:
        dets = detector.detect(image).detections
        return dets, stage.step(dets, t, ts, wh, model, cut=cut)
    found, look = look_and_detect(detector, looker, image, t, whole)
    out = stage.step(found, t, ts, wh, model, look.regions, cut=cut)
    ids = out.track_ids.tolist()
    looker.follow(out.tracks, look.coarse is not None, (out.detections, ids), t, out.rows)
    return found, out


def _coarse_detector(ds: DetectorSettings) -> Detector | None:
    """Region mode's model of coarse looks, as the agent loads it (None: the sheets')."""
    path = ds.coarse_model
    return None if path is None else build_detector(ds, path, any_size=True)


def _reported(settings: AgentSettings, labels: tuple[str, ...]) -> list[str]:
    """The labels the agent counts (as ``run`` does): the class filter, else the model's."""
    classes = settings.detector.classes
    if not classes:
        return list(labels)
    return [c if isinstance(c, str) else labels[c] for c in classes]


def _summary(
    args: argparse.Namespace, counts: dict[str, int], took: float, lines: dict[LineKey, int]
) -> int:
    if counts["frames"] == 0:
        print(f"edge-agent track: no frame could be read from {args.source}", file=sys.stderr)
        return 1
    summary = {
        **counts,
        "fps_processed": round(counts["frames"] / took, 1) if took > 0 else None,
        # Every count the agent would publish, 0s included: a quiet line is not missing.
        "lines": {"/".join(k): v for k, v in sorted(lines.items())},
    }
    print(json.dumps(summary))
    return 0
