"""Annotated images: boxes, labels and pose skeletons (for --draw and snapshots)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from agent.cv import cv2
from agent.detect.detections import Detections

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


def draw(image: npt.NDArray[np.uint8], dets: Detections) -> npt.NDArray[np.uint8]:
    """A copy of ``image`` with boxes, labels and (for pose) skeletons."""
    out: npt.NDArray[np.uint8] = image.copy()
    thick = max(1, round(max(image.shape[:2]) / 400))
    height, width = image.shape[:2]
    for i, (x1, y1, x2, y2) in enumerate(dets.xyxy.tolist()):
        color = (0, 200, 0)
        cv2.rectangle(out, (round(x1), round(y1)), (round(x2), round(y2)), color, thick)
        text = f"{dets.labels[i]} {dets.score[i]:.2f}"
        scale = 0.4 * thick
        (tw, th), base = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, scale, thick)
        x, y = label_origin((tw, th), base, (round(x1), round(y1)), (width, height))
        cv2.putText(out, text, (x, y), cv2.FONT_HERSHEY_SIMPLEX, scale, color, thick)
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
