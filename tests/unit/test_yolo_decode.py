"""YOLO output decoders on small synthetic tensors with known answers."""

from __future__ import annotations

import numpy as np
import pytest

from agent.detect.metadata import ModelMeta, parse_metadata
from agent.detect.yolo import LayoutKind, YoloLayout, decode, detect_layout
from agent.errors import ModelError

NO_META = ModelMeta(None, None, None, None, None, None, None)


def _meta(**kw):
    return ModelMeta(
        task=kw.get("task"),
        labels=kw.get("labels"),
        kpt_shape=kw.get("kpt_shape"),
        input_hw=None,
        name=None,
        version=None,
        precision=None,
    )


def _v8(columns, nc, extra=0):
    """(1, 4+nc+extra, N) tensor from a list of per-anchor columns."""
    arr = np.array(columns, np.float32).T  # (C, N)
    assert arr.shape[0] == 4 + nc + extra
    return arr[None]


@pytest.mark.parametrize(
    ("shape", "meta", "kind", "nc", "kpt"),
    [
        ((1, 84, 8400), NO_META, LayoutKind.V8_DETECT, 80, None),
        ((1, 5, 2100), NO_META, LayoutKind.V8_DETECT, 1, None),
        (
            (1, 56, 8400),
            _meta(task="pose", labels=("person",), kpt_shape=(17, 3)),
            LayoutKind.V8_POSE,
            1,
            (17, 3),
        ),
        ((1, 56, 8400), _meta(kpt_shape=(17, 3)), LayoutKind.V8_POSE, 1, (17, 3)),
        ((1, 25200, 85), NO_META, LayoutKind.V5_DETECT, 80, None),
        ((1, 6300, 7), _meta(labels=("a", "b")), LayoutKind.V5_DETECT, 2, None),
    ],
)
def test_detect_layout(shape, meta, kind, nc, kpt):
    """The layout follows from the output shape and the metadata."""
    layout = detect_layout(shape, meta)
    assert (layout.kind, layout.num_classes, layout.kpt_shape) == (kind, nc, kpt)


@pytest.mark.parametrize(
    ("shape", "meta"),
    [
        ((1, 84), NO_META),  # wrong rank
        ((1, 84, 8400, 1), NO_META),
        ((1, 57, 8400), _meta(task="pose", labels=("person",), kpt_shape=(17, 3))),
        ((1, 84, 8400), _meta(labels=("a", "b"))),  # label count does not match
        ((1, 8400, 4), NO_META),  # v5 with no classes
    ],
)
def test_unknown_layout_is_clear_error(shape, meta):
    """A shape that fits no known layout raises ModelError naming the shape."""
    with pytest.raises(ModelError, match="output"):
        detect_layout(shape, meta)


def test_decode_v8_detect_boxes_scores_classes():
    """v8 detect: cxcywh -> xyxy, best class per anchor, threshold applied."""
    cols = [
        [50, 50, 20, 10, 0.1, 0.9, 0.0],  # class 1, 0.9
        [10, 10, 4, 4, 0.2, 0.1, 0.05],  # below threshold
        [100, 80, 40, 20, 0.6, 0.3, 0.2],  # class 0, 0.6
    ]
    layout = YoloLayout(LayoutKind.V8_DETECT, 3)
    c = decode(_v8(cols, 3), layout, conf_threshold=0.25)
    order = np.argsort(-c.score)
    np.testing.assert_allclose(c.score[order], [0.9, 0.6], rtol=1e-6)
    assert c.class_id[order].tolist() == [1, 0]
    np.testing.assert_allclose(c.xyxy[order], [[40, 45, 60, 55], [80, 70, 120, 90]])
    assert c.keypoints is None


def test_decode_class_filter_picks_best_allowed_class():
    """With a class filter, the best *allowed* class decides score and id."""
    cols = [[50, 50, 20, 10, 0.9, 0.5, 0.1], [10, 10, 4, 4, 0.95, 0.1, 0.0]]
    layout = YoloLayout(LayoutKind.V8_DETECT, 3)
    c = decode(
        _v8(cols, 3), layout, conf_threshold=0.25, allowed_classes=np.array([1, 2], np.int32)
    )
    assert c.class_id.tolist() == [1]
    np.testing.assert_allclose(c.score, [0.5])


