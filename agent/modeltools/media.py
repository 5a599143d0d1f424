"""Real frames for calibration and evaluation: still images, directories, sampled videos."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from agent.cv import cv2
from agent.errors import SourceError

IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff"})
VIDEO_SUFFIXES = frozenset({".avi", ".mp4", ".mkv", ".mov", ".webm", ".m4v", ".mpg", ".mpeg"})


@dataclass(frozen=True, slots=True)
class MediaFile:
    """One input file: a still image, or a video to take ``frames`` evenly spaced frames from."""

    path: Path
    is_video: bool


@dataclass(frozen=True, slots=True)
class MediaFrame:
    """A BGR uint8 frame and where it came from (``index`` is the frame number in a video)."""

    image: npt.NDArray[np.uint8]
    source: Path
    index: int | None

    @property
    def name(self) -> str:
        """Stable id for reports: the file name, plus ``#index`` for a video frame."""
        return self.source.name if self.index is None else f"{self.source.name}#{self.index}"


def collect(inputs: Sequence[str | Path]) -> list[MediaFile]:
    """Expand inputs (files or directories, sorted) into media files; unknown suffixes fail."""
    files: list[MediaFile] = []
    for given in inputs:
        path = Path(given)
        if path.is_dir():
            for child in sorted(path.iterdir()):
                suffix = child.suffix.lower()
                if suffix in IMAGE_SUFFIXES or suffix in VIDEO_SUFFIXES:
                    files.append(MediaFile(child, suffix in VIDEO_SUFFIXES))
        elif path.is_file():
            suffix = path.suffix.lower()
            if suffix not in IMAGE_SUFFIXES and suffix not in VIDEO_SUFFIXES:
                raise SourceError(f"{given}: not an image or video file (by its suffix)")
            files.append(MediaFile(path, suffix in VIDEO_SUFFIXES))
        else:
            raise SourceError(f"{given}: no such file or directory")
    if not files:
        raise SourceError("no images or videos in the inputs: " + ", ".join(map(str, inputs)))
    return files


def video_frame_count(path: Path) -> int:
    cap = cv2.VideoCapture(str(path))
    try:
        if not cap.isOpened():
            raise SourceError(f"{path}: cannot open video")
        return max(0, int(cap.get(cv2.CAP_PROP_FRAME_COUNT)))
    finally:
        cap.release()


def even_indices(count: int, wanted: int) -> list[int]:
    """``wanted`` frame numbers spread evenly over ``count`` frames (all when fewer)."""
    if wanted <= 0 or count <= 0:
        return []
    if wanted >= count:
        return list(range(count))
    step = count / wanted
    return [int(i * step + step / 2) for i in range(wanted)]


def read_image(path: Path) -> npt.NDArray[np.uint8]:
    image = cv2.imread(str(path), cv2.IMREAD_COLOR)
    if image is None:
        raise SourceError(f"{path}: not a readable image")
    out: npt.NDArray[np.uint8] = image
    return out


def read_video_frames(path: Path, indices: Sequence[int]) -> Iterator[MediaFrame]:
    """The frames at ``indices`` (ascending), read sequentially: seeking is unreliable."""
    wanted = sorted(set(indices))
    if not wanted:
        return
    cap = cv2.VideoCapture(str(path))
    if not cap.isOpened():
        raise SourceError(f"{path}: cannot open video")
    try:
        pos = 0
        for index in wanted:
            while pos < index:
                if not cap.grab():
                    return
                pos += 1
            ok, frame = cap.read()
            if not ok:
                return
            pos += 1
            yield MediaFrame(frame, path, index)
    finally:
        cap.release()


def plan(files: Sequence[MediaFile], frames_per_video: int) -> list[tuple[MediaFile, list[int]]]:
    """Which frames to read: one per image, ``frames_per_video`` evenly spaced per video."""
    out: list[tuple[MediaFile, list[int]]] = []
    for f in files:
        if f.is_video:
            out.append((f, even_indices(video_frame_count(f.path), frames_per_video)))
        else:
            out.append((f, [0]))
    return out


def iter_frames(planned: Sequence[tuple[MediaFile, list[int]]]) -> Iterator[MediaFrame]:
    for f, indices in planned:
        if f.is_video:
            yield from read_video_frames(f.path, indices)
        else:
            yield MediaFrame(read_image(f.path), f.path, None)


def count(planned: Sequence[tuple[MediaFile, list[int]]]) -> int:
    return sum(len(indices) for _, indices in planned)
