"""Every MQTT topic of the contract (docs/mqtt.md), built in one place."""

from __future__ import annotations

import re
from dataclasses import dataclass

_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_PREFIX = re.compile(r"^[A-Za-z0-9_/-]{1,64}$")
_NOT_LEVEL = re.compile(r"[^A-Za-z0-9_-]")
# Per-camera levels the agent itself publishes; a label with one of these names would
# overwrite the camera's status or detections topic, so its level gets a trailing "_".
_RESERVED_CAMERA_LEVELS = frozenset(
    {"detections", "status", "snapshot", "events", "zones", "lines", "motion"}
)


def label_level(label: str) -> str:
    """A topic level for a detection label: ``traffic light`` -> ``traffic_light``."""
    level = _NOT_LEVEL.sub("_", label)[:64] or "_"
    return level + "_" if level in _RESERVED_CAMERA_LEVELS else level


def _check_id(kind: str, value: str) -> None:
    if not _ID.match(value):
        raise ValueError(f"{kind} {value!r} must match {_ID.pattern}")


@dataclass(frozen=True, slots=True)
class Topics:
    """Topics of one device: ``<prefix>/<device_id>/...`` plus its fleet groups."""

    prefix: str
    device_id: str
    groups: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not _PREFIX.match(self.prefix) or "//" in self.prefix or self.prefix[-1] == "/":
            raise ValueError(f"topic prefix {self.prefix!r} must be levels of [A-Za-z0-9_-]")
        _check_id("device id", self.device_id)
        for group in self.groups:
            _check_id("fleet group", group)

    @property
    def base(self) -> str:
        return f"{self.prefix}/{self.device_id}"

    # -- outgoing ---------------------------------------------------------------------------
    @property
    def status(self) -> str:
        return f"{self.base}/status"

    @property
    def health(self) -> str:
        return f"{self.base}/health"

    @property
    def model(self) -> str:
        return f"{self.base}/model"

    def camera_detections(self, camera_id: str) -> str:
        return f"{self.base}/{camera_id}/detections"

    def camera_status(self, camera_id: str) -> str:
        return f"{self.base}/{camera_id}/status"

    def camera_label(self, camera_id: str, label: str) -> str:
        return f"{self.base}/{camera_id}/{label_level(label)}"

    def camera_snapshot(self, camera_id: str) -> str:
        return f"{self.base}/{camera_id}/snapshot"

    def camera_events(self, camera_id: str) -> str:
        return f"{self.base}/{camera_id}/events"

    def event_snapshot(self, camera_id: str, event_id: str) -> str:
        return f"{self.base}/{camera_id}/events/{event_id}/snapshot"

    def zone_count(self, camera_id: str, zone: str, label: str) -> str:
        return f"{self.base}/{camera_id}/zones/{zone}/{label_level(label)}"

    def line_count(self, camera_id: str, line: str, label: str, direction: str) -> str:
        return f"{self.base}/{camera_id}/lines/{line}/{label_level(label)}/{direction}"

    def camera_motion(self, camera_id: str) -> str:
        return f"{self.base}/{camera_id}/motion"

    def reply(self, name: str) -> str:
        return f"{self.base}/reply/{name}"

    def progress(self, name: str) -> str:
        """Intermediate stages of a long command (``accepted``); the final reply is apart."""
        return f"{self.base}/progress/{name}"

    # -- incoming ---------------------------------------------------------------------------
    def cmd(self, name: str) -> str:
        return f"{self.base}/cmd/{name}"

    def fleet_cmd(self, group: str, name: str) -> str:
        return f"{self.prefix}/fleet/{group}/cmd/{name}"

    def model_upload(self, transfer_id: str, index: int) -> str:
        return f"{self.base}/model/upload/{transfer_id}/{index}"

    def fleet_model_upload(self, group: str, transfer_id: str, index: int) -> str:
        return f"{self.prefix}/fleet/{group}/model/upload/{transfer_id}/{index}"

    def _roots(self) -> list[str]:
        """The device root, then one root per fleet group."""
        return [self.base] + [f"{self.prefix}/fleet/{g}" for g in self.groups]

    def cmd_subscriptions(self) -> list[str]:
        return [f"{root}/cmd/#" for root in self._roots()]

    def upload_subscriptions(self) -> list[str]:
        return [f"{root}/model/upload/+/+" for root in self._roots()]

    def parse_cmd(self, topic: str) -> str | None:
        """The command name of a cmd topic of this device or its groups, else None."""
        for root in self._roots():
            head = f"{root}/cmd/"
            if topic.startswith(head) and len(topic) > len(head):
                name = topic[len(head) :]
                if "+" not in name and "#" not in name and "" not in name.split("/"):
                    return name
        return None

    def parse_upload(self, topic: str) -> tuple[str, int] | None:
        """``(transfer_id, index)`` of a model upload chunk topic, else None."""
        for root in self._roots():
            head = f"{root}/model/upload/"
            if not topic.startswith(head):
                continue
            parts = topic[len(head) :].split("/")
            if len(parts) != 2 or not _ID.match(parts[0]):
                return None
            index = parts[1]
            # str.isdigit accepts other scripts' digits; the contract means ASCII 0-9.
            if not (index.isascii() and index.isdigit()) or len(index) > 9:
                return None
            return parts[0], int(index)
        return None


# -- for subscribers (``edge-agent watch``) ------------------------------------------------
_DEVICE_KINDS = {"status": "status", "health": "health", "model": "model"}
_CAMERA_KINDS = {
    "detections": "detections",
    "status": "camera_status",
    "snapshot": "snapshot",
    "events": "events",
    "motion": "motion",
}
#: Deeper camera topics: (third level, number of levels) -> kind.
_CAMERA_DEEP = {
    ("events", 5): "event_snapshot",
    ("zones", 5): "zone_count",
    ("lines", 6): "line_count",
}


def watch_filter(prefix: str, device: str | None = None) -> str:
    """The subscription that sees everything one device (or every device) publishes."""
    return f"{prefix}/{device}/#" if device else f"{prefix}/#"


def classify(prefix: str, topic: str) -> tuple[str, str, str | None] | None:
    """``(kind, device, camera)`` of a contract topic under ``prefix``, else None.

    Kinds: status, health, model, upload, cmd, reply (device topics); detections,
    camera_status, snapshot, count (camera topics; ``count`` is a per-label count), events,
    motion, event_snapshot, zone_count, line_count (objects over time).
    Fleet command topics are not any one device's and give None.
    """
    head = prefix + "/"
    if not topic.startswith(head):
        return None
    levels = topic[len(head) :].split("/")
    device = levels[0]
    if device == "fleet" or not _ID.match(device) or len(levels) < 2:
        return None
    second = levels[1]
    if len(levels) == 2:
        kind = _DEVICE_KINDS.get(second)
        return (kind, device, None) if kind else None
    if second in ("cmd", "reply"):
        return second, device, None
    if second == "model" and len(levels) == 5 and levels[2] == "upload":
        return "upload", device, None
    if len(levels) == 3 and _ID.match(second):
        return _CAMERA_KINDS.get(levels[2], "count"), device, second
    deep = _CAMERA_DEEP.get((levels[2], len(levels)))
    if deep and _ID.match(second):
        return deep, device, second
    return None
