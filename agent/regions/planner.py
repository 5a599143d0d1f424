"""Which parts of a frame the detector looks at, frame by frame, for one camera.

Every frame gets regions (rectangles, each with the scale it is looked at) around:

- **tracked objects that move**: a rectangle around where the tracker puts each one, with
  a margin of ``margin`` times its height, scaled so it stands ``object_px`` model pixels
  tall (magnified at most ``input / region_px``: 2x by default); a still object that
  nothing moves at (``TrackHint.steady``, no motion in its box) is looked at every
  ``recheck_s`` and stands in between (``Plan.held``: its last look's box is the frame's:
  the same pixels give the same box), any other still object every frame; a steady
  walker under ``plain`` tall every other frame (at least every ``predict_s``), its last
  own look moved on by its velocity standing in between;
- **motion** that those rectangles do not hold (someone new): each such moving blob, with a
  margin, scaled by how tall the objects moving there are (the tracks in the blob say,
  else the blob does); of a blob partly inside them (walkers and someone beside them,
  joined into one blob), only what moves outside them, a little grown toward them, so
  the walkers are not looked at twice; a blob too big for one model input at that scale
  is cut into overlapping pieces, so a group of small people stays magnified;
- **a sweep**: one square of a grid over the whole frame every ``sweep_s`` seconds, in turn,
  so nothing small and still is missed forever (someone far away standing since before the
  agent started); every other pass, squares centred on that grid's seams (another crop
  for someone a square misses); on a busy frame (other regions to look at) a due square
  waits for a quiet one, at most ``sweep_wait_s``;
- **a coarse look** (``Plan.coarse``): the whole frame in one input of the model best at
  whole frames, every ``sweep_s`` while anything ``plain`` of the frame tall is in view
  that no coarse look has seen yet (never put off; at once when such a thing comes into
  view and the last coarse look is older), every ``quiet`` x ``sweep_s`` while only small
  things and big ones it has seen (``confirmed``: someone waiting at the door or walking
  past, held by their own regions, until a coarse look misses them) are, after a scene cut
  (``cut``) and at once when a moving blob is big
  (its objects ``big`` of the frame tall or more, at most every ``big_s``), so no big
  person waits longer than ``sweep_s``: one standing close since the start, one coming
  close, one in a scene the camera cut to; and the frame after a big tracked object's
  region missed it (someone cut by the frame's edge, a sliver the shrunk region does not
  show well), so the coarse look holds them while the regions cannot. A big blob's own
  region is the blob whole, shrunk as it needs, never pieces (pieces of a near person are
  a head, an arm).

Overlapping regions merge where the merged one costs no more model pixels than the two
(``merge_growth``) and keeps most of their magnification; at most ``max_regions`` per frame,
the most urgent first (motion, moving objects, re-checks, then the sweep, which waits for a
quieter frame). ``agent.regions.pack`` then puts a frame's regions side by side into as few
model inputs as it can. A frame with no motion, no moving object and no region due skips
inference altogether.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from agent.frames import HAIR_S, lasted

XyXy = tuple[float, float, float, float]


@dataclass(frozen=True, slots=True)
class PlannerParams:
    region_px: int | None = None  # source px that fill the input at most magnification
    object_px: float = 80.0  # an object is scaled to stand this many model pixels tall
    near_px: float = 120.0  # ... a big one (``big``: someone near), shrunk to this
    margin: float = 0.15  # context around an object, share of its height, each side
    blob_margin: float = 0.1  # context around a moving blob, share of its objects' height
    covered: float = 0.8  # a blob this much inside tracked objects' regions adds none
    rest_min: float = 0.3  # what moves outside them: shorter than this x tall is a limb
    rest_grow: float = 0.3  # ... else grown toward them by this x tall (someone cut by one)
    max_regions: int = 12
    merge_growth: float = 1.05  # merge two regions while the result costs at most this x
    keep_scale: float = 0.75  # ... and keeps this share of the larger magnification
    merged_share: float = 0.6  # ... and stays this share of the input wide and tall (packs)
    contained: float = 1.15  # a merge that grows the larger region at most this x is free
    recheck_s: float = 1.0  # a steady still object's region every this (0: every frame)
    predict_s: float = 0.15  # ... a steady walker's (under ``plain`` tall) at least every
    # this and every other frame at most (0: every frame); in between, its last own look
    # moved on by its track's velocity stands in
    sweep_s: float = 1.0
    big: float = 0.25  # a blob whose objects are this share of the frame tall is big
    plain: float = 0.2  # people this share of the frame tall the coarse look finds plainly:
    # a region's box this tall is kept only where a coarse box or a track holds it
    big_s: float = 0.25  # ... and calls a coarse look at most this often
    quiet: float = 4.0  # with nothing ``plain`` tall in view, a coarse look every this x sweep_s
    sweep_wait_s: float = 2.0  # a busy frame puts a due sweep square off by up to this


@dataclass(frozen=True, slots=True)
class TrackHint:
    """What the planner needs of a tracked object: its box, whether it moves, when seen,
    and whether the last look found it (``seen``). A negative id is a seed: a box of the
    last look that no track took (too low a score to start one), looked at again if big."""

    xyxy: XyXy
    moving: bool
    last_seen_t: float
    seen: bool = True
    doubted: bool = False  # big, in view of the last coarse look, and not seen by it
    confirmed: bool = False  # seen by a coarse look while ``plain`` tall, not missed since
    steady: bool = False  # its last look found it plainly and may stand in for the next
    velocity: tuple[float, float] = (0.0, 0.0)  # its centre's, pixels per second

    def shift(self, t: float) -> tuple[float, float]:
        """How far it has gone since it was last seen, at ``t`` (0 for a still one)."""
        if not self.moving:
            return 0.0, 0.0
        dt = t - self.last_seen_t
        return self.velocity[0] * dt, self.velocity[1] * dt


@dataclass(frozen=True, slots=True)
class Plan:
    """Regions (source pixels, xyxy, inside the image) for one frame; () = skip inference.

    ``scales``: per region, how much it is magnified into the model input (1: as is).
    """

    regions: tuple[XyXy, ...]
    reasons: tuple[str, ...]  # motion, track, recheck, sweep (per region, merged: joined)
    scales: tuple[float, ...]
    coarse: bool = False  # the whole frame too, in one input of the whole-frame model
    held: tuple[int, ...] = ()  # steady tracks not looked at: their last look stands in
    # The coarse look is for someone near (``RegionPlanner._coarse_due``), not for the scene
    # (the first frame, a cut, the quiet look): a frame that fits the model is seen at its
    # own scale (``whole_sheet``'s ``near``).
    near: bool = False

    @property
    def empty(self) -> bool:
        """Nothing to look at: the frame skips inference."""
        return not self.regions and not self.coarse


@dataclass(frozen=True, slots=True)
class Wanted:
    """A region the planner wants this frame: where, at which scale, and why."""

    rect: XyXy
    scale: float
    why: str


def around(box: XyXy, margin: float, least: float, image_wh: tuple[int, int]) -> XyXy:
    """``box`` grown by ``margin`` each side, at least ``least`` wide and tall, clipped to
    the image (shifted back in where it sticks out, as far as the image allows)."""
    w, h = image_wh
    out = []
    for lo, hi, size in ((box[0], box[2], w), (box[1], box[3], h)):
        a, b = lo - margin, hi + margin
        if b - a < least:
            mid = (a + b) / 2
            a, b = mid - least / 2, mid + least / 2
        if b - a >= size:
            a, b = 0.0, float(size)
        elif a < 0:
            a, b = 0.0, b - a
        elif b > size:
            a, b = a - (b - size), float(size)
        out.append((a, b))
    return (out[0][0], out[1][0], out[0][1], out[1][1])


def _union(a: XyXy, b: XyXy) -> XyXy:
    return (min(a[0], b[0]), min(a[1], b[1]), max(a[2], b[2]), max(a[3], b[3]))


def overlaps(a: XyXy, b: XyXy) -> bool:
    """Whether boxes ``a`` and ``b`` (xyxy) share any area."""
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def _within(box: XyXy, rects: Sequence[XyXy]) -> bool:
    """Whether ``box`` lies wholly inside one of ``rects``."""
    return any(
        r[0] <= box[0] and r[1] <= box[1] and box[2] <= r[2] and box[3] <= r[3] for r in rects
    )


def _alone(box: XyXy, rect: XyXy, motion: Sequence[XyXy], covered: float) -> bool:
    """Whether all motion at ``box`` is its own: each moving blob that touches it lies
    ``covered`` inside ``rect`` (its region). A blob that runs on past it is someone
    else too, or more of it than its box holds (a piece of a near person)."""
    return all(_inside_share(b, [rect]) >= covered for b in motion if overlaps(box, b))


def region_pixels(r: XyXy, scale: float) -> float:
    """Model-input pixels a region takes at its scale."""
    return (r[2] - r[0]) * (r[3] - r[1]) * scale * scale


def _sizes(w: Wanted) -> tuple[float, float]:
    """A wanted region's width and height in model-input pixels."""
    return (w.rect[2] - w.rect[0]) * w.scale, (w.rect[3] - w.rect[1]) * w.scale


