"""The reward registry: a recipe's `reward_funcs` specs to safe callables with TRL's reward signature.

A spec is a built-in name (`accuracy`, `format`, `boxed_format`, `overlong`, `cosine_length`, `code`,
`code_format`), an importable `package.module:function`, or a file `path/to/my_reward.py:function` (loaded without
installing it). Every function is wrapped in a `SafeReward`, which

- checks the result at every call: one float or None per completion, else a `RewardContractError` naming the
  reward (TRL would raise a generic error or, in older versions, broadcast a 1-element list);
- bounds a custom function's call in time (`reward_call_timeout`) and turns its exceptions into `None` scores for
  the completions that caused them (the batch is retried one completion at a time to find them), so that training
  goes on; a function that raises on *every* completion of its first batch is a bug and stops training at step 1;
- logs `rewards/<name>/failures` (and e.g. `rewards/accuracy/unparsable_golds`) through TRL's `log_metric`.
"""

from __future__ import annotations

import asyncio
import difflib
import importlib
import importlib.util
import inspect
import logging
import math
import numbers
import os
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from drgrpo.core.errors import RecipeError, RecipeImportError
from rewards.accuracy import AccuracyReward
from rewards.code import CodeFormatReward, code_reward
from rewards.deadline import call_with_deadline
from rewards.extract import completion_text
from rewards.format import BoxedFormatReward, FormatReward
from rewards.grading import get_grader
from rewards.length import CosineLengthReward, OverlongReward
from rewards.loading import RewardSpecTypeError, import_hint, load_file_module, module_attribute
from rewards.report import RewardReport
from rewards.settings import RewardArguments

logger = logging.getLogger(__name__)

_TRAINER_CALLBACKS = ("log_metric", "log_extra")


class RewardContractError(ValueError):
    """A reward function returned something other than one float or None per completion."""


class RewardFunctionError(RecipeError, RuntimeError):
    """A reward function failed on every completion of its first batch: a bug, not a pathological completion. A user
    error (the recipe's own function): printed as one line naming the exception and the line that raised it."""


def where_raised(error: BaseException, func: Callable) -> str:
    """` at file:line (`source`)` of the innermost frame of `error` in `func`'s own file (the user's reward), else
    of its innermost frame; "" when the error has no traceback."""
    frames = traceback.extract_tb(error.__traceback__)
    if not frames:
        return ""
    try:
        own_file = inspect.getsourcefile(inspect.unwrap(func))
    except TypeError:
        own_file = None
    own = [frame for frame in frames if own_file and os.path.abspath(frame.filename) == os.path.abspath(own_file)]
    frame = (own or frames)[-1]
    source = f" (`{frame.line.strip()}`)" if frame.line else ""
    return f" at {os.path.relpath(frame.filename)}:{frame.lineno}{source}"


def _grader(settings: RewardArguments):
    return get_grader(
        settings.reward_timeout,
        settings.reward_num_workers,
        settings.reward_worker_memory_mb,
        settings.answer_extraction_mode,
    )


def _cosine(settings: RewardArguments, max_completion_length: int | None) -> CosineLengthReward:
    values = {
        "min_value_correct": settings.cosine_min_value_correct,
        "max_value_correct": settings.cosine_max_value_correct,
        "min_value_wrong": settings.cosine_min_value_wrong,
        "max_value_wrong": settings.cosine_max_value_wrong,
    }
    return CosineLengthReward(_grader(settings), settings.cosine_max_length, max_completion_length, values)


# name -> factory(settings, max_completion_length) -> built-in reward (called with texts, report=..., **kwargs)
BUILTINS: dict[str, Callable[[RewardArguments, int | None], Callable]] = {
    "accuracy": lambda s, m: AccuracyReward(_grader(s)),
    "format": lambda s, m: FormatReward(),
    "boxed_format": lambda s, m: BoxedFormatReward(),
    "overlong": lambda s, m: OverlongReward(s.overlong_max_length, s.overlong_buffer_length, m),
    "cosine_length": _cosine,
    "code": lambda s, m: code_reward(s),
    "code_format": lambda s, m: CodeFormatReward(s.code_language),
}


def _validate_scores(name: str, spec: str, scores: Any, size: int) -> list[float | None]:
    """One float (or None) per completion, or a `RewardContractError` that says what came back instead."""
    where = f"Reward {name!r} ({spec})"
    if hasattr(scores, "tolist") and not isinstance(scores, (list, tuple)):  # numpy array, torch tensor
        scores = scores.tolist()
    if not isinstance(scores, (list, tuple)):
        raise RewardContractError(
            f"{where} returned {type(scores).__name__}; it must return a list with one float or None per completion "
            f"({size} here)."
        )
    if len(scores) != size:
        raise RewardContractError(
            f"{where} returned {len(scores)} scores for {size} completions; it must return exactly one float or None "
            "per completion, in order."
        )
    checked: list[float | None] = []
    for i, score in enumerate(scores):
        if score is None:
            checked.append(None)
            continue
        if not isinstance(score, numbers.Real):
            raise RewardContractError(
                f"{where} returned {score!r} ({type(score).__name__}) for completion {i}; scores must be floats or "
                "None."
            )
        value = float(score)
        if math.isinf(value):
            raise RewardContractError(f"{where} returned {value} for completion {i}; scores must be finite.")
        checked.append(None if math.isnan(value) else value)
    return checked


