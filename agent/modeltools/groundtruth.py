"""Ground-truth boxes from a COCO detection JSON or labelme JSON files, keyed by image name."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.errors import ConfigError
from agent.modeltools.ap import Boxes


@dataclass(frozen=True, slots=True)
class GroundTruth:
    """Boxes per image file name (basename), in the model's class ids.

    ``skipped_labels``: annotation labels the model does not have (ignored, counted).
    """

    boxes: dict[str, Boxes]
    skipped_labels: dict[str, int]


def _load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"--labels {path}: not a readable JSON file ({e})") from e


def _finish(rows: dict[str, list[tuple[list[float], str]]], labels: Sequence[str]) -> GroundTruth:
    index = {name: i for i, name in enumerate(labels)}
    skipped: dict[str, int] = {}
    out: dict[str, Boxes] = {}
    for image, items in rows.items():
        xyxy: list[list[float]] = []
        cls: list[int] = []
        for box, label in items:
            if label not in index:
                skipped[label] = skipped.get(label, 0) + 1
                continue
            xyxy.append(box)
            cls.append(index[label])
        out[image] = Boxes.of(xyxy, cls)
    return GroundTruth(out, skipped)


def from_coco(data: dict[str, Any], labels: Sequence[str]) -> GroundTruth:
    """COCO detection format: images, annotations (bbox x,y,w,h), categories. Crowds skipped."""
    try:
        names = {int(c["id"]): str(c["name"]) for c in data["categories"]}
        files = {int(i["id"]): Path(str(i["file_name"])).name for i in data["images"]}
        rows: dict[str, list[tuple[list[float], str]]] = {f: [] for f in files.values()}
        for a in data["annotations"]:
            if a.get("iscrowd"):
                continue
            x, y, w, h = (float(v) for v in a["bbox"])
            label = names[int(a["category_id"])]
            rows[files[int(a["image_id"])]].append(([x, y, x + w, y + h], label))
    except (KeyError, TypeError, ValueError) as e:
        raise ConfigError(f"COCO labels: missing or malformed field ({e})") from e
    return _finish(rows, labels)


def _labelme_one(data: dict[str, Any], fallback: str) -> tuple[str, list[tuple[list[float], str]]]:
    image = Path(str(data.get("imagePath") or fallback)).name
    items: list[tuple[list[float], str]] = []
    for shape in data.get("shapes", []):
        points = shape.get("points") or []
        if len(points) < 2 or shape.get("shape_type", "rectangle") not in (
            "rectangle",
            "polygon",
        ):
            continue
        xs = [float(p[0]) for p in points]
        ys = [float(p[1]) for p in points]
        items.append(([min(xs), min(ys), max(xs), max(ys)], str(shape["label"])))
    return image, items


def load(path: Path, labels: Sequence[str]) -> GroundTruth:
    """COCO JSON file, one labelme JSON file, or a directory of labelme JSON files."""
    if path.is_dir():
        rows: dict[str, list[tuple[list[float], str]]] = {}
        for f in sorted(path.glob("*.json")):
            image, items = _labelme_one(_load_json(f), f.with_suffix(".jpg").name)
            rows[image] = items
        if not rows:
            raise ConfigError(f"--labels {path}: no labelme .json files in the directory")
        return _finish(rows, labels)
    if not path.is_file():
        raise ConfigError(f"--labels {path}: no such file or directory")
    data = _load_json(path)
    if isinstance(data, dict) and "annotations" in data and "images" in data:
        return from_coco(data, labels)
    if isinstance(data, dict) and "shapes" in data:
        image, items = _labelme_one(data, path.with_suffix(".jpg").name)
        return _finish({image: items}, labels)
    raise ConfigError(f"--labels {path}: neither COCO (images/annotations) nor labelme (shapes)")
