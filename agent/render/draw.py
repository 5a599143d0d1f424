"""Annotated images (for --draw and event snapshots): boxes, labels, pose skeletons, scenes."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from agent.cv import cv2
from agent.detect.detections import Detections

if TYPE_CHECKING:
    from agent.objects.stage import CameraObjects

# COCO keypoint skeleton (pairs of indices), drawn for 17-point pose models.
SKELETON = (
    (15, 13), (13, 11), (16, 14), (14, 12), (11, 12), (5, 11), (6, 12), (5, 6), (5, 7),
    (6, 8), (7, 9), (8, 10), (1, 2), (0, 1), (0, 2), (1, 3), (2, 4), (3, 5), (4, 6),
)  # fmt: skip


def label_origin(
    text_wh: tuple[int, int], baseline: int, box_xy: tuple[int, int], image_wh: tuple[int, int]
) -> tuple[int, int]:
    """Bottom-left point of a label of ``text_wh`` for a box whose top-left is ``box_xy``.

    Above the box, moved left and down as far as needed to stay wholly inside the image:
    a label at the right edge would otherwise be cut off, one at the top edge too.
    """
    (tw, th), (x, y), (w, h) = text_wh, box_xy, image_wh
    x = max(0, min(x, w - tw - 1))
    y = y - baseline - 2
    y = max(th + 1, min(y, h - baseline - 1))
    return x, y


def put_label(
    out: npt.NDArray[np.uint8],
    text: str,
    box_xy: tuple[int, int],
    scale: float,
    color: tuple[int, int, int],
    thick: int,
) -> None:
    """Draw ``text`` above the point ``box_xy``, kept wholly inside ``out``."""
    (tw, th), base = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, scale, thick)
    origin = label_origin((tw, th), base, box_xy, (out.shape[1], out.shape[0]))
    cv2.putText(out, text, origin, cv2.FONT_HERSHEY_SIMPLEX, scale, color, thick)


def draw(image: npt.NDArray[np.uint8], dets: Detections) -> npt.NDArray[np.uint8]:
    """A copy of ``image`` with boxes, labels and (for pose) skeletons."""
    out: npt.NDArray[np.uint8] = image.copy()
    thick = max(1, round(max(image.shape[:2]) / 400))
    for i, (x1, y1, x2, y2) in enumerate(dets.xyxy.tolist()):
        color = (0, 200, 0)
        cv2.rectangle(out, (round(x1), round(y1)), (round(x2), round(y2)), color, thick)
        text = f"{dets.labels[i]} {dets.score[i]:.2f}"
        put_label(out, text, (round(x1), round(y1)), 0.4 * thick, color, thick)
        if dets.keypoints is not None:
            kp = dets.keypoints[i]
            if len(kp) == 17:
                for a, b in SKELETON:
                    if kp[a, 2] > 0.5 and kp[b, 2] > 0.5:
                        pa = (round(float(kp[a, 0])), round(float(kp[a, 1])))
                        pb = (round(float(kp[b, 0])), round(float(kp[b, 1])))
                        cv2.line(out, pa, pb, (255, 128, 0), thick)
            for x, y, c in kp.tolist():
                if c > 0.5:
                    cv2.circle(out, (round(x), round(y)), thick + 1, (0, 0, 255), -1)
    return out


#: JPEG qualities tried, best first, until an image fits the payload limit.
JPEG_QUALITIES = (85, 70, 50, 30)


def jpeg_within(image: npt.NDArray[np.uint8], limit: int, max_width: int | None = None) -> bytes:
    """``image`` as JPEG of at most ``limit`` bytes (lower quality, then half size), or b"".

    ``max_width`` scales a wider image down first (snapshots need not be full resolution).
    """
    if max_width is not None and image.shape[1] > max_width:
        scale = max_width / image.shape[1]
        size = (max_width, max(1, round(image.shape[0] * scale)))
        image = cv2.resize(image, size, interpolation=cv2.INTER_AREA)
    for quality in JPEG_QUALITIES:
        ok, buf = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, quality])
        data = bytes(buf) if ok else b""
        if data and len(data) <= limit:
            return data
        # Too big for the broker: halve the resolution and try a lower quality.
        image = cv2.resize(image, (max(1, image.shape[1] // 2), max(1, image.shape[0] // 2)))
    return b""


def draw_box(
    image: npt.NDArray[np.uint8], xyxy: tuple[float, float, float, float], text: str
) -> npt.NDArray[np.uint8]:
    """A copy of ``image`` with one box and its label (event snapshots)."""
    out: npt.NDArray[np.uint8] = image.copy()
    thick = max(1, round(max(image.shape[:2]) / 400))
    x1, y1, x2, y2 = (round(v) for v in xyxy)
    color = (0, 200, 255)
    cv2.rectangle(out, (x1, y1), (x2, y2), color, thick + 1)
    put_label(out, text, (x1, y1), 0.45 * thick, color, thick)
    return out


def draw_scene(
    image: npt.NDArray[np.uint8],
    dets: Detections,
    track_ids: npt.NDArray[np.int64],
    stage: CameraObjects,
) -> npt.NDArray[np.uint8]:
    """A frame with its tracked boxes (``#id``), zones, masks, lines and line totals."""
    out: npt.NDArray[np.uint8] = image.copy()
    h, w = image.shape[:2]
    thick = max(1, round(max(h, w) / 500))
    scale = np.array([w, h], np.float64)
    cam = stage.camera
    for name, zone in cam.zones.items():
        pts = np.round(np.array(zone.polygon) * scale).astype(np.int32)
        cv2.polylines(out, [pts], True, (255, 200, 0), thick)
        put_label(out, name, (int(pts[0][0]), int(pts[0][1])), 0.5 * thick, (255, 200, 0), thick)
    for mask in cam.masks:
        pts = np.round(np.array(mask) * scale).astype(np.int32)
        cv2.polylines(out, [pts], True, (80, 80, 80), thick)
    for name, line in cam.lines.items():
        a, b = (np.round(np.array(line.points) * scale).astype(np.int32)).tolist()
        cv2.arrowedLine(out, (a[0], a[1]), (b[0], b[1]), (0, 0, 255), thick + 1, tipLength=0.03)
        totals = stage.line_totals
        n_in = sum(v for k, v in totals.items() if k[0] == name and k[2] == "in")
        n_out = sum(v for k, v in totals.items() if k[0] == name and k[2] == "out")
        cv2.putText(out, f"{name} in {n_in} out {n_out}", (a[0] + 4, a[1] + 16 * thick),
                    cv2.FONT_HERSHEY_SIMPLEX, 0.5 * thick, (0, 0, 255), thick)  # fmt: skip
    ids = track_ids.tolist()
    for i, (x1, y1, x2, y2) in enumerate(dets.xyxy.tolist()):
        tid = ids[i] if i < len(ids) else -1
        color = _track_color(tid)
        cv2.rectangle(out, (round(x1), round(y1)), (round(x2), round(y2)), color, thick)
        text = f"#{tid}" if tid >= 0 else f"{dets.score[i]:.2f}"
        put_label(out, text, (round(x1), round(y1)), 0.45 * thick, color, thick)
    return out


def _track_color(track_id: int) -> tuple[int, int, int]:
    if track_id < 0:
        return (160, 160, 160)
    hue = (track_id * 47) % 180
    hsv = np.array([[[hue, 200, 255]]], np.uint8)
    b, g, r = cv2.cvtColor(hsv, cv2.COLOR_HSV2BGR)[0, 0].tolist()
    return int(b), int(g), int(r)