def test_decode_v8_pose_keypoints():
    """v8 pose: keypoints follow the class scores as (x, y, conf) per point."""
    kpts = [1, 2, 0.9, 3, 4, 0.8]  # K=2, D=3
    cols = [[50, 50, 20, 10, 0.7, *kpts], [0, 0, 1, 1, 0.01, *([0] * 6)]]
    layout = YoloLayout(LayoutKind.V8_POSE, 1, (2, 3))
    c = decode(_v8(cols, 1, extra=6), layout, conf_threshold=0.25)
    assert c.keypoints is not None and c.keypoints.shape == (1, 2, 3)
    np.testing.assert_allclose(c.keypoints[0], [[1, 2, 0.9], [3, 4, 0.8]], rtol=1e-6)


def test_decode_pose_xy_only_gets_unit_confidence():
    """Pose models with (x, y) keypoints report conf 1.0 so the shape is always (K, 3)."""
    cols = [[50, 50, 20, 10, 0.7, 1, 2, 3, 4]]
    layout = YoloLayout(LayoutKind.V8_POSE, 1, (2, 2))
    c = decode(_v8(cols, 1, extra=4), layout, conf_threshold=0.25)
    np.testing.assert_allclose(c.keypoints[0], [[1, 2, 1], [3, 4, 1]])


def test_decode_v5_objectness_times_class():
    """v5: score = objectness x class probability."""
    rows = np.array([[[50, 50, 20, 10, 0.8, 0.5, 0.9], [5, 5, 2, 2, 0.1, 0.9, 0.9]]], np.float32)
    layout = YoloLayout(LayoutKind.V5_DETECT, 2)
    c = decode(rows, layout, conf_threshold=0.25)
    np.testing.assert_allclose(c.score, [0.72], rtol=1e-6)
    assert c.class_id.tolist() == [1]
    np.testing.assert_allclose(c.xyxy, [[40, 45, 60, 55]])


def test_decode_caps_candidates():
    """max_candidates keeps only the highest-scoring anchors before NMS."""
    n = 50
    cols = [[i, i, 2, 2, 0.3 + i / 100] for i in range(n)]
    layout = YoloLayout(LayoutKind.V8_DETECT, 1)
    c = decode(_v8(cols, 1), layout, conf_threshold=0.25, max_candidates=5)
    np.testing.assert_allclose(np.sort(c.score), [0.75, 0.76, 0.77, 0.78, 0.79], rtol=1e-6)


@pytest.mark.parametrize(
    ("raw", "labels", "task", "input_hw"),
    [
        (
            {"names": "{0: 'person'}", "task": "pose", "imgsz": "[640, 640]"},
            ("person",),
            "pose",
            (640, 640),
        ),
        ({"labels": '["a", "b"]', "input_hw": "[384, 640]"}, ("a", "b"), None, (384, 640)),
        ({"names": "{1: 'b', 0: 'a', 10: 'k'}"}, ("a", "b", "k"), None, None),
        ({}, None, None, None),
    ],
)
def test_parse_metadata(raw, labels, task, input_hw):
    """Ultralytics' and our own metadata keys are both understood."""
    meta = parse_metadata(raw)
    assert (meta.labels, meta.task, meta.input_hw) == (labels, task, input_hw)


def test_parse_metadata_rejects_unknown_task():
    """A task we cannot decode is a clear error, not a silent misread."""
    with pytest.raises(ModelError, match="segment"):
        parse_metadata({"task": "segment"})


def test_decode_rejects_non_finite_scores():
    """A NaN score is an inference error, not an empty scene (the health window sees it)."""
    cols = [[50, 50, 20, 10, float("nan")], [10, 10, 4, 4, 0.9]]
    layout = YoloLayout(LayoutKind.V8_DETECT, 1)
    with pytest.raises(ModelError, match="non-finite"):
        decode(_v8(cols, 1), layout, conf_threshold=0.25)
