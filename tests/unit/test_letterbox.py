"""Letterbox geometry and the round trip from model input back to source pixels."""

from __future__ import annotations

import numpy as np
import pytest

from agent.detect.letterbox import PAD_VALUE, LetterboxBuffer, SheetBuffer, fit


@pytest.mark.parametrize(
    ("src_wh", "input_hw", "scale", "pad_xy"),
    [
        ((640, 640), (640, 640), 1.0, (0.0, 0.0)),
        ((1280, 720), (640, 640), 0.5, (0.0, 140.0)),
        ((810, 1080), (640, 640), 640 / 1080, (80.0, 0.0)),
        ((320, 240), (640, 640), 2.0, (0.0, 80.0)),
        ((768, 576), (320, 320), 320 / 768, (0.0, 40.0)),
        ((100, 50), (384, 640), 6.4, (0.0, 32.0)),  # non-square model input
    ],
)
def test_fit_geometry(src_wh, input_hw, scale, pad_xy):
    """fit() scales the longer side to the input and centres the padding."""
    box, _ = fit(src_wh, input_hw)
    assert box.scale == pytest.approx(scale)
    assert box.pad_xy == pytest.approx(pad_xy, abs=0.5)


@pytest.mark.parametrize("src_wh", [(1280, 720), (810, 1080), (333, 777), (640, 640), (64, 48)])
def test_round_trip_boxes_and_points(src_wh):
    """A box mapped into input space and back lands where it started (within a pixel)."""
    box, _ = fit(src_wh, (640, 640))
    w, h = src_wh
    src = np.array([[0, 0, w, h], [w * 0.1, h * 0.2, w * 0.5, h * 0.9]], np.float32)
    inp = src * box.scale
    inp[:, [0, 2]] += box.pad_xy[0]
    inp[:, [1, 3]] += box.pad_xy[1]
    back = box.xyxy_to_source(inp)
    np.testing.assert_allclose(back, src, atol=1.0)
    pts = box.xy_to_source(inp[:, :2].reshape(-1, 1, 2))
    np.testing.assert_allclose(pts.reshape(-1, 2), src[:, :2], atol=1.0)


def test_boxes_clipped_to_image():
    """Boxes reaching into the padding are clipped to the source image."""
    box, _ = fit((1280, 720), (640, 640))
    out = box.xyxy_to_source(np.array([[-10, 100, 700, 600]], np.float32))
    assert out[0, 0] == 0 and out[0, 2] == 1280
    assert out[0, 1] == 0 and out[0, 3] == 720


def test_buffer_layout_rgb_chw_and_padding():
    """The tensor is RGB, CHW, scaled to 0..1, with grey padding where the image is not."""
    img = np.zeros((100, 200, 3), np.uint8)
    img[..., 0] = 255  # pure blue in BGR
    buf = LetterboxBuffer((64, 64))
    box = buf.apply(img)
    t = buf.tensor[0]
    assert t.shape == (3, 64, 64)
    top = int(box.pad_xy[1])
    assert top == 16
    np.testing.assert_allclose(t[:, 32, 32], [0.0, 0.0, 1.0])  # RGB order: blue last
    np.testing.assert_allclose(t[:, 0, 32], [PAD_VALUE / 255] * 3, atol=1e-6)


def test_buffer_reuses_tensor_and_handles_new_sizes():
    """The input tensor is the same object across frames, even when the source size changes."""
    buf = LetterboxBuffer((64, 64))
    tensor = buf.tensor
    a = buf.apply(np.full((64, 128, 3), 200, np.uint8))
    b = buf.apply(np.full((128, 64, 3), 10, np.uint8))
    assert buf.tensor is tensor
    assert a.pad_xy == (0.0, 16.0) and b.pad_xy == (16.0, 0.0)
    # old padding rows from the first geometry must not leak into the second
    np.testing.assert_allclose(buf.tensor[0, :, 0, 0], [PAD_VALUE / 255] * 3, atol=1e-6)
    np.testing.assert_allclose(buf.tensor[0, :, 32, 32], [10 / 255] * 3, atol=1e-6)


def _reference_letterbox(image: np.ndarray, input_hw: tuple[int, int]) -> np.ndarray:
    """The obvious implementation: resize, paste on a grey canvas, BGR->RGB, CHW, /255."""
    import cv2

    box, (nw, nh) = fit((image.shape[1], image.shape[0]), input_hw)
    canvas = np.full((*input_hw, 3), PAD_VALUE, np.uint8)
    resized = (
        image
        if (nw, nh) == (image.shape[1], image.shape[0])
        else cv2.resize(image, (nw, nh), interpolation=cv2.INTER_LINEAR)
    )
    left, top = int(box.pad_xy[0]), int(box.pad_xy[1])
    canvas[top : top + nh, left : left + nw] = resized
    return canvas[..., ::-1].transpose(2, 0, 1).astype(np.float32) * np.float32(1 / 255)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("input_hw", [(640, 640), (320, 320), (384, 640)])
def test_buffer_matches_reference_across_geometry_changes(input_hw, dtype):
    """The in-place tensor equals the obvious implementation's, frame after frame, while
    the source size changes (and for a source that needs no resize)."""
    rng = np.random.default_rng(7)
    buf = LetterboxBuffer(input_hw, dtype)
    for hw in [(576, 768), (576, 768), (1080, 1920), (333, 101), input_hw, (576, 768)]:
        img = rng.integers(0, 256, (*hw, 3), dtype=np.uint8)
        buf.apply(img)
        want = _reference_letterbox(img, input_hw).astype(dtype)
        np.testing.assert_array_equal(buf.tensor[0], want)


def test_sheet_buffer_takes_each_size_as_it_is_in_one_block():
    """Images of several sizes, each into a tensor of its own shape (RGB, CHW, 0..1, no
    padding); a smaller one reuses the memory of a larger one."""
    rng = np.random.default_rng(5)
    buf = SheetBuffer()
    first = None
    for h, w in ((64, 96), (32, 32), (96, 64), (64, 32)):
        image = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        box = buf.apply(image)
        assert (box.scale, box.pad_xy, box.input_hw) == (1.0, (0.0, 0.0), (h, w))
        want = image[:, :, ::-1].transpose(2, 0, 1)[None].astype(np.float32) / 255.0
        np.testing.assert_allclose(buf.tensor, want, rtol=1e-6)
        assert buf.tensor.flags["C_CONTIGUOUS"]
        if first is None:
            first = buf.tensor
        elif h * w <= 64 * 96:
            assert np.shares_memory(buf.tensor, first)
