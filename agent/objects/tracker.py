"""A ByteTrack-style multi-object tracker for one camera, in numpy.

Per frame, after NMS, in frame order (``ObjectTracker.update``):

1. every track is moved by its constant-velocity model to the frame's time;
2. high-score detections are matched to all tracks (seen and lost) by IoU, and those left
   to the tracks seen last time by centre distance within a walk's reach (``REACH_PER_S``:
   at a low frame rate IoU loses a walker);
3. low-score detections are matched to the tracks seen last time that are still unmatched,
   at a stricter IoU: a person half hidden behind another keeps their track;
4. high-score detections left over start tracks; a track first seen once and missed at
   once is dropped (a one-frame false positive), any other track coasts on its model and
   is dropped when missed for ``lost_s`` seconds of looks (the grace period: a short occlusion
   keeps one object one track).

The motion model is a steady-state Kalman filter (alpha-beta) on the box centre and size,
vectorised over tracks; time is in seconds, so frames that were not looked at (``None``)
only move the tracks and count as no miss. Matching is greedy by IoU, best pair first,
within one class. See docs/objects.md for the measured choice against edgefirst-tracker.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from agent.detect.detections import Detections
from agent.frames import HAIR_S
from agent.objects.geometry import iou_matrix

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
_SCORES_KEPT = 32
#: A track moves when its centre goes faster than this many box heights per second.
MOVING_HEIGHTS = 0.2


#: Across a global change (a scene cut), a track goes on only where a detection of the same
#: class covers its box this well: anything else is a new scene, not the object moved.
CUT_FIT_IOU = 0.5


#: The least time a velocity is measured over: two frames read back to back (a reader
#: catching up) must not give a walker a speed of kilometres a second.
MIN_DT_S = 0.03

#: At a low frame rate IoU loses a walker: 2.5 fps moves them 0.3-0.5 of their height from
#: one frame to the next (IoU under 0.1 with a track seen once, which has no velocity yet,
#: or whose velocity lags), and region mode started 116 tracks on vtest.avi, 53 of them
#: seen once. A high-score detection no track took goes to a track seen last time, none
#: took, whose (predicted) centre is within this many of its heights per second since then
#: (a brisk walk), at most ``REACH_MAX``, of a height like its own: nearest first.
REACH_PER_S = 1.5
REACH_MAX = 1.0
REACH_HEIGHT = 0.7  # ... from this to 1 / this times the track's height


@dataclass(frozen=True, slots=True)
class TrackerParams:
    """Tracker thresholds (settings ``objects.*``)."""

    high_score: float = 0.5
    new_track_score: float = 0.5
    # match_iou, alpha, beta: chosen on bench/tracking.py's clips at 10, 5 and 3.3 fps
    # (docs/objects.md, "Tracker choice"): fewer ID switches and events per person there
    # than the first defaults (0.2, 0.7, 0.2).
    match_iou: float = 0.1
    low_match_iou: float = 0.4
    lost_s: float = 2.0
    alpha: float = 0.6
    beta: float = 0.15

    def __post_init__(self) -> None:
        for name in ("high_score", "new_track_score", "match_iou", "low_match_iou"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"TrackerParams.{name} must be in 0..1, got {value}")
        if self.lost_s <= 0:
            raise ValueError(f"TrackerParams.lost_s must be > 0, got {self.lost_s}")
        if not (0.0 < self.alpha <= 1.0 and 0.0 <= self.beta <= 1.0):
            raise ValueError("TrackerParams.alpha must be in (0, 1] and beta in [0, 1]")


@dataclass(frozen=True, slots=True)
class Track:
    """One tracked object as of one frame (source-image pixels)."""

    track_id: int
    class_id: int
    label: str
    xyxy: tuple[float, float, float, float]
    score: float
    seen: bool
    hits: int
    first_seen_t: float
    last_seen_t: float
    median_score: float
    moving: bool = False  # its centre moves more than MOVING_HEIGHTS box heights per second
    velocity: tuple[float, float] = (0.0, 0.0)  # its centre's, pixels per second


@dataclass(frozen=True, slots=True)
class TrackUpdate:
    """What one frame did to the tracks.

    ``track_ids``: per detection of the frame (in its order), the track it belongs to, or
    -1. ``tracks``: every live track (seen this frame or coasting). ``removed``: ids of
    tracks dropped by this frame; ``cut``: those of them ended by a global change.
    """

    track_ids: I64
    tracks: tuple[Track, ...]
    removed: tuple[int, ...]
    cut: tuple[int, ...] = ()


def _cxcywh(xyxy: npt.NDArray[np.floating]) -> F64:
    b = np.asarray(xyxy, np.float64).reshape(-1, 4)
    return np.stack(
        [
            (b[:, 0] + b[:, 2]) * 0.5,
            (b[:, 1] + b[:, 3]) * 0.5,
            b[:, 2] - b[:, 0],
            b[:, 3] - b[:, 1],
        ],
        axis=1,
    )


def _xyxy(cxcywh: F64) -> F64:
    c = cxcywh
    half = c[:, 2:] * 0.5
    return np.concatenate([c[:, :2] - half, c[:, :2] + half], axis=1)


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    n = len(ordered)
    mid = n // 2
    return ordered[mid] if n % 2 else (ordered[mid - 1] + ordered[mid]) * 0.5


def greedy_match(similarity: F64, threshold: float) -> list[tuple[int, int]]:
    """(row, col) pairs, best similarity first, each row and column used once, >= threshold."""
    if similarity.size == 0:
        return []
    rows, cols = np.nonzero(similarity >= threshold)
    if rows.size == 0:
        return []
    order = np.argsort(-similarity[rows, cols], kind="stable")
    used_r: set[int] = set()
    used_c: set[int] = set()
    pairs: list[tuple[int, int]] = []
    for r, c in zip(rows[order].tolist(), cols[order].tolist(), strict=True):
        if r not in used_r and c not in used_c:
            used_r.add(r)
            used_c.add(c)
            pairs.append((r, c))
    return pairs


class ObjectTracker:
    """Tracks of one camera. Not thread-safe: fed in frame order by one thread."""

    def __init__(self, params: TrackerParams | None = None) -> None:
        self.params = params or TrackerParams()
        self._next_id = 1
        self._t: float | None = None
        self._ids = np.zeros((0,), np.int64)
        self._box = np.zeros((0, 4), np.float64)  # cx, cy, w, h at self._t
        self._vel = np.zeros((0, 4), np.float64)  # per second
        self._cls = np.zeros((0,), np.int64)
        self._last_seen = np.zeros((0,), np.float64)
        self._first_seen = np.zeros((0,), np.float64)
        self._hits = np.zeros((0,), np.int64)
        self._unseen = np.zeros((0,), np.float64)  # seconds missed, counted on looks only
        self._looked_t = np.zeros((0,), np.float64)  # when each track was last looked at
        self._seen_last = np.zeros((0,), np.bool_)
        self._labels: list[str] = []
        self._scores: list[list[float]] = []

    def __len__(self) -> int:
        return len(self._ids)

    def reset(self) -> list[int]:
        """Drop every track (a camera reconnect, say); returns their ids."""
        ids: list[int] = self._ids.tolist()
        self._keep(np.zeros((len(ids),), np.bool_))
        self._seen_last = np.zeros((0,), np.bool_)
        self._t = None
        return ids

    def _predict(self, t: float) -> None:
        if self._t is not None and len(self._ids):
            dt = max(0.0, t - self._t)
            self._box = self._box + self._vel * dt
            self._box[:, 2:] = np.maximum(self._box[:, 2:], 1.0)
        self._t = t

    def update(
        self,
        dets: Detections | None,
        t: float,
        looked: Sequence[tuple[float, float, float, float]] | None = None,
        image_wh: tuple[int, int] | None = None,
        *,
        cut: bool = False,
    ) -> TrackUpdate:
        """Advance to time ``t`` (seconds, monotonic) with this frame's detections.

        ``dets=None``: the frame was not looked at; tracks only move, nothing is missed.
        ``looked``: the regions the detector saw (None: the whole frame); a track whose
        centre lies outside all of them was not looked at, and is not missed either,
        unless its centre has left the image (``image_wh``): then every look misses it.
        ``cut``: most of the view changed at once (``SceneWatch``): only tracks that a
        detection covers in place (``CUT_FIT_IOU``) go on; the others end (``TrackUpdate.cut``)
        and the detections that fit no track start new ones.
        """
        if self._t is not None and t < self._t:
            t = self._t  # a clock step back must not run the model backwards
        self._predict(t)
        if dets is None and not cut:
            return self._result(np.zeros((0,), np.int64), t, removed=[])
        if dets is None:
            dets = Detections.empty()
        p = self.params
        n = len(dets)
        track_ids = np.full((n,), -1, np.int64)
        det_box = _cxcywh(dets.xyxy)
        score = dets.score.astype(np.float64)
        det_cls = dets.class_id.astype(np.int64)
        pairs = self._associate(dets.xyxy, det_box, det_cls, score)
        if cut:
            pairs = self._fitting(pairs, dets.xyxy)
        matched_d = {d for _, d in pairs}
        seen_now = np.zeros((len(self._ids),), np.bool_)
        if pairs:
            ti = np.array([a for a, _ in pairs], np.int64)
            di = np.array([b for _, b in pairs], np.int64)
            self._correct(ti, det_box[di], t)
            self._hits[ti] += 1
            self._last_seen[ti] = t
            seen_now[ti] = True
            track_ids[di] = self._ids[ti]
            for a, b in pairs:
                self._labels[a] = dets.labels[b]
                kept = self._scores[a]
                kept.append(float(score[b]))
                if len(kept) > _SCORES_KEPT:
                    del kept[0]
        # Drop one-frame tracks missed now, and tracks lost for longer than the grace.
        # Time counts as missed only between looks: a frame not looked at is no miss.
        # A miss counts the time since that track was last looked at, at most half the
        # grace: a still object re-checked now and then is lost after three missed
        # re-checks, never after one (a parked car's single false negative).
        in_view = self._in_view(looked, image_wh)
        missed = ~seen_now & in_view
        since = np.where(in_view, np.minimum(t - self._looked_t, 0.5 * p.lost_s), 0.0)
        self._unseen = np.where(seen_now, 0.0, self._unseen + since)
        self._looked_t = np.where(in_view | seen_now, t, self._looked_t)
        gone = (missed & (self._hits <= 1)) | (self._unseen > p.lost_s + HAIR_S)
        cut_ids: list[int] = []
        if cut:
            cut_ids = self._ids[~seen_now & ~gone].tolist()
            gone |= ~seen_now
        removed = self._ids[gone].tolist()
        self._keep(~gone)
        self._seen_last = seen_now[~gone]
        for j in range(n):
            if j not in matched_d and score[j] >= p.new_track_score:
                track_ids[j] = self._new(
                    det_box[j], int(det_cls[j]), dets.labels[j], float(score[j]), t
                )
        return self._result(track_ids, t, removed, cut_ids)

    def _fitting(
        self, pairs: list[tuple[int, int]], xyxy: npt.NDArray[np.float32]
    ) -> list[tuple[int, int]]:
        """The pairs whose detection covers the track's box in place (across a cut)."""
        if not pairs:
            return pairs
        boxes = _xyxy(self._box)
        ious = [iou_matrix(boxes[a : a + 1], xyxy[b : b + 1])[0, 0] for a, b in pairs]
        return [pair for pair, iou in zip(pairs, ious, strict=True) if iou >= CUT_FIT_IOU]

    def _associate(
        self, xyxy: npt.NDArray[np.float32], det_box: F64, det_cls: I64, score: F64
    ) -> list[tuple[int, int]]:
        """(track index, detection index): high scores to every track, then low scores to
        the tracks seen last time, at a stricter IoU."""
        p = self.params
        if not len(self._ids) or not len(score):
            return []
        sim = iou_matrix(_xyxy(self._box), xyxy)
        sim = np.where(self._cls[:, None] == det_cls[None, :], sim, 0.0)
        high = np.nonzero(score >= p.high_score)[0]
        low = np.nonzero(score < p.high_score)[0]
        pairs: list[tuple[int, int]] = []
        if high.size:
            pairs += [(r, int(high[c])) for r, c in greedy_match(sim[:, high], p.match_iou)]
            pairs += self._reach(det_box, det_cls, high, pairs)
        taken = {r for r, _ in pairs}
        rows = np.array(
            [i for i in range(len(self._ids)) if i not in taken and self._seen_last[i]], np.int64
        )
        if low.size and rows.size:
            found = greedy_match(sim[np.ix_(rows, low)], p.low_match_iou)
            pairs += [(int(rows[r]), int(low[c])) for r, c in found]
        return pairs

    def _reach(
        self, det_box: F64, det_cls: I64, high: I64, pairs: list[tuple[int, int]]
    ) -> list[tuple[int, int]]:
        """Pairs of the high-score detections ``high`` that no track took and the tracks
        seen last time that none took, by centre distance (``REACH_PER_S``), nearest first.
        Tracks lost for a while are left to IoU: someone reappearing from behind another
        is no guess (bench/tracking.py: pairing those too took its main clip's IDF1 at
        5 fps from 0.965 to 0.841)."""
        # Most frames IoU took every high-score detection: nothing to build then.
        taken_d = {c for _, c in pairs}
        cols = np.array([j for j in high.tolist() if j not in taken_d], np.int64)
        if not cols.size or self._t is None:
            return []
        taken_t = {r for r, _ in pairs}
        rows = np.array(
            [i for i in np.nonzero(self._seen_last)[0].tolist() if i not in taken_t], np.int64
        )
        if not rows.size:
            return []
        tb, db = self._box[rows], det_box[cols]
        h = np.maximum(tb[:, 3], 1.0)[:, None]
        dist = np.hypot(tb[:, 0, None] - db[None, :, 0], tb[:, 1, None] - db[None, :, 1]) / h
        reach = np.minimum(REACH_MAX, REACH_PER_S * (self._t - self._last_seen[rows]))[:, None]
        ratio = db[None, :, 3] / h
        ok = (dist <= reach) & (ratio >= REACH_HEIGHT) & (ratio <= 1.0 / REACH_HEIGHT)
        ok &= self._cls[rows, None] == det_cls[None, cols]
        near = np.where(ok, 1.0 + REACH_MAX - dist, 0.0)  # all pairs within reach are >= 1
        return [(int(rows[r]), int(cols[c])) for r, c in greedy_match(near, 1.0)]

    def _in_view(
        self,
        looked: Sequence[tuple[float, float, float, float]] | None,
        image_wh: tuple[int, int] | None,
    ) -> npt.NDArray[np.bool_]:
        """Tracks whose centre lies in a looked-at region (all of them for a full look),
        or outside the image (it left)."""
        n = len(self._ids)
        if looked is None:
            return np.ones((n,), np.bool_)
        cx, cy = self._box[:, 0], self._box[:, 1]
        inside = np.zeros((n,), np.bool_)
        for x1, y1, x2, y2 in looked:
            inside |= (cx >= x1) & (cx <= x2) & (cy >= y1) & (cy <= y2)
        if image_wh is not None:
            w, h = image_wh
            inside |= (cx < 0) | (cx > w) | (cy < 0) | (cy > h)
        return inside

    def _correct(self, idx: I64, z: F64, t: float) -> None:
        """The filter's correction of tracks ``idx`` by their measured boxes ``z``."""
        p = self.params
        r = z - self._box[idx]
        dt = np.maximum(t - self._last_seen[idx], MIN_DT_S)[:, None]
        self._box[idx] = self._box[idx] + p.alpha * r
        vel = self._vel[idx] + p.beta * r / dt
        vel[:, 2:] *= 0.5  # sizes change slowly: damp their velocity
        # A track's second sighting sets its box and centre velocity outright. Started at
        # rest, the filter takes frames at beta to find a walker's speed, and a fast or
        # low-frame-rate track that is missed once meanwhile is lost behind its detections.
        second = self._hits[idx] == 1
        if second.any():
            self._box[idx[second]] = z[second]
            vel[second, :2] = r[second, :2] / dt[second]
            vel[second, 2:] = 0.0
        self._vel[idx] = vel

    def _new(self, box: F64, cls: int, label: str, score: float, t: float) -> int:
        tid = self._next_id
        self._next_id += 1
        self._ids = np.append(self._ids, tid)
        self._box = np.vstack([self._box, box[None, :]])
        self._vel = np.vstack([self._vel, np.zeros((1, 4))])
        self._cls = np.append(self._cls, cls)
        self._last_seen = np.append(self._last_seen, t)
        self._first_seen = np.append(self._first_seen, t)
        self._hits = np.append(self._hits, 1)
        self._unseen = np.append(self._unseen, 0.0)
        self._looked_t = np.append(self._looked_t, t)
        self._seen_last = np.append(self._seen_last, True)
        self._labels.append(label)
        self._scores.append([float(score)])
        return tid

    def _keep(self, mask: npt.NDArray[np.bool_]) -> None:
        self._ids = self._ids[mask]
        self._box = self._box[mask]
        self._vel = self._vel[mask]
        self._cls = self._cls[mask]
        self._last_seen = self._last_seen[mask]
        self._first_seen = self._first_seen[mask]
        self._hits = self._hits[mask]
        self._unseen = self._unseen[mask]
        self._looked_t = self._looked_t[mask]
        keep = mask.tolist()
        self._labels = [x for x, k in zip(self._labels, keep, strict=True) if k]
        self._scores = [x for x, k in zip(self._scores, keep, strict=True) if k]

    def _result(
        self, track_ids: I64, t: float, removed: list[int], cut: list[int] | None = None
    ) -> TrackUpdate:
        boxes = _xyxy(self._box).tolist()
        ids, cls, hits = self._ids.tolist(), self._cls.tolist(), self._hits.tolist()
        first, last = self._first_seen.tolist(), self._last_seen.tolist()
        speed = np.hypot(self._vel[:, 0], self._vel[:, 1])
        moving = (speed > MOVING_HEIGHTS * np.maximum(self._box[:, 3], 1.0)).tolist()
        vel = self._vel[:, :2].tolist()
        tracks = tuple(
            Track(
                track_id=ids[i],
                class_id=cls[i],
                label=self._labels[i],
                xyxy=(boxes[i][0], boxes[i][1], boxes[i][2], boxes[i][3]),
                score=self._scores[i][-1],
                seen=last[i] == t,
                hits=hits[i],
                first_seen_t=first[i],
                last_seen_t=last[i],
                median_score=_median(self._scores[i]),
                moving=moving[i],
                velocity=(vel[i][0], vel[i][1]),
            )
            for i in range(len(ids))
        )
        return TrackUpdate(track_ids, tracks, tuple(removed), tuple(cut or ()))