def _slice_kwargs(kwargs: dict[str, Any], index: int, size: int) -> dict[str, Any]:
    """The keyword arguments of completion `index` alone (per-column lists sliced; trainer callbacks muted)."""
    sliced = {}
    for key, value in kwargs.items():
        if key in _TRAINER_CALLBACKS:
            sliced[key] = lambda *args, **kw: None
        elif isinstance(value, (list, tuple)) and len(value) == size:
            sliced[key] = type(value)([value[index]]) if isinstance(value, list) else (value[index],)
        else:
            sliced[key] = value
    return sliced


class SafeReward:
    """A reward function with TRL's signature that validates, bounds and counts what it wraps (see module doc).

    Call it as TRL does: `reward(prompts=..., completions=..., completion_ids=..., **dataset_columns)`; it returns
    one float or None per completion. `last_report` holds the last call's per-completion failures and details.
    """

    def __init__(self, func: Callable, name: str, spec: str, builtin: bool, call_timeout: float | None) -> None:
        self.func = func
        self.__name__ = name  # TRL names the logged metrics rewards/<__name__>/...
        self.spec = spec
        self.builtin = builtin
        self.call_timeout = call_timeout
        self.calls = 0
        self.last_report: RewardReport | None = None
        self.last_seconds: float | None = None  # wall time of the last call (the code reward's sandbox throughput)
        self._warned: set[str] = set()

    def __repr__(self) -> str:
        return f"SafeReward({self.spec!r})"

    @property
    def reward_range(self) -> tuple[float, float] | None:
        """(lowest, highest) score the wrapped function can give, when it declares one (a `reward_range` attribute;
        every built-in does); `zero_reward_for_truncated` gives a truncated completion the lowest."""
        bounds = getattr(self.func, "reward_range", None)
        return None if bounds is None else (float(bounds[0]), float(bounds[1]))

    def __call__(self, completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        size = len(completions)
        report = RewardReport(size)
        start = time.perf_counter()
        if self.builtin:
            texts = [completion_text(c) for c in completions]
            scores = self.func(texts, report=report, **kwargs)
        else:
            scores = self._call_custom(list(completions), kwargs, report)
        checked = _validate_scores(self.__name__, self.spec, scores, size)
        for i, failed in enumerate(report.failed):
            if failed and not self.builtin:
                checked[i] = None
        self.calls += 1
        self.last_report = report
        self.last_seconds = time.perf_counter() - start
        self._log(kwargs.get("log_metric"), report)
        return checked

    def _log(self, log_metric: Callable | None, report: RewardReport) -> None:
        if log_metric is None:
            return
        log_metric(f"rewards/{self.__name__}/failures", float(report.failures))
        for key, value in report.counters.items():
            log_metric(f"rewards/{self.__name__}/{key}", float(value))

    def _warn_once(self, kind: str, message: str, exc: BaseException | None = None) -> None:
        if kind in self._warned:
            logger.debug(message)
            return
        self._warned.add(kind)
        logger.warning(
            "%s (further %s failures of this reward are only counted in rewards/%s/failures)",
            message,
            kind,
            self.__name__,
            exc_info=exc,
        )

    def _call_custom(self, completions: list, kwargs: dict[str, Any], report: RewardReport) -> list:
        size = len(completions)
        try:
            return call_with_deadline(self.func, self.call_timeout, completions=completions, **kwargs)
        except TimeoutError:
            self._warn_once(
                "timeout",
                f"Reward {self.__name__!r} ran past reward_call_timeout={self.call_timeout:g} s on a batch of "
                f"{size}: the batch scores None.",
            )
            for i in range(size):
                report.fail(i, "timeout")
            return [None] * size
        except Exception as exc:  # noqa: BLE001 - isolate the completions that cause it
            batch_error = exc
        # The batch raised: score one completion at a time so only the offending ones become None.
        scores: list[Any] = [None] * size
        for i in range(size):
            try:
                single = call_with_deadline(
                    self.func, self.call_timeout, completions=[completions[i]], **_slice_kwargs(kwargs, i, size)
                )
                scores[i] = _validate_scores(self.__name__, self.spec, single, 1)[0]
            except RewardContractError:
                raise
            except TimeoutError:
                report.fail(i, "timeout")
            except Exception as exc:  # noqa: BLE001
                report.fail(i, f"{type(exc).__name__}: {str(exc)[:200]}")
        if self.calls == 0 and report.failures == size:
            raise RewardFunctionError(
                f"Reward {self.__name__!r} ({self.spec}) raised on every completion of its first batch: "
                f"{type(batch_error).__name__}: {batch_error}{where_raised(batch_error, self.func)}. Fix the function "
                "(test it on a few rows with `make score`)."
            ) from batch_error
        self._warn_once(
            "exception",
            f"Reward {self.__name__!r} raised {type(batch_error).__name__}: {batch_error}; {report.failures} of "
            f"{size} completions score None.",
            batch_error,
        )
        return scores


class AsyncSafeReward(SafeReward):
    """`SafeReward` for an `async def` reward (TRL awaits it on its event loop): bounded with `asyncio.wait_for`."""

    async def __call__(self, completions: Sequence[Any], **kwargs: Any) -> list[float | None]:  # type: ignore[override]
        size = len(completions)
        report = RewardReport(size)
        try:
            scores = await asyncio.wait_for(self.func(completions=list(completions), **kwargs), self.call_timeout)
        except asyncio.TimeoutError:
            self._warn_once("timeout", f"Async reward {self.__name__!r} ran past {self.call_timeout:g} s.")
            scores = [None] * size
            for i in range(size):
                report.fail(i, "timeout")
        except Exception as exc:  # noqa: BLE001
            if self.calls == 0:
                raise RewardFunctionError(
                    f"Async reward {self.__name__!r} ({self.spec}) raised on its first batch: {type(exc).__name__}: "
                    f"{exc}{where_raised(exc, self.func)}. Fix the function (test it on a few rows with `make score`)."
                ) from exc
            self._warn_once("exception", f"Async reward {self.__name__!r} raised: {exc}", exc)
            scores = [None] * size
            for i in range(size):
                report.fail(i, f"{type(exc).__name__}: {str(exc)[:200]}")
        checked = _validate_scores(self.__name__, self.spec, scores, size)
        self.calls += 1
        self.last_report = report
        self._log(kwargs.get("log_metric"), report)
        return checked


def _unknown_name_error(spec: str) -> ValueError:
    close = difflib.get_close_matches(spec, sorted(BUILTINS), n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    return ValueError(
        f"Unknown reward {spec!r}.{hint} Built-in rewards: {', '.join(sorted(BUILTINS))}. A custom reward is "
        "'package.module:function' or 'path/to/file.py:function'."
    )


def _check_signature(func: Callable, spec: str) -> None:
    try:
        parameters = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):  # builtins, some C callables: nothing to check
        return
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        raise RewardSpecTypeError(
            f"Reward function {spec!r} must accept **kwargs: TRL calls it with prompts=, completions=, "
            "completion_ids=, every dataset column, trainer_state=, log_metric= and log_extra=. Write it as "
            "`def fn(completions, answer, **kwargs)`."
        )


def resolve_custom(spec: str) -> Callable:
    """The function named by `package.module:function` or `path/to/file.py:function`."""
    location, _, attribute = spec.rpartition(":")
    if not location or not attribute:
        raise ValueError(f"Reward spec {spec!r}: expected 'package.module:function' or 'path/to/file.py:function'.")
    if location.endswith(".py") or "/" in location or "\\" in location:
        module = load_file_module(location, spec)
        where = f"Reward file {location!r}"
    else:
        try:
            module = importlib.import_module(location)
        except Exception as exc:
            raise RecipeImportError(import_hint(location, spec, exc)) from exc
        where = f"Module {location!r}"
    func = module_attribute(module, attribute, where, spec)
    _check_signature(func, spec)
    return func


def get_reward_funcs(
    specs: Sequence[str] | str,
    settings: RewardArguments | None = None,
    max_completion_length: int | None = None,
    reward_weights: Sequence[float] | None = None,
) -> list[SafeReward]:
    """Resolve a recipe's `reward_funcs` into TRL reward functions, each wrapped in a `SafeReward`.

    Args:
        specs: built-in names, `package.module:function` or `path/to/file.py:function`.
        settings: the recipe's `RewardArguments` (timeouts, workers, length settings); defaults if None.
        max_completion_length: the trainer's generation limit, the default L_max of `overlong`/`cosine_length`.
        reward_weights: if given, checked to align with `specs`.
    """
    if isinstance(specs, str):
        specs = [specs]
    if not specs:
        raise ValueError("reward_funcs is empty: name at least one reward (e.g. reward_funcs: [accuracy]).")
    if reward_weights is not None and len(reward_weights) != len(specs):
        raise ValueError(
            f"reward_weights has {len(reward_weights)} values but reward_funcs has {len(specs)} ({list(specs)}): "
            "give one weight per reward function, in the same order."
        )
    settings = settings or RewardArguments()
    funcs: list[SafeReward] = []
    for spec in specs:
        spec = str(spec).strip()
        if spec in BUILTINS:
            inner = BUILTINS[spec](settings, max_completion_length)
            funcs.append(SafeReward(inner, spec, spec, builtin=True, call_timeout=None))
            continue
        if ":" not in spec:
            raise _unknown_name_error(spec)
        func = resolve_custom(spec)
        name = getattr(func, "__name__", spec.rpartition(":")[2])
        wrapper = AsyncSafeReward if inspect.iscoroutinefunction(func) else SafeReward
        funcs.append(wrapper(func, name, spec, builtin=False, call_timeout=settings.reward_call_timeout))
    names = [f.__name__ for f in funcs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(
            f"Two reward functions share the name {duplicates[0]!r} ({list(specs)}): their metrics would be mixed. "
            "Rename one of the functions."
        )
    return funcs
