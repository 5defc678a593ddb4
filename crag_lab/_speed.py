"""How fast a model server answers, and the timeout that speed implies (`SpeedMeter`)."""

from __future__ import annotations

import threading
from collections import deque


class SpeedMeter:
    """How fast a model server answers, measured from its replies, and the timeout that speed implies.

    Each finished call is an observation (prompt tokens, completion tokens, seconds). A call's
    budget is ``factor`` times what the slowest recent observation says its prompt and its
    completion cap take, plus ``overhead_s``: a server that slows down (other work on its cores,
    more requests at once) is given more time, and one that stalls still times out. Prompt tokens
    count a quarter of a completion token (a CPU reads a prompt several times faster than it writes).

    >>> meter = SpeedMeter()
    >>> meter.budget_s(prompt_tokens=400, max_tokens=100) is None  # nothing measured yet
    True
    >>> meter.observe(prompt_tokens=0, completion_tokens=20, seconds=10.0)  # 2 tokens/s
    >>> meter.budget_s(prompt_tokens=400, max_tokens=100)  # 3 x (100 + 400/4) / 2 + 10
    310.0
    """

    PROMPT_WEIGHT = 0.25

    def __init__(self, *, factor: float = 3.0, overhead_s: float = 10.0, window: int = 8) -> None:
        self.factor, self.overhead_s = factor, overhead_s
        self._seconds_per_token: deque[float] = deque(maxlen=window)
        self._lock = threading.Lock()
        self.calls = 0
        self.tokens = 0
        self._last_rate: float | None = None

    def __getstate__(self) -> dict[str, object]:
        """The observations, without the lock (a copy in another process makes its own)."""
        return {k: v for k, v in self.__dict__.items() if k != "_lock"}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def observe(self, *, prompt_tokens: int, completion_tokens: int, seconds: float, call: bool = True) -> None:
        """Record one reply's tokens and seconds (``call=False``: a warm-up, not counted as a call)."""
        work = completion_tokens + self.PROMPT_WEIGHT * prompt_tokens
        with self._lock:
            self.calls += int(call)
            self.tokens += completion_tokens if call else 0
            if completion_tokens and seconds > 0:
                self._last_rate = completion_tokens / seconds
            if work >= 1 and seconds > 0:
                self._seconds_per_token.append(seconds / work)

    @property
    def seconds_per_token(self) -> float | None:
        """The slowest of the recent observations (None before the first)."""
        with self._lock:
            return max(self._seconds_per_token) if self._seconds_per_token else None

    def tokens_per_s(self) -> float | None:
        """Completion tokens per second of the latest reply (prompt reading included), for progress lines."""
        with self._lock:
            return self._last_rate

    def budget_s(self, *, prompt_tokens: int, max_tokens: int) -> float | None:
        """Seconds a call with this prompt and completion cap may take (None: nothing measured yet)."""
        spt = self.seconds_per_token
        if spt is None:
            return None
        return round(self.factor * (max_tokens + self.PROMPT_WEIGHT * prompt_tokens) * spt + self.overhead_s, 3)
