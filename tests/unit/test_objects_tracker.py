"""The tracker: ids kept through motion, crossings and short occlusions; false positives dropped."""

from __future__ import annotations

import numpy as np
import pytest

from agent.detect.detections import Detections
from agent.objects.tracker import ObjectTracker, TrackerParams, greedy_match


def dets(*boxes: tuple[float, float, float, float, float], cls: int = 0) -> Detections:
    """Detections from (x1, y1, x2, y2, score) tuples."""
    arr = np.array([b[:4] for b in boxes], np.float32).reshape(-1, 4)
    score = np.array([b[4] for b in boxes], np.float32)
    n = len(boxes)
    return Detections(arr, score, np.full(n, cls, np.int32), ("person",) * n)


def walker(x0: float, vx: float, i: int, score: float = 0.9) -> tuple[float, ...]:
    x = x0 + vx * i
    return (x, 100.0, x + 40.0, 200.0, score)


def test_one_walker_keeps_one_id():
    """A person walking steadily is one track from start to end."""
    tr = ObjectTracker()
    ids = {int(tr.update(dets(walker(0, 8, i)), i / 10).track_ids[0]) for i in range(50)}
    assert ids == {1}


def test_a_track_reports_its_centre_velocity():
    """``Track.velocity`` is the centre's, in pixels per second (what region mode moves a
    walker's last look on by between its looks); a still object's is about 0."""
    tr = ObjectTracker()
    for i in range(20):
        u = tr.update(dets(walker(0, 8, i), (300, 100, 340, 200, 0.9)), i / 10)
    by_id = {t.track_id: t for t in u.tracks}
    vx, vy = by_id[1].velocity
    assert vx == pytest.approx(80.0, rel=0.05) and vy == pytest.approx(0.0, abs=1.0)
    assert by_id[1].moving and not by_id[2].moving
    assert by_id[2].velocity == pytest.approx((0.0, 0.0), abs=1.0)


def test_a_young_fast_track_missed_once_keeps_its_id():
    """A fast walker (half a box width a frame) seen twice, missed once, then seen at low
    scores twice (which only a track seen the frame before takes) is one track throughout:
    its velocity comes from its first two sightings, so it does not lag behind."""
    tr = ObjectTracker()
    ids = set()
    for i in range(12):
        if i == 2:
            tr.update(dets(), i / 10)
            continue
        score = 0.45 if i in (3, 4) else 0.9
        u = tr.update(dets(walker(0, 20, i, score)), i / 10)
        ids |= {int(x) for x in u.track_ids if x >= 0}
    assert ids == {1}


def test_frames_read_back_to_back_give_no_wild_speed():
    """Two sightings 1 ms apart (a reader catching up) do not fling the track away."""
    tr = ObjectTracker()
    tr.update(dets(walker(0, 8, 0)), 0.0)
    tr.update(dets(walker(0, 8, 1)), 0.001)
    u = tr.update(dets(walker(0, 8, 2)), 0.1)
    assert list(u.track_ids) == [1]


def test_a_walker_at_a_low_frame_rate_keeps_one_id():
    """2.5 frames a second: a walker 100 px tall moves 45 px (0.45 of their height) from one
    frame to the next, so their boxes barely overlap (IoU under 0.1, no velocity yet after
    one sighting); they are one track, not a new one every frame. Irregular steps too."""
    tr = ObjectTracker()
    ids = set()
    for i, x in enumerate([0.0, 45.0, 90.0, 150.0, 190.0, 240.0]):
        u = tr.update(dets((x, 100.0, x + 40.0, 200.0, 0.9)), i / 2.5)
        ids |= {int(t) for t in u.track_ids}
    assert ids == {1}