def _fits(r: XyXy, scale: float, input_px: float) -> bool:
    return max(r[2] - r[0], r[3] - r[1]) * scale <= input_px + 0.5


def pieces(rect: XyXy, scale: float, input_px: float, overlap: float) -> list[XyXy]:
    """``rect`` cut into overlapping pieces that each fit the model input at ``scale``
    (``overlap`` source pixels shared by neighbours, so an object cut by one is whole in
    the next); one piece when it fits."""
    most = input_px / scale
    spans = []
    for lo, hi in ((rect[0], rect[2]), (rect[1], rect[3])):
        length = hi - lo
        if length <= most:
            spans.append([(lo, hi)])
            continue
        ov = min(overlap, most / 2)
        n = math.ceil((length - ov) / (most - ov))
        step = (length - most) / (n - 1)
        spans.append([(lo + k * step, lo + k * step + most) for k in range(n)])
    return [(x[0], y[0], x[1], y[1]) for y in spans[1] for x in spans[0]]


def sweep_grid(image_wh: tuple[int, int], side: float, between: bool = False) -> list[XyXy]:
    """Squares of ``side`` covering the image with some overlap, row by row; ``between``:
    the squares centred on the grid's seams instead (where it has any)."""
    w, h = image_wh
    side = min(side, w, h)
    nx = max(1, math.ceil((w - side * 0.2) / (side * 0.8)))
    ny = max(1, math.ceil((h - side * 0.2) / (side * 0.8)))
    xs = [0.0] if nx == 1 else [i * (w - side) / (nx - 1) for i in range(nx)]
    ys = [0.0] if ny == 1 else [j * (h - side) / (ny - 1) for j in range(ny)]
    if between:
        xs = [(a + b) / 2 for a, b in itertools.pairwise(xs)] or xs
        ys = [(a + b) / 2 for a, b in itertools.pairwise(ys)] or ys
    return [(x, y, x + side, y + side) for y in ys for x in xs]


