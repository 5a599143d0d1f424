"""The health window after a model swap: N frames of the new model decide commit or rollback.

Pure bookkeeping (no threads, no clock of its own); the manager feeds it under its lock.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass
from typing import Any

from agent.update import codes

#: Fewer pipeline samples than this and the baseline is measured in validation instead.
MIN_BASELINE_SAMPLES = 5


@dataclass(frozen=True, slots=True)
class Verdict:
    """Commit (``ok``) or roll back with ``code`` and a reason for the operator."""

    ok: bool
    code: str | None
    message: str
    stats: dict[str, Any]


class LatencyBaseline:
    """Recent inference latencies of the running model (the budget's reference)."""

    def __init__(self, size: int = 200) -> None:
        self._ms: deque[float] = deque(maxlen=size)
        self.sha256: str | None = None

    def reset(self, sha256: str) -> None:
        self.sha256 = sha256
        self._ms.clear()

    def add(self, sha256: str, ms: float) -> None:
        if sha256 == self.sha256:
            self._ms.append(ms)

    def median(self) -> float | None:
        if len(self._ms) < MIN_BASELINE_SAMPLES:
            return None
        return float(statistics.median(self._ms))


#: The fix a latency rollback names: the setting that allowed the slowdown.
_RAISE = " (raise models.latency_budget to accept a slower model)"


class HealthWindow:
    """Counts frames of model ``sha256``; decides once: errors now, latency after N frames.

    Latency: the window's median inference time against ``budget`` x ``baseline_ms`` (the
    previous model in the same pipeline). Without a pipeline baseline, the ratio the two
    models showed in validation (``validation_ratio``) is judged instead.
    """

    def __init__(
        self,
        sha256: str,
        frames: int,
        *,
        budget: float,
        deadline: float,
        baseline_ms: float | None,
        validation_ratio: float | None = None,
        max_errors: int = 0,
    ) -> None:
        self.sha256 = sha256
        self.frames = frames
        self.budget = budget
        self.deadline = deadline
        self.baseline_ms = baseline_ms
        self.validation_ratio = validation_ratio
        self.max_errors = max_errors
        self.count = 0
        self.errors = 0
        self.first_error: str | None = None
        self._ms: list[float] = []
        self.decided: Verdict | None = None

    def stats(self) -> dict[str, Any]:
        median = statistics.median(self._ms) if self._ms else None
        return {
            "frames": self.count,
            "errors": self.errors,
            "median_ms": round(median, 2) if median is not None else None,
            "baseline_ms": round(self.baseline_ms, 2) if self.baseline_ms is not None else None,
            "validation_ratio": (
                round(self.validation_ratio, 2) if self.validation_ratio is not None else None
            ),
            "budget": self.budget,
        }

    def observe(self, inference_ms: float | None, error: str | None) -> Verdict | None:
        """One processed frame of this model; the verdict the first time there is one."""
        if self.decided is not None:
            return None
        self.count += 1
        if error is not None:
            self.errors += 1
            self.first_error = self.first_error or error
        elif inference_ms is not None:
            self._ms.append(inference_ms)
        if self.errors > self.max_errors:
            return self._decide(
                False,
                codes.HEALTH_ERRORS,
                f"{self.errors} inference error(s) in {self.count} frames of the new model "
                f"(first: {self.first_error})",
            )
        if self.count >= self.frames:
            return self._judge_latency()
        return None

    def _judge_latency(self) -> Verdict:
        median = statistics.median(self._ms) if self._ms else None
        if median is not None and self.baseline_ms is not None:
            limit = self.budget * self.baseline_ms
            if median > limit:
                return self._decide(
                    False,
                    codes.HEALTH_LATENCY,
                    f"median inference {median:.1f} ms over {self.count} frames is over the "
                    f"{limit:.1f} ms allowed: models.latency_budget {self.budget:g} x the "
                    f"previous model's {self.baseline_ms:.1f} ms{_RAISE}",
                )
        elif self.validation_ratio is not None and self.validation_ratio > self.budget:
            return self._decide(
                False,
                codes.HEALTH_LATENCY,
                f"the new model was {self.validation_ratio:.1f}x slower than the previous "
                f"one in validation, over models.latency_budget {self.budget:g}x{_RAISE}",
            )
        return self._decide(True, None, f"{self.count} frames healthy")

    def check_deadline(self, now: float) -> Verdict | None:
        if self.decided is not None or now < self.deadline:
            return None
        return self._decide(
            False,
            codes.HEALTH_TIMEOUT,
            f"only {self.count} of {self.frames} frames processed by the new model in time",
        )

    def _decide(self, ok: bool, code: str | None, message: str) -> Verdict:
        self.decided = Verdict(ok, code, message, self.stats())
        return self.decided
