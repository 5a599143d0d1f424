"""LatestFrameSlot and RoundRobinFeed: bounded waits, drops, fairness, wake-ups."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from agent.capture.latest import LatestFrameSlot, RoundRobinFeed
from agent.frames import Frame

_IMG = np.zeros((4, 6, 3), np.uint8)


def _frame(camera: str, i: int, t: float | None = None) -> Frame:
    return Frame(_IMG, camera, i, time.monotonic() if t is None else t, time.time())


@pytest.mark.timeout(5)
def test_a_burst_of_frames_waits_in_order_and_none_is_dropped():
    """Frames put faster than they are taken, within the wait bound, all come out, oldest
    first: a short burst of work delays frames without losing them."""
    slot = LatestFrameSlot("a", max_wait_s=10.0)
    frames = [_frame("a", i) for i in range(3)]
    for f in frames:
        assert slot.put(f) is None
    assert [slot.try_get() for _ in range(4)] == [*frames, None]
    assert (slot.frames_in, slot.frames_dropped, slot.frames_out) == (3, 0, 3)


@pytest.mark.timeout(5)
def test_put_drops_frames_older_than_the_wait_bound_and_hands_the_newest_back():
    """A frame that waited longer than max_wait_s is dropped when a newer one comes in
    (counted, and handed back so its buffer can be reused); a lone old frame stays."""
    slot = LatestFrameSlot("a", max_wait_s=0.25)
    t = time.monotonic()
    old, older_still, new = _frame("a", 1, t - 0.5), _frame("a", 0, t - 0.6), _frame("a", 2, t)
    assert slot.put(older_still) is None
    assert slot.put(old) is None  # 0.1 s apart: within the bound of each other
    assert slot.put(new) is old  # both are 0.5 s and more older than it: the newer handed back
    assert (slot.frames_in, slot.frames_dropped) == (3, 2)
    assert slot.try_get() is new
    lone = _frame("a", 3, t - 5.0)
    assert slot.put(lone) is None
    assert slot.try_get() is lone


@pytest.mark.timeout(5)
def test_depth_bound_drops_the_oldest():
    """More than max_depth frames waiting: the oldest go, whatever their age."""
    slot = LatestFrameSlot("a", max_wait_s=10.0, max_depth=2)
    frames = [_frame("a", i) for i in range(3)]
    dropped = [slot.put(f) for f in frames]
    assert dropped == [None, None, frames[0]]
    assert slot.frames_dropped == 1
    assert [slot.try_get(), slot.try_get(), slot.try_get()] == [*frames[1:], None]


@pytest.mark.timeout(5)
def test_take_skips_a_frame_that_went_stale_while_a_newer_one_waits():
    """A consumer steadily slower than its camera works on fresh frames: at take time a
    frame older than the bound is dropped in favour of the newer one behind it."""
    slot = LatestFrameSlot("a", max_wait_s=0.05)
    first, second = _frame("a", 0), _frame("a", 1)
    slot.put(first)
    time.sleep(0.02)
    slot.put(second)
    time.sleep(0.04)  # first is now older than 0.05 s, second is not
    assert slot.try_get() is second
    assert (slot.frames_dropped, slot.frames_out) == (1, 1)


@pytest.mark.timeout(5)
def test_byte_bound_drops_the_oldest_but_keeps_the_newest():
    """Frames over max_bytes together: the oldest go; one frame larger than the bound
    alone is still kept (the newest frame is never dropped by a bound)."""
    slot = LatestFrameSlot("a", max_wait_s=10.0, max_bytes=2 * _IMG.nbytes)
    frames = [_frame("a", i) for i in range(3)]
    assert [slot.put(f) for f in frames] == [None, None, frames[0]]
    assert [slot.try_get(), slot.try_get(), slot.try_get()] == [*frames[1:], None]
    big = Frame(np.zeros((40, 60, 3), np.uint8), "a", 9, time.monotonic(), time.time())
    assert slot.put(big) is None
    assert slot.try_get() is big


@pytest.mark.timeout(5)
def test_a_slot_that_had_to_drop_serves_the_newest_frame():
    """Once two frames were dropped within a second (the consumer is steadily slower than
    the camera), waiting frames would only add latency: the consumer gets the newest one."""
    slot = LatestFrameSlot("a", max_wait_s=10.0, max_depth=3)
    frames = [_frame("a", i) for i in range(5)]
    for f in frames:
        slot.put(f)  # the 4th and the 5th push the 1st and the 2nd out: behind
    assert slot.frames_dropped == 2
    assert slot.try_get() is frames[4]
    assert (slot.frames_dropped, slot.frames_out) == (4, 1)
    calm = LatestFrameSlot("b", max_wait_s=10.0)
    waiting = [_frame("b", i) for i in range(2)]
    for f in waiting:
        calm.put(f)
    assert calm.try_get() is waiting[0]  # never dropped: a burst, every frame in order


def test_depth_must_be_positive():
    with pytest.raises(ValueError, match="max_depth"):
        LatestFrameSlot("a", max_depth=0)


@pytest.mark.timeout(5)
def test_get_times_out_with_none():
    """get(timeout) on an empty slot returns None after about the timeout."""
    slot = LatestFrameSlot("a")
    t0 = time.monotonic()
    assert slot.get(0.1) is None
    assert 0.08 <= time.monotonic() - t0 < 1.0


@pytest.mark.timeout(5)
def test_get_wakes_on_put_from_another_thread():
    """A consumer blocked in get() returns as soon as a producer puts a frame."""
    slot = LatestFrameSlot("a")
    frame = _frame("a", 7)
    t0 = time.monotonic()
    threading.Timer(0.1, slot.put, args=(frame,)).start()
    assert slot.get(3.0) is frame
    assert time.monotonic() - t0 < 1.0  # woken by the put, not by get's timeout


@pytest.mark.timeout(5)
def test_put_wait_blocks_until_the_frame_is_consumed():
    """put_wait (lossless files) waits for the consumer instead of dropping."""
    slot = LatestFrameSlot("a")
    assert slot.put_wait(_frame("a", 0), 0.1)
    assert not slot.put_wait(_frame("a", 1), 0.1)  # still full: not stored
    threading.Timer(0.1, slot.try_get).start()
    assert slot.put_wait(_frame("a", 2), 2.0)
    got = slot.try_get()
    assert got is not None and got.frame_id == 2
    assert slot.frames_dropped == 0


@pytest.mark.timeout(5)
def test_wait_space_waits_for_the_consumer_and_stores_nothing():
    """wait_space (lossless readers stamp a frame once there is room) returns False while
    the slot is full, True once the consumer took the frame, and never puts anything."""
    slot = LatestFrameSlot("a")
    assert slot.wait_space(0.0)
    assert slot.put_wait(_frame("a", 0), 0.1)
    t0 = time.monotonic()
    assert not slot.wait_space(0.1)
    assert 0.08 <= time.monotonic() - t0 < 1.0
    threading.Timer(0.1, slot.try_get).start()
    assert slot.wait_space(2.0)
    assert not slot.has_frame
    assert (slot.frames_in, slot.frames_out, slot.frames_dropped) == (1, 1, 0)


@pytest.mark.timeout(5)
def test_one_in_flight_has_room_only_once_the_taken_frame_is_finished():
    """A lossless reader in region mode (``one_in_flight``) puts its next frame once the
    consumer is done with the last one (``finished``: its tracks are back), not as soon as
    it was taken; through the feed, ``finished`` reaches only such a slot."""
    feed = RoundRobinFeed()
    slot = feed.add("a", one_in_flight=True)
    plain = feed.add("b")
    for s in (slot, plain):
        assert s.put_wait(_frame(s.camera_id, 0), 0.1)
    assert feed.get(0.1) is not None and feed.get(0.1) is not None
    assert plain.wait_space(0.0), "a plain slot has room once its frame is taken"
    assert not slot.wait_space(0.1) and not slot.put_wait(_frame("a", 1), 0.1)
    feed.finished("b")  # another camera's frame: changes nothing here
    assert not slot.wait_space(0.05)
    threading.Timer(0.1, feed.finished, args=("a",)).start()
    assert slot.put_wait(_frame("a", 1), 2.0)
    got = feed.get(0.1)
    assert got is not None and got.frame_id == 1
    feed.finished("a")
    feed.finished("a")  # one too many is harmless: never below nothing in flight
    assert slot.wait_space(0.0) and slot.put_wait(_frame("a", 2), 0.1)
    assert not slot.wait_space(0.0)  # a frame waiting is no room either
    assert (slot.frames_in, slot.frames_out, slot.frames_dropped) == (3, 2, 0)


@pytest.mark.timeout(5)
def test_feed_serves_cameras_round_robin():
    """With every camera ready, the feed alternates cameras even if one refills at once."""
    feed = RoundRobinFeed()
    a, b, c = feed.add("a"), feed.add("b"), feed.add("c")
    order = []
    for i in range(9):
        for slot in (a, b, c):
            if not slot.has_frame:
                slot.put(_frame(slot.camera_id, i))
        got = feed.get(0.1)
        assert got is not None
        order.append(got.camera_id)
    assert order == ["a", "b", "c"] * 3
    assert feed.ready_count() == 2


@pytest.mark.timeout(5)
def test_feed_does_not_let_a_flooding_camera_starve_a_slow_one():
    """A camera putting frames as fast as it can gets no more turns than a 20 FPS one."""
    feed = RoundRobinFeed()
    fast, slow = feed.add("fast"), feed.add("slow")
    stop = threading.Event()

    def produce(slot: LatestFrameSlot, period: float) -> None:
        i = 0
        while not stop.wait(period):
            slot.put(_frame(slot.camera_id, i))
            i += 1

    threads = [
        threading.Thread(target=produce, args=(fast, 0.0005), daemon=True),
        threading.Thread(target=produce, args=(slow, 0.05), daemon=True),
    ]
    for t in threads:
        t.start()
    got = {"fast": 0, "slow": 0}
    t_end = time.monotonic() + 1.0
    while time.monotonic() < t_end:
        frame = feed.get(0.2)
        if frame is not None:
            got[frame.camera_id] += 1
            time.sleep(0.02)  # a consumer slower than both cameras
    stop.set()
    # The consumer manages ~40-50 frames/s: roughly half each, the slow camera all of its 20.
    assert got["slow"] >= 14, got
    assert got["fast"] <= got["slow"] * 2 + 5, got
    assert fast.frames_dropped > 0


@pytest.mark.timeout(5)
def test_feed_consumer_sleeps_until_any_camera_puts():
    """A consumer waiting on the feed wakes on a put to any camera's slot, without polling."""
    feed = RoundRobinFeed()
    feed.add("a")
    b = feed.add("b")
    frame = _frame("b", 3)
    t0 = time.monotonic()
    threading.Timer(0.15, b.put, args=(frame,)).start()
    assert feed.get(3.0) is frame
    assert 0.1 < time.monotonic() - t0 < 1.0  # woken by the put, not by get's timeout
    assert feed.get(0.05) is None


