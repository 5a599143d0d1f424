"""`edge-agent doctor`: check what the agent needs, and say what is wrong."""

from __future__ import annotations

import argparse
import platform
import sys
import threading
from collections.abc import Callable
from functools import partial

import numpy as np
import onnxruntime as ort
import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.reasoncodes import ReasonCode

from agent import __version__
from agent.commands.common import add_config_arg, settings_from_args
from agent.cv import cv2
from agent.detect.inputs import build_detector
from agent.errors import AgentError
from agent.log import configure_logging, route_native_output, set_native_log_level
from agent.mqtt.failures import ReasonClient, describe_connect_error, describe_refusal
from agent.redact import redact
from agent.settings import AgentSettings, CameraSettings

CHECK_TIMEOUT_S = 15.0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("doctor", help="check model, providers, cameras and broker")
    add_config_arg(p)
    p.set_defaults(handler=run)


def _bounded(fn: Callable[[], str], timeout: float) -> tuple[bool, str]:
    """Run a check in a thread so a hung driver or network cannot hang the doctor."""
    out: list[tuple[bool, str]] = []

    def target() -> None:
        try:
            out.append((True, fn()))
        except AgentError as e:
            cause = getattr(e, "cause", None)  # a camera's status reason (docs/mqtt.md)
            out.append((False, f"{cause}: {e}" if cause else str(e)))
        except Exception as e:
            out.append((False, f"{type(e).__name__}: {e}".splitlines()[0]))

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(timeout)
    return out[0] if out else (False, f"no answer within {timeout:.0f} s")


def check_camera(cam: CameraSettings) -> str:
    from agent.capture.factory import make_source

    source = make_source(cam)
    source.open()
    try:
        image = source.read(None)
        if image is None:
            raise AgentError(f"{redact(cam.source)} opened but gave no frame")
        fps = f", {source.fps:.1f} fps" if source.fps else ""
        return f"{redact(cam.source)}: {image.shape[1]}x{image.shape[0]}{fps}"
    finally:
        source.close()


def check_broker(settings: AgentSettings) -> str:
    s = settings.mqtt
    done = threading.Event()
    result: list[ReasonCode | str] = []

    def on_connect(
        client: mqtt.Client, userdata: object, flags: object, rc: object, p: object
    ) -> None:
        result.append(rc if isinstance(rc, ReasonCode) else str(rc))
        done.set()

    client = ReasonClient(
        callback_api_version=CallbackAPIVersion.VERSION2,
        protocol=mqtt.MQTTv5 if s.protocol == 5 else mqtt.MQTTv311,
    )
    if s.username is not None:
        client.username_pw_set(s.username, s.password.get_secret_value() if s.password else None)
    if s.tls.enabled:
        client.tls_set(
            ca_certs=str(s.tls.ca) if s.tls.ca else None,
            certfile=str(s.tls.cert) if s.tls.cert else None,
            keyfile=str(s.tls.key) if s.tls.key else None,
        )
    client.on_connect = on_connect
    try:
        client.connect(s.host, s.port, keepalive=10)
    except OSError as e:
        raise AgentError(describe_connect_error(e, s.host, s.port)) from e
    client.loop_start()
    try:
        if not done.wait(10):
            raise AgentError(f"{s.host}:{s.port}: no CONNACK within 10 s")
    finally:
        client.disconnect()
        client.loop_stop()
    if str(result[0]) != "Success":
        raise AgentError(f"{s.host}:{s.port}: {describe_refusal(result[0])}")
    return f"{s.host}:{s.port} accepts MQTT {'5' if s.protocol == 5 else '3.1.1'}"


def run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    # OpenCV, FFmpeg and ORT print past Python (FFmpeg to stdout, into the table): their
    # lines go to stderr as log lines, redacted; the table says what failed.
    configure_logging("warning", json=False, stream=sys.stderr)
    route_native_output(python_streams=True)
    set_native_log_level(settings.native_log_level)
    rows: list[tuple[str, bool, str]] = []
    print(f"edge-agent {__version__} on Python {platform.python_version()} ({platform.machine()})")
    print(f"onnxruntime {ort.__version__}, OpenCV {cv2.__version__}, numpy {np.__version__}")
    print(f"available providers: {', '.join(ort.get_available_providers())}")
    print(f"providers setting: {settings.detector.providers}")
    gst = (
        "GStreamer:" in cv2.getBuildInformation()
        and "YES" in cv2.getBuildInformation().split("GStreamer:")[1].split("\n")[0]
    )
    print(f"OpenCV GStreamer support: {'yes' if gst else 'no'}")

    def model() -> str:
        det = build_detector(settings.detector)
        i = det.info
        return (
            f"{i.name} v{i.version} {i.precision} {i.task} {i.input_hw[0]}x{i.input_hw[1]} "
            f"on {i.provider}"
        )

    rows.append(("model", *_bounded(model, 60.0)))
    for cam in settings.cameras:
        rows.append((f"camera {cam.id}", *_bounded(partial(check_camera, cam), CHECK_TIMEOUT_S)))
    rows.append(("broker", *_bounded(lambda: check_broker(settings), CHECK_TIMEOUT_S)))
    rows.append(("state_dir", *_bounded(lambda: _state_dir(settings), 5.0)))
    width = max(len(name) for name, _, _ in rows)
    for name, ok, detail in rows:
        print(f"  {'OK  ' if ok else 'FAIL'} {name:<{width}}  {redact(detail)}")
    failed = [name for name, ok, _ in rows if not ok]
    if failed:
        print(f"doctor: {len(failed)} check(s) failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    print("doctor: all checks passed")
    return 0


def _state_dir(settings: AgentSettings) -> str:
    d = settings.state_dir
    d.mkdir(parents=True, exist_ok=True)
    probe = d / ".doctor-probe"
    probe.write_bytes(b"ok")
    probe.unlink()
    return f"{d} is writable"
