"""Print the /etc/edge-vision-agent/agent.yaml that install.sh writes on a fresh device.

``python render_config.py SOURCE_YAML PREFIX [ORT_PACKAGE]`` reads the embedded defaults
(configs/agent.yaml) and adapts them to a service install: the first V4L2 camera instead
of the sample video, the bundled model under PREFIX/models (and its ``-int8-openvino``
variant as OpenVINO's own file when ORT_PACKAGE is onnxruntime-openvino),
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
DEFAULT_MODEL = "yolo11n-pose-640-fp32.onnx"

HEADER = f"""\
# edge-vision-agent configuration, written by systemd/install.sh (edit freely; it is
# never overwritten). Keys and defaults: docs/operations.md and configs/agent.yaml.
# After a change: systemctl restart {UNIT}
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
# cameras[].source: /dev/video0 is the first V4L2 camera (USB, or a Pi camera with a
# V4L2 driver). Also: rtsp://user:pass@host/stream, a video file, or a GStreamer pipeline
# (Jetson CSI: "nvarguscamerasrc ! video/x-raw(memory:NVMM),width=1280,height=720 !
# nvvidconv ! video/x-raw,format=BGRx ! videoconvert ! video/x-raw,format=BGR ! appsink").
"""


def render(defaults: dict[str, Any], prefix: str, ort: str = "onnxruntime") -> str:
    """The service config text for an install under ``prefix`` with the ``ort`` package."""
    config = dict(defaults)
    config.pop("state_dir", None)
    detector = dict(config.get("detector") or {})
    models = f"{prefix.rstrip('/')}/models"
    model = PurePosixPath(str(detector.get("model") or DEFAULT_MODEL)).name
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
    config["cameras"] = [{"id": "front", "source": "/dev/video0"}]
    return HEADER + yaml.safe_dump(config, sort_keys=False)


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print("usage: render_config.py SOURCE_YAML PREFIX [ORT_PACKAGE]", file=sys.stderr)
        return 2
    with open(argv[0], encoding="utf-8") as f:
        defaults = yaml.safe_load(f) or {}
    sys.stdout.write(render(defaults, argv[1], *argv[2:]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
