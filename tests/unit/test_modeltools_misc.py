"""Small offline-tool pieces: progress output, frame sampling, ground-truth parsing."""

from __future__ import annotations

import io
import json

import pytest

from agent.errors import ConfigError
from agent.modeltools import groundtruth
from agent.modeltools.media import even_indices
from agent.modeltools.progress import Progress, Steps


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_progress_piped_prints_one_summary_line():
    """Not a TTY: nothing while working, one summary line at the end."""
    out, clock = io.StringIO(), Clock()
    p = Progress("calibrating", 10, stream=out, live=False, clock=clock)
    for _ in range(10):
        clock.t += 0.5
        p.update()
    assert out.getvalue() == ""
    p.close()
    assert out.getvalue() == "calibrating: 10 frames in 5.0 s (2.0/s)\n"


def test_progress_on_a_tty_shows_rate_and_eta():
    """On a TTY: redrawn line with done/total, rate and time left; cleared at the end."""
    out, clock = io.StringIO(), Clock()
    p = Progress("evaluate", 100, stream=out, live=True, clock=clock)
    clock.t = 10.0
    p.update(25)
    assert p.line() == "evaluate: 25/100 frames (25%) 2.5/s, ETA 0:30"
    assert out.getvalue().endswith("evaluate: 25/100 frames (25%) 2.5/s, ETA 0:30")
    p.close("done")
    assert out.getvalue().endswith("\r\x1b[2Kdone\n")


def test_progress_unknown_total_and_silent_close():
    """Without a total there is no ETA; close("") prints nothing when piped."""
    out, clock = io.StringIO(), Clock()
    p = Progress("reading", stream=out, live=False, clock=clock)
    clock.t = 2.0
    p.update(4)
    assert p.line() == "reading: 4 frames 2.0/s"
    p.close("")
    assert out.getvalue() == ""


def test_steps_are_numbered_on_a_tty_only():
    """Steps print numbered lines when verbose, only the summary when piped."""
    out = io.StringIO()
    s = Steps("export", 2, stream=out, live=True)
    s.step("venv")
    s.step("export")
    assert out.getvalue().splitlines() == ["[1/2] venv", "[2/2] export"]
    quiet = io.StringIO()
    q = Steps("export", 2, stream=quiet, live=False)
    q.step("venv")
    q.close("wrote m.onnx")
    assert quiet.getvalue().startswith("export: wrote m.onnx (")


@pytest.mark.parametrize(
    ("count", "wanted", "expected"),
    [
        (10, 5, [1, 3, 5, 7, 9]),
        (10, 1, [5]),
        (3, 5, [0, 1, 2]),
        (795, 3, [132, 397, 662]),
        (0, 5, []),
        (10, 0, []),
    ],
)
def test_even_indices(count, wanted, expected):
    """Frames are spread evenly over the video, centred in their stretch, never repeated."""
    assert even_indices(count, wanted) == expected


def test_coco_ground_truth(tmp_path):
    """COCO JSON: xywh boxes to xyxy by image name; crowds and unknown labels skipped."""
    path = tmp_path / "coco.json"
    path.write_text(
        json.dumps(
            {
                "images": [{"id": 1, "file_name": "imgs/bus.jpg"}, {"id": 2, "file_name": "e.jpg"}],
                "categories": [{"id": 1, "name": "person"}, {"id": 3, "name": "bus"}],
                "annotations": [
                    {"image_id": 1, "category_id": 1, "bbox": [10, 20, 30, 40]},
                    {"image_id": 1, "category_id": 3, "bbox": [0, 0, 5, 5]},
                    {"image_id": 1, "category_id": 1, "bbox": [0, 0, 9, 9], "iscrowd": 1},
                ],
            }
        )
    )
    gt = groundtruth.load(path, ["person"])
    assert gt.boxes["bus.jpg"].xyxy.tolist() == [[10, 20, 40, 60]]
    assert gt.boxes["bus.jpg"].class_id.tolist() == [0]
    assert len(gt.boxes["e.jpg"]) == 0  # an image without people is still scored
    assert gt.skipped_labels == {"bus": 1}


def test_labelme_ground_truth(tmp_path):
    """labelme: rectangles and polygons become their bounding boxes, per imagePath."""
    d = tmp_path / "labels"
    d.mkdir()
    (d / "a.json").write_text(
        json.dumps(
            {
                "imagePath": "../img/a.jpg",
                "shapes": [
                    {"label": "person", "points": [[30, 40], [10, 20]], "shape_type": "rectangle"},
                    {
                        "label": "person",
                        "points": [[0, 0], [4, 1], [2, 8]],
                        "shape_type": "polygon",
                    },
                    {"label": "person", "points": [[1, 1]], "shape_type": "point"},
                ],
            }
        )
    )
    gt = groundtruth.load(d, ["person"])
    assert gt.boxes["a.jpg"].xyxy.tolist() == [[10, 20, 30, 40], [0, 0, 4, 8]]
    assert groundtruth.load(d / "a.json", ["person"]).boxes.keys() == {"a.jpg"}


def test_ground_truth_errors(tmp_path):
    """Unknown formats and missing files are one-line configuration errors."""
    bad = tmp_path / "x.json"
    bad.write_text("[]")
    with pytest.raises(ConfigError, match="neither COCO"):
        groundtruth.load(bad, ["person"])
    with pytest.raises(ConfigError, match="no such file"):
        groundtruth.load(tmp_path / "missing.json", ["person"])


def test_export_of_a_named_asset_without_ultralytics_is_one_clear_error(tmp_path):
    """`--weights yolo11n.pt` that is no local file asks Ultralytics to download it; where
    that cannot work (here: no ultralytics in this interpreter) the error says why."""
    import sys
    from pathlib import Path

    from agent.modeltools.export import ExportError, download_named

    steps = Steps("export", 1, stream=io.StringIO(), live=False)
    py = Path(sys.executable)
    with pytest.raises(ExportError) as e:
        download_named(py, Path("yolo11n.pt"), tmp_path, steps)
    assert "yolo11n.pt is not a local file and Ultralytics could not download it" in str(e.value)
    assert "ultralytics" in str(e.value).lower().split("download it", 1)[1]
    # A path (not a bare asset name) or another suffix is simply a missing file.
    for missing in (Path("weights/yolo11n.pt"), Path("yolo11n.onnx")):
        with pytest.raises(ExportError, match="weights file not found"):
            download_named(py, missing, tmp_path, steps)
    # A checkpoint already downloaded is used from the cache without running anything.
    cached = tmp_path / "checkpoints" / "yolo11n.pt"
    cached.write_bytes(b"x")
    assert (
        download_named(Path("/nonexistent/python"), Path("yolo11n.pt"), tmp_path, steps) == cached
    )