def test_a_far_or_unlike_detection_starts_its_own_track():
    """Beyond a walk's reach (1.5 heights a second since the track was seen), or half the
    track's height, a detection no IoU matched is someone else: a track of its own."""
    for box in ((100.0, 100.0, 140.0, 200.0), (50.0, 150.0, 70.0, 200.0)):  # 1 h away; half
        tr = ObjectTracker()
        tr.update(dets((0.0, 100.0, 40.0, 200.0, 0.9)), 0.0)
        u = tr.update(dets((*box, 0.9)), 0.4)
        assert list(u.track_ids) == [2], box


def test_a_lost_track_is_not_taken_back_by_distance():
    """A track missed last time (hidden) gets no detection by distance alone, only by IoU:
    whoever appears beside where it was is not guessed to be it."""
    tr = ObjectTracker()
    for i in range(3):
        tr.update(dets(walker(0, 0, i)), i / 2.5)
    tr.update(dets(), 3 / 2.5)  # hidden
    u = tr.update(dets((45.0, 100.0, 85.0, 200.0, 0.9)), 4 / 2.5)  # IoU 0, 0.45 h away
    assert list(u.track_ids) == [2]


def test_two_walkers_crossing_keep_their_ids():
    """Two people passing each other (boxes overlapping for a while) keep their own ids."""
    tr = ObjectTracker()
    seen: dict[int, set[int]] = {0: set(), 1: set()}
    for i in range(60):
        a, b = walker(0, 10, i), walker(590, -10, i)
        u = tr.update(dets(a, b), i / 10)
        seen[0].add(int(u.track_ids[0]))
        seen[1].add(int(u.track_ids[1]))
    assert len(seen[0]) == 1 and len(seen[1]) == 1 and seen[0] != seen[1]


@pytest.mark.parametrize(("gap_frames", "same"), [(5, True), (15, True), (35, False)])
def test_occlusion_within_grace_keeps_the_id(gap_frames, same):
    """Unseen for less than lost_s (2 s): same id on return; longer: a new track."""
    tr = ObjectTracker(TrackerParams(lost_s=2.0))
    first = None
    for i in range(10):
        first = int(tr.update(dets(walker(0, 5, i)), i / 10).track_ids[0])
    for i in range(10, 10 + gap_frames):
        tr.update(dets(), i / 10)
    i = 10 + gap_frames
    back = int(tr.update(dets(walker(0, 5, i)), i / 10).track_ids[0])
    assert (back == first) is same


def test_frames_not_looked_at_are_no_misses():
    """None (no inference this frame): a still person is carried for longer than lost_s."""
    tr = ObjectTracker(TrackerParams(lost_s=0.5))
    tr.update(dets(walker(0, 0, 0)), 0.0)
    tr.update(dets(walker(0, 0, 1)), 0.1)
    for k in range(2, 30):
        assert len(tr.update(None, k / 10).tracks) == 1
    assert int(tr.update(dets(walker(0, 0, 30)), 3.0).track_ids[0]) == 1


def test_one_frame_false_positive_is_dropped():
    """A detection seen once and never again leaves no track behind."""
    tr = ObjectTracker()
    tr.update(dets((300, 300, 340, 380, 0.9)), 0.0)
    u = tr.update(dets(), 0.1)
    assert u.tracks == () and u.removed == (1,)


def test_low_score_detection_keeps_a_track_alive():
    """The second pass: a half-hidden person (low score) stays on their track."""
    tr = ObjectTracker(TrackerParams(high_score=0.5, new_track_score=0.5))
    for i in range(5):
        tr.update(dets(walker(0, 5, i)), i / 10)
    u = tr.update(dets(walker(0, 5, 5, score=0.3)), 0.5)
    assert int(u.track_ids[0]) == 1 and u.tracks[0].seen


def test_low_score_detection_starts_no_track():
    """A low-score detection nobody was tracking is not a new track."""
    tr = ObjectTracker()
    u = tr.update(dets((0, 0, 10, 10, 0.3)), 0.0)
    assert u.track_ids.tolist() == [-1] and len(tr) == 0