#: Points per side of the grid ``_inside_share`` samples a blob with, and where they lie
#: (shares of its side).
_SAMPLES = 8
_GRID = tuple((i + 0.5) / _SAMPLES for i in range(_SAMPLES))


def _inside_share(blob: XyXy, rects: Sequence[XyXy]) -> float:
    """The share of ``blob`` (sampled on a grid of ``_SAMPLES`` points a side) that lies
    inside any of ``rects``. The points inside one rectangle are a run of the grid's columns
    by a run of its rows (found by bisection), so each row is a bit mask: a few integer
    operations a rectangle instead of an array of every point, rectangle and side (this
    runs for every moving blob, every frame)."""
    if not rects:
        return 0.0
    x0, y0, x1, y1 = (float(v) for v in blob)
    # Sorted (a box given back to front): the share counts points, in whatever order.
    xs = sorted(x0 + f * (x1 - x0) for f in _GRID)
    ys = sorted(y0 + f * (y1 - y0) for f in _GRID)
    rows = [0] * _SAMPLES
    for r in rects:
        lo, hi = bisect.bisect_left(xs, r[0]), bisect.bisect_right(xs, r[2])
        if lo >= hi:
            continue
        bits = (1 << hi) - (1 << lo)
        for j in range(bisect.bisect_left(ys, r[1]), bisect.bisect_right(ys, r[3])):
            rows[j] |= bits
    return sum(bin(m).count("1") for m in rows) / (_SAMPLES * _SAMPLES)


