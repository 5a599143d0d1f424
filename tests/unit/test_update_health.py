"""Health window verdicts: errors at once, latency against the previous model after N frames."""

from __future__ import annotations

import pytest

from agent.update import codes
from agent.update.health import HealthWindow, LatencyBaseline

pytestmark = pytest.mark.timeout(10)


def _window(**kw):
    args = {"budget": 3.0, "deadline": 100.0, "baseline_ms": 10.0}
    args.update(kw)
    return HealthWindow("new", 5, **args)


@pytest.mark.parametrize(
    ("frames", "kw", "code", "decided_at"),
    [
        ([(12.0, None)] * 5, {}, None, 5),  # healthy: commit after N
        ([(29.0, None)] * 5, {}, None, 5),  # just under 3x
        ([(31.0, None)] * 5, {}, codes.HEALTH_LATENCY, 5),  # over 3x the previous median
        ([(200.0, None)] * 2 + [(10.0, None)] * 3, {}, None, 5),  # median, not mean
        ([(10.0, None), (None, "boom")], {}, codes.HEALTH_ERRORS, 2),  # an error: at once
        ([(None, "x")] + [(10.0, None)] * 4, {"max_errors": 1}, None, 5),
        ([(500.0, None)] * 5, {"baseline_ms": None}, None, 5),  # no reference: no judgement
        (
            [(1.0, None)] * 5,
            {"baseline_ms": None, "validation_ratio": 20.0},
            codes.HEALTH_LATENCY,
            5,
        ),
    ],
    ids=["ok", "under", "slow", "median", "error", "tolerated", "no-ref", "validation-ratio"],
)
def test_verdicts(frames, kw, code, decided_at):
    """Each frame sequence gives its verdict at the expected frame."""
    w = _window(**kw)
    verdicts = [w.observe(ms, err) for ms, err in frames * 2]
    decided = [i for i, v in enumerate(verdicts, start=1) if v is not None]
    assert decided == [decided_at]
    verdict = verdicts[decided_at - 1]
    assert verdict.ok is (code is None) and verdict.code == code
    assert w.observe(10.0, None) is None  # decided once


def test_deadline_rolls_back_an_unfilled_window():
    """A window not filled by its deadline is a health_timeout."""
    w = _window()
    w.observe(10.0, None)
    assert w.check_deadline(99.0) is None
    v = w.check_deadline(100.0)
    assert v.code == codes.HEALTH_TIMEOUT and "1 of 5" in v.message


def test_baseline_needs_samples_of_its_model():
    """The baseline median counts only the running model's frames, and needs a few."""
    b = LatencyBaseline()
    b.reset("old")
    for ms in (10.0, 11.0, 12.0, 13.0):
        b.add("old", ms)
    b.add("other", 99.0)
    assert b.median() is None
    b.add("old", 14.0)
    assert b.median() == 12.0


def test_latency_rollback_names_the_setting_and_the_figures():
    """health_latency names models.latency_budget with the measured and allowed times."""
    w = _window()
    verdict = [w.observe(31.0, None) for _ in range(5)][-1]
    assert verdict.code == codes.HEALTH_LATENCY
    assert verdict.message == (
        "median inference 31.0 ms over 5 frames is over the 30.0 ms allowed: "
        "models.latency_budget 3 x the previous model's 10.0 ms "
        "(raise models.latency_budget to accept a slower model)"
    )


def test_validation_ratio_rollback_names_the_setting():
    """Without a pipeline baseline, the validation ratio is judged against the named budget."""
    w = _window(baseline_ms=None, validation_ratio=4.5)
    verdict = [w.observe(1.0, None) for _ in range(5)][-1]
    assert verdict.code == codes.HEALTH_LATENCY
    assert "4.5x slower" in verdict.message
    assert "over models.latency_budget 3x" in verdict.message
