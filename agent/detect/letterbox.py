"""Letterbox preprocessing into a preallocated NCHW tensor, and the inverse box mapping."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from agent.cv import cv2

PAD_VALUE = 114  # Ultralytics' grey; the models were trained with it


@dataclass(frozen=True, slots=True)
class Letterbox:
    """How a source image was fitted into the model input.

    input = source * scale + pad, with ``pad_xy`` the left/top padding in input pixels.
    """

    src_wh: tuple[int, int]
    input_hw: tuple[int, int]
    scale: float
    pad_xy: tuple[float, float]

    def __post_init__(self) -> None:
        if self.scale <= 0 or min(self.src_wh) <= 0 or min(self.input_hw) <= 0:
            raise ValueError(f"invalid letterbox geometry: {self}")

    def xyxy_to_source(self, xyxy: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """Map (n, 4) boxes from input pixels to source pixels, clipped to the image."""
        out = np.empty_like(xyxy, dtype=np.float32)
        px, py = self.pad_xy
        inv = 1.0 / self.scale
        out[:, [0, 2]] = (xyxy[:, [0, 2]] - px) * inv
        out[:, [1, 3]] = (xyxy[:, [1, 3]] - py) * inv
        w, h = self.src_wh
        out[:, [0, 2]] = np.clip(out[:, [0, 2]], 0, w)
        out[:, [1, 3]] = np.clip(out[:, [1, 3]], 0, h)
        return out

    def xy_to_source(self, xy: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """Map points (..., 2) from input pixels to source pixels (not clipped)."""
        px, py = self.pad_xy
        inv = 1.0 / self.scale
        out = np.empty_like(xy, dtype=np.float32)
        out[..., 0] = (xy[..., 0] - px) * inv
        out[..., 1] = (xy[..., 1] - py) * inv
        return out


def fit(src_wh: tuple[int, int], input_hw: tuple[int, int]) -> tuple[Letterbox, tuple[int, int]]:
    """Geometry of fitting ``src_wh`` into ``input_hw``; also returns the resized (w, h)."""
    sw, sh = src_wh
    ih, iw = input_hw
    scale = min(iw / sw, ih / sh)
    nw, nh = max(1, round(sw * scale)), max(1, round(sh * scale))
    left = (iw - nw) // 2
    top = (ih - nh) // 2
    return Letterbox(src_wh, input_hw, scale, (float(left), float(top))), (nw, nh)


class LetterboxBuffer:
    """Reusable letterbox target: one uint8 canvas and one model-input tensor.

    ``apply`` writes the input tensor in place; nothing per frame is allocated once the
    source size has been seen (the resize buffer is cached per source geometry). Not
    thread-safe: one buffer per inference thread.
    """

    def __init__(self, input_hw: tuple[int, int], dtype: type[np.floating] = np.float32) -> None:
        ih, iw = input_hw
        self.input_hw = input_hw
        self.tensor: npt.NDArray[np.floating] = np.zeros((1, 3, ih, iw), dtype=dtype)
        self._canvas = np.full((ih, iw, 3), PAD_VALUE, dtype=np.uint8)
        self._resized: npt.NDArray[np.uint8] | None = None
        self._geometry: tuple[tuple[int, int], Letterbox] | None = None

    def apply(self, image: npt.NDArray[np.uint8]) -> Letterbox:
        """Letterbox a BGR uint8 image into ``self.tensor`` (RGB, CHW, 0..1)."""
        src_wh = (int(image.shape[1]), int(image.shape[0]))
        if self._geometry is None or self._geometry[0] != src_wh:
            box, (nw, nh) = fit(src_wh, self.input_hw)
            self._canvas.fill(PAD_VALUE)
            self._resized = np.empty((nh, nw, 3), dtype=np.uint8)
            self._geometry = (src_wh, box)
        box = self._geometry[1]
        resized = self._resized
        if resized is None:  # pragma: no cover - set together with _geometry
            raise RuntimeError("letterbox buffer not initialised")
        nh, nw = resized.shape[:2]
        left, top = int(box.pad_xy[0]), int(box.pad_xy[1])
        if (nw, nh) == src_wh:
            self._canvas[top : top + nh, left : left + nw] = image
        else:
            cv2.resize(image, (nw, nh), dst=resized, interpolation=cv2.INTER_LINEAR)
            self._canvas[top : top + nh, left : left + nw] = resized
        # BGR->RGB and HWC->CHW by strided view, scaled in one pass into the tensor.
        np.multiply(
            self._canvas.transpose(2, 0, 1)[::-1],
            np.float32(1.0 / 255.0),
            out=self.tensor[0],
            casting="unsafe",
        )
        return box