#: How wide a person is, about, for their height (a region grown sideways by a height's
#: share grows by this much of it).
_WIDTH = 0.4


def _rest(blob: XyXy, moving: Sequence[XyXy], tall: float, p: PlannerParams) -> list[XyXy]:
    """What of ``blob`` to look at besides the tracked objects' regions: the parts that
    move outside them (``moving``), less the limbs and shadows of those objects (a part
    less than ``rest_min`` of an object's height tall; a walker stepping out of their
    region is a tall strip, kept), each grown by ``rest_grow`` of that height (a person
    beside a walker is partly inside the walker's region), inside the blob."""
    least, grow = p.rest_min * tall, p.rest_grow * tall
    side = _WIDTH * grow
    return [
        (
            max(blob[0], r[0] - side),
            max(blob[1], r[1] - grow),
            min(blob[2], r[2] + side),
            min(blob[3], r[3] + grow),
        )
        for r in moving
        if r[3] - r[1] >= least
    ]


#: A blob no track is in is as tall as what moves there unless a seed in it (a box no track
#: took: ``TrackHint`` of id < 0) is this share of its height: a smaller one is a piece of
#: it (``_object_height``).
PART_OF_BLOB = 0.25


def _object_height(blob: XyXy, tracks: Sequence[tuple[int, TrackHint]]) -> float:
    """How tall the objects moving in ``blob`` are: the median height of the tracked
    objects (and seeds) whose centre is in it, else the blob's own height. A blob is often
    several people at different depths, taller than any of them: the tracks know their
    size. Where no track is, a seed under ``PART_OF_BLOB`` of the blob tall does not
    count: the head of someone entering at the frame's edge, found a few frames before at
    too low a score for a track, must not cut their blob into pieces magnified for a head."""
    tall = blob[3] - blob[1]
    tracked: list[float] = []
    seeds: list[float] = []
    for tid, h in tracks:
        x1, y1, x2, y2 = h.xyxy
        if blob[0] <= (x1 + x2) / 2 <= blob[2] and blob[1] <= (y1 + y2) / 2 <= blob[3]:
            (tracked if tid >= 0 else seeds).append(y2 - y1)
    if not tracked:
        seeds = [s for s in seeds if s >= PART_OF_BLOB * tall]
    heights = sorted(tracked + seeds)
    return min(tall, heights[len(heights) // 2]) if heights else tall


#: What goes first when a frame wants more than ``max_regions`` regions (sweep waits). A
#: near object's region ("near") ranks with motion: it is what a porch camera is for, and
#: one region holds it whole at a fraction of an input.
_PRIORITY = {"motion": 0, "near": 0, "track": 1, "recheck": 2, "sweep": 3}


def _urgency(why: str) -> int:
    return min(_PRIORITY.get(w, 9) for w in why.split("+"))


def merge(
    regions: Sequence[Wanted],
    growth: float,
    keep_scale: float,
    input_px: float,
    cap: int,
    merged_share: float = 1.0,
    contained: float = 1.0,
) -> list[Wanted]:
    """Merge overlapping regions while the merged one costs at most ``growth`` times the
    two (model-input pixels), keeps ``keep_scale`` of their larger magnification and stays
    ``merged_share`` of the input wide and tall (so that regions pack several to an input);
    a region (nearly) inside another, the merge growing the larger at most ``contained``
    times, merges whatever its size; keep the ``cap`` most urgent, in the order asked
    among equals (a merged region takes its first part's place: two near people's
    regions, merged, were cut for a dozen motion squares asked after them).

    The cheapest merge (by cost ratio) goes first, the earliest pair on a tie; a pair's
    verdict is worked out once, and after a merge only the merged region's pairs anew.
    """
    items = dict(enumerate(regions))  # by id; merged regions get new ids, at the end
    costs = {k: region_pixels(w.rect, w.scale) for k, w in items.items()}
    place = {k: k for k in items}  # where it was asked: its first part's id

    def pair(i: int, j: int) -> tuple[float, XyXy, float] | None:
        a, b = items[i], items[j]
        if not overlaps(a.rect, b.rect):
            return None
        s = min(a.scale, b.scale)
        if s < keep_scale * max(a.scale, b.scale):
            return None
        u = _union(a.rect, b.rect)
        if not _fits(u, s, input_px):
            return None
        small = _fits(u, s, max(merged_share * input_px, *_sizes(a), *_sizes(b)))
        if not small and region_pixels(u, s) > contained * max(costs[i], costs[j]):
            return None
        ratio = region_pixels(u, s) / (costs[i] + costs[j])
        return (ratio, u, s) if ratio <= growth else None

    ids = list(items)
    pairs = {
        (i, j): found
        for n, i in enumerate(ids)
        for j in ids[n + 1 :]
        if (found := pair(i, j)) is not None
    }
    new_id = len(ids)
    while pairs:
        (i, j), (_, u, s) = min(pairs.items(), key=lambda kv: (kv[1][0], kv[0]))
        why = "+".join(sorted(set(items[i].why.split("+")) | set(items[j].why.split("+"))))
        del items[i], items[j]
        pairs = {k: v for k, v in pairs.items() if i not in k and j not in k}
        items[new_id], costs[new_id] = Wanted(u, s, why), region_pixels(u, s)
        place[new_id] = min(place.pop(i), place.pop(j))
        for k in list(items)[:-1]:
            if (found := pair(k, new_id)) is not None:
                pairs[(k, new_id)] = found
        new_id += 1
    ranked = sorted(items, key=lambda k: (_urgency(items[k].why), place[k]))
    return [items[k] for k in ranked[:cap]]


class RegionPlanner:
    """Regions of one camera's frames, in frame order."""

    def __init__(self, params: PlannerParams | None = None) -> None:
        self.params = params or PlannerParams()
        self._sweep_i = 0
        self._sweep_pass = 0  # odd passes look between the even passes' squares
        self._next_sweep_t: float | None = None
        self._last_coarse_t: float | None = None
        self._rechecked: dict[int, float] = {}

    def plan(
        self,
        t: float,
        image_wh: tuple[int, int],
        motion: Sequence[XyXy],
        tracks: Sequence[tuple[int, TrackHint]] = (),
        input_px: int = 320,
        outside: Callable[[XyXy, Sequence[XyXy]], Sequence[XyXy]] | None = None,
        cut: bool = False,
        behind: float = 1.0,
    ) -> Plan:
        """Regions for the frame at ``t``; ``input_px``: the model's input side;
        ``outside(blob, rects)``: the parts of a moving blob that move outside ``rects``
        (``Motion.outside``; None: a blob partly inside the tracked objects' regions is
        looked at whole); ``cut``: most of the frame changed at once (a scene cut, the
        camera moved: ``Motion.reset``), a coarse look now; ``behind``: how many frames the
        camera gave per frame planned, lately (1: every one). The sweep and the quiet coarse
        look come that many times less often, so they cost a camera the box has no time for
        what they cost one it keeps up with, per frame looked at: else each of its few
        frames carries both, costs more, and the box falls further behind (36 still
        cameras on 2 cores got through 8.5 frames/s in all; 351.5 without the sweep)."""
        p = self.params
        behind = max(1.0, behind)
        region_px = p.region_px or round(0.5 * input_px)
        most = input_px / region_px  # the highest magnification

        def target(height: float) -> float:
            """How tall an object this tall is looked at (model pixels)."""
            return p.near_px if height >= p.big * image_wh[1] else p.object_px

        def scale_for(height: float) -> float:
            return min(most, target(height) / max(height, 1.0))

        wanted, held, ahead, missed = self._tracked(
            t, image_wh, tracks, input_px, target, scale_for, None if cut else motion
        )
        followed = [w.rect for w in wanted] + [rect for _, rect in ahead.values()]
        big = False
        for blob in motion:
            share = _inside_share(blob, followed)
            if share >= p.covered:
                continue  # the tracked objects moving there are looked at already
            parts = [blob]
            if share > 0 and outside is not None:
                parts = _rest(blob, outside(blob, followed), _object_height(blob, tracks), p)
            for part in parts:
                tall = _object_height(part, tracks)
                s = scale_for(tall)
                rect = around(part, p.blob_margin * tall, target(tall) / s, image_wh)
                if tall >= p.big * image_wh[1]:
                    # Someone near: the blob whole, shrunk to fit one input if need be
                    # (pieces would be a head, an arm), and a coarse look soon.
                    big = True
                    fit = input_px / max(rect[2] - rect[0], rect[3] - rect[1])
                    wanted.append(Wanted(rect, min(s, fit), "motion"))
                    continue
                wanted += [Wanted(r, s, "motion") for r in pieces(rect, s, input_px, tall)]
        plain = p.plain * image_wh[1]
        near = big or any(h.xyxy[3] - h.xyxy[1] >= plain and not h.confirmed for _, h in tracks)
        coarse, close = self._coarse_due(t, big, cut, missed, near, behind)
        due = self._next_sweep_t is None or t >= self._next_sweep_t - HAIR_S
        # Motion and moving objects are looked at already: the sweep, which is for what
        # stands still unseen, waits for a quiet frame (at most sweep_wait_s).
        late = self._next_sweep_t is None or t >= self._next_sweep_t + p.sweep_wait_s - HAIR_S
        if due and (not wanted or late):
            grid = sweep_grid(image_wh, region_px * 1.5, self._sweep_pass % 2 == 1)
            square = grid[min(self._sweep_i, len(grid) - 1)]  # (the frame size may change)
            wanted.append(Wanted(square, input_px / (square[2] - square[0]), "sweep"))
            self._sweep_i += 1
            if self._sweep_i >= len(grid):  # the pass is done: the next looks between
                self._sweep_i, self._sweep_pass = 0, self._sweep_pass + 1
            self._next_sweep_t = t + p.sweep_s * behind
        if not wanted:
            return Plan((), (), (), coarse, held, close)
        merged = merge(
            wanted,
            p.merge_growth,
            p.keep_scale,
            input_px,
            p.max_regions,
            p.merged_share,
            p.contained,
        )
        regions = tuple(w.rect for w in merged)
        if ahead:
            # A walker inside a region looked at anyway (a neighbour's) is that look's to
            # find: its moved-on box beside the one found would be two boxes of one person.
            held = tuple(i for i in held if i not in ahead or not _within(ahead[i][0], regions))
        whys, scales = tuple(w.why for w in merged), tuple(w.scale for w in merged)
        return Plan(regions, whys, scales, coarse, held, close)

    def _tracked(
        self,
        t: float,
        image_wh: tuple[int, int],
        tracks: Sequence[tuple[int, TrackHint]],
        input_px: int,
        target: Callable[[float], float],
        scale_for: Callable[[float], float],
        motion: Sequence[XyXy] | None,
    ) -> tuple[list[Wanted], tuple[int, ...], dict[int, tuple[XyXy, XyXy]], bool]:
        """The regions of the tracked objects (and big seeds) due this frame, the steady
        ones that stand in instead (``Plan.held``), per walker among those its box now and
        the region it would have there (its motion is its own: it calls none), and whether a
        big one was missed by its region last time. ``motion``: the frame's moving blobs
        (None: a scene cut, where nothing stands in)."""
        p = self.params
        w, h = image_wh
        wanted: list[Wanted] = []
        held: list[int] = []
        ahead: dict[int, tuple[XyXy, XyXy]] = {}
        live = set()
        missed = False
        for tid, hint in tracks:
            tall = hint.xyxy[3] - hint.xyxy[1]
            if tid < 0 and tall < p.big * image_wh[1]:
                continue  # a small seed: the sweep and motion find small things
            live.add(tid)
            if hint.doubted:
                continue  # the coarse look did not see it: no region keeps it alive
            since = t - self._rechecked.get(tid, hint.last_seen_t)
            missed |= not hint.seen and tall >= p.big * h
            s = scale_for(tall)
            # Still, looked at less than recheck_s ago, and nothing moves there: the pixels
            # are the last look's, and so is its box. Any other still one is looked at.
            if (
                not hint.moving
                and not lasted(since, p.recheck_s)
                and hint.steady
                and motion is not None
                and not any(overlaps(hint.xyxy, blob) for blob in motion)
            ):
                held.append(tid)
                continue
            # A walker (under ``plain`` tall: a stand-in is never a box as big as the coarse
            # look finds plainly) last seen by its own region's look less than predict_s
            # ago, its velocity measured over many looks: that look, moved on, is where it
            # is now (a tenth of a second at a walk is a few pixels), as long as it stays in
            # the frame. Never from a stand-in: the frame after one, it is looked at.
            own = self._rechecked.get(tid) == hint.last_seen_t  # not a stand-in, nor another's
            fresh = not lasted(t - hint.last_seen_t, p.predict_s)
            walker = hint.moving and hint.steady and tall < p.plain * h
            if own and walker and fresh and motion is not None:
                dx, dy = hint.shift(t)
                x1, y1, x2, y2 = hint.xyxy
                box = (x1 + dx, y1 + dy, x2 + dx, y2 + dy)
                if _within(box, ((0.0, 0.0, w, h),)) and _alone(
                    box, rect := around(box, p.margin * tall, target(tall) / s, image_wh),
                    motion, p.covered,
                ):  # fmt: skip
                    held.append(tid)
                    ahead[tid] = box, rect
                    continue
            why = "track" if hint.moving else "recheck"
            rect = around(hint.xyxy, p.margin * tall, target(tall) / s, image_wh)
            if tall >= p.big * h:
                # Someone near, whole in one region: at least as wide as a person of
                # near_px stands (one cut by the frame's edge is a sliver; shrunk to
                # near_px tall, it is a few pixels wide and found no more).
                wide = p.near_px * _WIDTH / max(hint.xyxy[2] - hint.xyxy[0], 1.0)
                fit = input_px / max(rect[2] - rect[0], rect[3] - rect[1])
                wanted.append(Wanted(rect, min(max(s, wide), fit, 1.0), "near"))
            else:
                wanted += [Wanted(r, s, why) for r in pieces(rect, s, input_px, tall)]
            self._rechecked[tid] = t
        self._rechecked = {k: v for k, v in self._rechecked.items() if k in live}
        return wanted, tuple(held), ahead, missed

    def _coarse_due(
        self, t: float, big: bool, cut: bool, missed: bool, near: bool, behind: float
    ) -> tuple[bool, bool]:
        """Whether the frame at ``t`` gets a coarse look, and whether that look is for
        someone near (``Plan.near``) rather than for the scene. The scene's: the first
        frame, a cut (``cut``), and every ``quiet`` x ``sweep_s`` (x ``behind``: see
        ``plan``) while only smaller things, or big ones a coarse look has seen, are in view
        (a street of small walkers or an empty scene has nothing the coarse look finds that
        the regions do not: its look there is a check, and a third of region mode's CPU on
        a still scene). Someone near's: after a big object's miss (``missed``), every
        ``sweep_s`` while something ``plain`` tall that no coarse look has seen is in view
        (``near``: a big blob, a track or seed that tall, unless ``confirmed``: one a
        coarse look saw, standing or walking, is held by its own regions, and if ``big``
        tall, a miss of it calls a coarse look at once), and for a big moving blob at most
        every ``big_s``. A big person never waits for a camera that is behind."""
        p = self.params
        last = self._last_coarse_t
        if last is None or cut:
            due, close = True, False
        elif missed:
            due, close = True, True
        else:
            since = t - last
            due = lasted(since, p.sweep_s if near else p.quiet * p.sweep_s * behind)
            due |= big and lasted(since, p.big_s)
            close = due and near  # near: a big blob too
        if due:
            self._last_coarse_t = t
        return due, close
