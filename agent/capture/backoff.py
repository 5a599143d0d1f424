"""Reconnect delays: exponential, capped, with jitter."""

from __future__ import annotations

import random


class Backoff:
    """Delay before reopen attempt n: ``d = min(max_s, base_s * 2**n)``, drawn from [d/2, d].

    Half the delay is random ("equal jitter") so cameras that lost the same switch or NVR
    at the same instant do not all reconnect in lockstep, while the wait still grows.
    """

    def __init__(self, base_s: float, max_s: float, rng: random.Random | None = None) -> None:
        if base_s <= 0 or max_s <= 0:
            raise ValueError(f"backoff delays must be positive, got base={base_s} max={max_s}")
        self._base = min(base_s, max_s)
        self._max = max_s
        self._rng = rng or random.Random()
        self.attempts = 0

    def next_delay(self) -> float:
        # The exponent is bounded so 2**n cannot overflow however long a camera stays away.
        d = min(self._max, self._base * 2.0 ** min(self.attempts, 32))
        self.attempts += 1
        return d / 2.0 + self._rng.uniform(0.0, d / 2.0)

    def reset(self) -> None:
        self.attempts = 0
