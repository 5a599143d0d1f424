"""Print the /etc/edge-vision-agent/agent.yaml that install.sh writes on a fresh device.

``python render_config.py SOURCE_YAML PREFIX [ORT_PACKAGE [BOARD]]`` reads the embedded
defaults (configs/agent.yaml) and adapts them to a service install: the first V4L2 camera
instead of the sample video, the bundled model under PREFIX/models (and its
``-int8-openvino`` variant as OpenVINO's own file when ORT_PACKAGE is onnxruntime-openvino),
for BOARD ``pi`` what configs/rpi.yaml runs (the 320 INT8 model quantized for ARM, 5 fps, publish on
change: the 640 model every frame is more than a Pi's four cores keep up with), for
``jetson`` the FP32 model (INT8 QDQ runs slower than FP32 on the CUDA provider),
``detector.select: benchmark``
(unless the defaults name one), and no ``state_dir`` so that systemd's StateDirectory
applies. Runs on the venv's Python (PyYAML is a dependency).
"""

from __future__ import annotations

import sys
from pathlib import PurePosixPath
from typing import Any

import yaml

UNIT = "edge-vision-agent"
SERVICE_USER = "edge-agent"
#: What the embedded defaults run on region sheets when they name no model. A generic install
#: names none: the agent picks the bundled file best at each look (the 320 for sheets, the
#: 640 for coarse looks and photos) from PREFIX/models, beside its virtualenv.
DEFAULT_MODEL = "yolo11n-pose-320-int8.onnx"
BOARDS = ("generic", "pi", "jetson")
#: Per board: the bundled model, the camera's frame cap and the publish mode.
BOARD_MODEL = {"pi": "yolo11n-pose-320-int8-arm.onnx", "jetson": "yolo11n-pose-640-fp32.onnx"}
PI_FPS = 5

HEADER = f"""\
# edge-vision-agent configuration, written by systemd/install.sh (edit freely; it is
# never overwritten). Keys and defaults: docs/operations.md and configs/agent.yaml.
# After a change: systemctl restart {UNIT}
#
# mqtt.host: your broker (localhost = a mosquitto on this device). A broker with a login:
# mqtt.username / mqtt.password; with TLS: mqtt.port 8883 and mqtt.tls.ca (a CA file).
#
# Every key can also be set from the environment (systemctl edit {UNIT}):
#   [Service]
#   Environment=EDGE_AGENT__MQTT__HOST=broker.lan
# state_dir is unset on purpose: systemd's StateDirectory applies
# (/var/lib/{UNIT}, $STATE_DIRECTORY).
# device_id defaults to the hostname. The service user must be able to read any TLS key
# named here: chgrp {SERVICE_USER} KEY && chmod 0640 KEY.
#
# detector.select: benchmark times the installed execution providers at the first start
# (cached per model in the state dir) and keeps the faster; "first" takes them in order.
# detector.provider_models: a provider's own file of the model, which it is timed and
# run on (OpenVINO: the INT8 model quantized for it).
#
# cameras[].source: /dev/video0 is the first V4L2 camera (USB; a libcamera CSI camera
# needs more: docs/operations.md). Also: rtsp://user:pass@host/stream, a video file, or
# a GStreamer pipeline
# (Jetson CSI: "nvarguscamerasrc ! video/x-raw(memory:NVMM),width=1280,height=720 !
# nvvidconv ! video/x-raw,format=BGRx ! videoconvert ! video/x-raw,format=BGR ! appsink").
"""


def render(
    defaults: dict[str, Any], prefix: str, ort: str = "onnxruntime", board: str = "generic"
) -> str:
    """The service config text for an install under ``prefix`` with the ``ort`` package."""
    if board not in BOARDS:
        raise ValueError(f"board must be one of {', '.join(BOARDS)}, not {board!r}")
    config = dict(defaults)
    config.pop("state_dir", None)
    detector = dict(config.get("detector") or {})
    models = f"{prefix.rstrip('/')}/models"
    named = detector.get("model")
    model = BOARD_MODEL.get(board, PurePosixPath(str(named or DEFAULT_MODEL)).name)
    if named or board in BOARD_MODEL:
        # A board's model, or one the source config names, runs every look.
        detector["model"] = f"{models}/{model}"
    if ort == "onnxruntime-openvino" and model.endswith("-int8.onnx"):
        # OpenVINO runs the INT8 model quantized for it (docs/models.md: 19 % faster under
        # OpenVINO on an Intel Xeon, slow on the CPU provider); select: benchmark times
        # OpenVINO on it against the CPU provider on the default INT8 model.
        own = {"OpenVINOExecutionProvider": f"{models}/{model.removesuffix('.onnx')}-openvino.onnx"}
        detector.setdefault("provider_models", own)
    # A device with more than one provider (onnxruntime-openvino, -gpu) times them once and
    # keeps the faster: OpenVINO is not faster on every x86 CPU. One provider: no timing.
    detector.setdefault("select", "benchmark")
    config["detector"] = detector
    camera: dict[str, Any] = {"id": "front", "source": "/dev/video0"}
    if board == "pi":
        camera["fps"] = PI_FPS
        config["publish"] = {**(config.get("publish") or {}), "mode": "on_change"}
    config["cameras"] = [camera]
    return HEADER + yaml.safe_dump(config, sort_keys=False)


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3, 4):
        print("usage: render_config.py SOURCE_YAML PREFIX [ORT_PACKAGE [BOARD]]", file=sys.stderr)
        return 2
    with open(argv[0], encoding="utf-8") as f:
        defaults = yaml.safe_load(f) or {}
    sys.stdout.write(render(defaults, argv[1], *argv[2:]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
