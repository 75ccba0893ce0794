"""Time limits that work where math-verify's own (`signal.alarm`, whole seconds, main thread only) does not.

- `alarm_deadline`: a sub-second `SIGALRM` timer for code on the main thread of a process (the verifier workers,
  or the trainer's main thread). It raises `DeadlineExceeded`, a `BaseException`, so that the `except Exception`
  blocks inside math-verify and sympy cannot swallow it. It cannot interrupt one long C call: the worker pool's hard
  kill covers that, and `rewards.magnitude` refuses answers whose evaluation would build astronomically large
  integers (`10^{10^{10^{10}}}`) before sympy starts. math-verify's own timeouts are always off in our calls
  (`parsing_timeout=None`, `timeout_seconds=None`), so its `signal.alarm` never replaces or cancels this timer.
- `call_with_deadline`: runs a callable with a deadline from any thread: the alarm on the main thread, otherwise a
  helper thread that is abandoned (left running as a daemon) if it overruns.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any


class DeadlineExceeded(BaseException):  # noqa: N818 - a BaseException so that `except Exception` cannot swallow it
    """Raised inside code that ran past its deadline."""


def on_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _raise_deadline(signum, frame):
    raise DeadlineExceeded("deadline exceeded")


@contextlib.contextmanager
def alarm_deadline(seconds: float | None) -> Iterator[bool]:
    """Raise `DeadlineExceeded` in the body after `seconds` (main thread only; yields whether a timer was armed).

    Nested use keeps the outer deadline: the inner timer is armed for the smaller of the two, and on exit the outer
    timer is re-armed with what is left of it.
    """
    if not seconds or seconds <= 0 or not on_main_thread():
        yield False
        return
    start = time.monotonic()
    outer_remaining, _ = signal.getitimer(signal.ITIMER_REAL)
    previous_handler = signal.signal(signal.SIGALRM, _raise_deadline)
    delay = min(seconds, outer_remaining) if outer_remaining > 0 else seconds
    signal.setitimer(signal.ITIMER_REAL, delay)
    try:
        yield True
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous_handler)
        if outer_remaining > 0:
            # Re-arm the outer deadline; if it has passed already, fire it at once.
            signal.setitimer(signal.ITIMER_REAL, max(outer_remaining - (time.monotonic() - start), 1e-6))


def call_with_deadline(func: Callable[..., Any], seconds: float | None, /, *args: Any, **kwargs: Any) -> Any:
    """`func(*args, **kwargs)`, or `TimeoutError` after `seconds` (None or <= 0: no limit).

    On the main thread the call runs in place under `alarm_deadline` (so code that needs the main thread, e.g.
    signal handlers, keeps working). Elsewhere it runs in a daemon thread that is abandoned if it overruns: Python
    cannot kill a thread, but the caller goes on.
    """
    if not seconds or seconds <= 0:
        return func(*args, **kwargs)
    if on_main_thread():
        try:
            with alarm_deadline(seconds):
                return func(*args, **kwargs)
        except DeadlineExceeded as exc:
            raise TimeoutError(f"{getattr(func, '__name__', func)!s} ran past its {seconds:g} s deadline") from exc
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = func(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            outcome["error"] = exc

    thread = threading.Thread(target=target, name=f"reward-deadline-{getattr(func, '__name__', 'call')}", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise TimeoutError(f"{getattr(func, '__name__', func)!s} ran past its {seconds:g} s deadline (abandoned)")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]