@pytest.mark.timeout(5)
def test_feed_gives_each_frame_to_exactly_one_of_several_consumers():
    """Several inference threads on one feed never receive the same frame twice."""
    feed = RoundRobinFeed()
    slots = [feed.add(c) for c in "abc"]
    seen: list[tuple[str, int]] = []
    lock = threading.Lock()
    done = threading.Event()

    def consume() -> None:
        while not done.is_set():
            f = feed.get(0.05)
            if f is not None:
                with lock:
                    seen.append((f.camera_id, f.frame_id))

    consumers = [threading.Thread(target=consume, daemon=True) for _ in range(3)]
    for t in consumers:
        t.start()
    for i in range(200):
        for s in slots:
            s.put_wait(_frame(s.camera_id, i), 2.0)
    time.sleep(0.2)
    done.set()
    for t in consumers:
        t.join(2.0)
    assert len(seen) == len(set(seen)) == 600


@pytest.mark.timeout(5)
def test_feed_rejects_duplicate_camera_and_forgets_removed_one():
    """Each camera has one slot in a feed; a removed camera's frames are no longer served."""
    feed = RoundRobinFeed()
    a = feed.add("a")
    with pytest.raises(ValueError, match="already has a slot"):
        feed.add("a")
    a.put(_frame("a", 0))
    feed.remove("a")
    assert feed.get(0.05) is None
    assert feed.slots == ()