def test_classes_never_match_each_other():
    """A box of another class at the same place is another track."""
    tr = ObjectTracker()
    tr.update(dets((0, 0, 50, 100, 0.9), cls=0), 0.0)
    u = tr.update(dets((0, 0, 50, 100, 0.9), cls=1), 0.1)
    assert int(u.track_ids[0]) == 2


@pytest.mark.parametrize(
    ("sim", "threshold", "pairs"),
    [
        ([[0.9, 0.8], [0.85, 0.1]], 0.2, [(0, 0)]),  # row 1's best is taken; 0.1 < 0.2
        ([[0.9, 0.8], [0.85, 0.3]], 0.2, [(0, 0), (1, 1)]),
        ([[0.1]], 0.2, []),
        (np.zeros((0, 3)), 0.2, []),
    ],
)
def test_greedy_match(sim, threshold, pairs):
    """Best pair first, each row and column once, nothing under the threshold."""
    assert greedy_match(np.asarray(sim, float), threshold) == pairs


def test_outside_the_looked_regions_is_no_miss_but_leaving_the_image_is():
    """Regions elsewhere: a still track is kept; one whose centre left the image is lost."""
    tr = ObjectTracker(TrackerParams(lost_s=1.0))
    elsewhere = [(600.0, 0.0, 800.0, 200.0)]
    for i in range(5):
        tr.update(dets((100, 100, 140, 200, 0.9), (700, 100, 740, 200, 0.9)), i / 10)
    for k in range(5, 60):
        u = tr.update(dets((700, 100, 740, 200, 0.9)), k / 10, elsewhere, (800, 600))
    assert sorted(t.track_id for t in u.tracks) == [1, 2]
    tr2 = ObjectTracker(TrackerParams(lost_s=1.0))
    for i in range(6):
        tr2.update(dets(walker(700, 40, i)), i / 10)  # walks right, out of an 800 px image
    for k in range(6, 40):
        u = tr2.update(dets(), k / 10, [(0.0, 0.0, 100.0, 100.0)], (800, 600))
    assert u.tracks == ()


def test_a_still_track_is_lost_after_missed_rechecks():
    """Looked at every 2 s and not found: kept through two missed re-checks, lost at the
    third (a miss counts at most half of lost_s)."""
    tr = ObjectTracker(TrackerParams(lost_s=2.0))
    for i in range(5):
        tr.update(dets((100, 100, 140, 200, 0.9)), i / 10)
    here = [(0.0, 0.0, 300.0, 300.0)]
    alive = [bool(tr.update(dets(), t, here, (800, 600)).tracks) for t in (2.5, 4.5, 6.5, 8.5)]
    assert alive == [True, True, False, False]


@pytest.mark.parametrize("origin", [0.0, 1740.575504371, 86400.3])
@pytest.mark.parametrize("lost_s", [1.0, 2.0])
def test_a_missed_track_ends_on_the_same_frame_on_any_clocks_origin(origin: float, lost_s: float):
    """Missed on every look, a track ends once more than ``lost_s`` went by unseen: on the
    look after the one ``lost_s`` after its last find (here the last find on each of the
    first 40 frames), whether the recording's time starts at 0 (``edge-agent track``) or at
    the capture clock's reading (``run``). Before, the sum of its misses' periods fell
    either side of ``lost_s`` (8 of these 240 ended a frame early), and ``track`` and
    ``run`` could end it a frame apart."""
    here = [(0.0, 0.0, 300.0, 300.0)]
    for j in range(1, 41):
        tr = ObjectTracker(TrackerParams(lost_s=lost_s))
        for i in range(j + 1):
            tr.update(dets((100, 100, 140, 200, 0.9)), origin + i / 10, here, (800, 600))
        ended = next(
            k
            for k in range(j + 1, 200)
            if not tr.update(dets(), origin + k / 10, here, (800, 600)).tracks
        )
        assert ended == j + round(lost_s * 10) + 1, (j, ended)
