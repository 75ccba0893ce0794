"""Grading completions against gold answers: extraction, caches, the fast path, and the verifier pool.

`Grader.grade(texts, golds)` is what the `accuracy` and `cosine_length` rewards call on a batch:

1. the gold is normalised once per distinct gold and the final answer extracted under the grader's
   `extraction_mode` (`rewards.answer_policy`, linear time);
2. a verdict already known for the same (gold, answer) pair is reused: the G completions of a group often agree;
3. two plain numbers are compared exactly in microseconds (`fast_numeric_verdict`), never reaching sympy;
4. what is left, deduplicated, goes to the verifier processes (`rewards.pool`), each pair under a hard deadline;
   with the pool off (`num_workers=0`) it runs in this process under a `SIGALRM` deadline (main thread only).

The module-level helpers `grade_answer`, `grade_batch` and `answers_equivalent` use a shared default `Grader`.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rewards.answer_policy import DEFAULT_EXTRACTION_MODE, check_extraction_mode, extract_answer
from rewards.deadline import DeadlineExceeded, alarm_deadline, on_main_thread
from rewards.echoes import question_numbers
from rewards.extract import (
    Answer,
    answer_variants,
    completion_text,
    fast_numeric_verdict,
    normalize_answer,
    normalize_gold,
    same_text,
    top_level_parts,
)
from rewards.pool import PoolUnavailable, default_num_workers, get_pool

logger = logging.getLogger(__name__)

# Statuses of a graded completion. The first three are verdicts; the last three are failures (counted and logged).
OK, NO_ANSWER, GOLD_UNPARSABLE = "ok", "no_answer", "gold_unparsable"
TIMEOUT, ERROR, CRASH = "timeout", "error", "crash"
FAILURES = frozenset({TIMEOUT, ERROR, CRASH})
_VERDICT_CACHE_SIZE = 65536


@dataclass(frozen=True)
class GradeResult:
    """One completion graded against its gold.

    `verdict`: True/False, or None when the gold cannot be parsed. A failure (`status` in `FAILURES`: the
    verification timed out, raised, or crashed its process) has verdict False. `extracted` is the normalised final
    answer found in the completion (None if there is none).
    """

    verdict: bool | None
    extracted: str | None
    status: str

    @property
    def failed(self) -> bool:
        return self.status in FAILURES


class Grader:
    """Grades (completion, gold) pairs with math-verify, time-bounded, cached and in parallel.

    Args:
        timeout: seconds allowed to verify one (gold, answer) pair.
        num_workers: verifier processes (None: `default_num_workers()`; 0: verify in this process).
        memory_mb: address-space limit of each verifier process (None: none).
        extraction_mode: which part of a completion is its final answer (`rewards.answer_policy.EXTRACTION_MODES`).
    """

    def __init__(
        self,
        timeout: float = 5.0,
        num_workers: int | None = None,
        memory_mb: int | None = 2048,
        extraction_mode: str = DEFAULT_EXTRACTION_MODE,
    ) -> None:
        self.extraction_mode = check_extraction_mode(extraction_mode)
        if timeout <= 0:
            raise ValueError(f"reward_timeout must be > 0 seconds, got {timeout}.")
        self.timeout = float(timeout)
        self.num_workers = default_num_workers() if num_workers is None else int(num_workers)
        if self.num_workers < 0:
            raise ValueError(f"reward_num_workers must be >= 0 (0: no worker processes), got {num_workers}.")
        self.memory_mb = memory_mb
        self._pool = None
        self._pool_failed = False
        self._verdicts: OrderedDict[tuple, tuple[str, bool | None]] = OrderedDict()
        self._unparsable_golds: set[str] = set()
        self._warned_golds: set[str] = set()
        self._warned_unbounded = False

    # -- public API --------------------------------------------------------------------------------------------

    def grade(
        self, completions: Sequence[Any], golds: Sequence[Any], prompts: Sequence[Any] | None = None
    ) -> list[GradeResult]:
        """Grade each completion (text or conversational) against the gold at the same position.

        `prompts` (optional, aligned): the prompt or question of each completion, text or conversational (what TRL
        passes to rewards as `prompts`). With it, an answer that restates the question's numbers instead of computing
        with them is caught in more forms (`rewards.echoes`); without it, unevaluated arithmetic still scores 0.
        """
        if len(completions) != len(golds):
            raise ValueError(f"{len(completions)} completions but {len(golds)} gold answers: they must align.")
        if prompts is not None and len(prompts) != len(golds):
            raise ValueError(f"{len(prompts)} prompts but {len(golds)} gold answers: they must align.")
        gold_texts = _normalize_golds(golds)
        questions = _question_numbers(prompts, len(golds))
        multipart = {g: len(top_level_parts(g)) > 1 for g in set(gold_texts) if g is not None}
        answers = [
            extract_answer(completion_text(c), self.extraction_mode, multipart.get(g, False))
            for c, g in zip(completions, gold_texts, strict=True)
        ]
        pairs = zip(gold_texts, answers, questions, strict=True)
        keys = [None if g is None or a is None else (g, a.text, a.kind, a.context, q) for g, a, q in pairs]
        known = self._lookup(keys)
        slow = list(dict.fromkeys(k for k, v in zip(keys, known, strict=True) if k is not None and v is None))
        if slow:
            outcomes = dict(zip(slow, self._verify_many("verify_reading", slow), strict=True))
            for key, outcome in outcomes.items():
                self._remember(key, outcome)
            known = [outcomes.get(k) if v is None and k is not None else v for k, v in zip(keys, known, strict=True)]
        results = []
        for gold, answer, key, outcome in zip(gold_texts, answers, keys, known, strict=True):
            results.append(self._result(gold, answer, key, outcome))
        return results

    def equivalent(self, a: str, b: str) -> bool:
        """Whether two answer strings are the same answer under math-verify (`a` read as the reference)."""
        a, b = normalize_answer(str(a)), normalize_answer(str(b))
        if a == b:
            return True
        if not a or not b:
            return False
        fast = self._fast(a, b)
        if fast is not None:
            return fast
        status, value = self._verify_many("equivalent", [(a, b)])[0]
        return bool(value) if status == OK else False

    def close(self) -> None:
        """Stop the verifier processes, shared with graders of the same settings (restarted on the next use)."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    # -- internals -----------------------------------------------------------------------------------------------

    @staticmethod
    def _fast(gold: str, answer: str) -> bool | None:
        """A verdict from plain-number comparison over all readings, or None if sympy must decide."""
        verdicts = [fast_numeric_verdict(g, a) for g in answer_variants(gold) for a in answer_variants(answer)]
        if any(v is True for v in verdicts):
            return True
        if verdicts and all(v is False for v in verdicts):
            return False
        return None

    def _lookup(self, keys: list[tuple | None]) -> list[tuple[str, Any] | None]:
        """The known outcome of each key: cached, gold known unparsable, or fast path; None if unknown.

        An outcome is `(status, value)`; an `ok` value is `verify_reading`'s `(verdict, reading)`.
        """
        known: list[tuple[str, Any] | None] = []
        for key in keys:
            if key is None:
                known.append(None)
                continue
            gold, answer = key[:2]
            if gold in self._unparsable_golds:  # only the same text can match it (`same_text`)
                same = same_text(gold, answer, key[2])
                known.append((OK, (True, None if key[2] == "latex" else answer) if same else (None, None)))
                continue
            cached = self._verdicts.get(key)
            if cached is not None:
                self._verdicts.move_to_end(key)
                known.append(cached)
                continue
            fast = self._fast(gold, answer)
            known.append(None if fast is None else (OK, (fast, None)))
        return known

    def _remember(self, key: tuple, outcome: tuple[str, Any]) -> None:
        status, value = outcome
        if status == OK and value[0] is None:
            self._unparsable_golds.add(key[0])
            return
        # Failures are cached too: the same pathological answer in a group should cost one timeout, not G.
        self._verdicts[key] = (status, (bool(value[0]), value[1]) if status == OK else None)
        if len(self._verdicts) > _VERDICT_CACHE_SIZE:
            self._verdicts.popitem(last=False)

    def _result(self, gold: str | None, answer: Answer | None, key, outcome) -> GradeResult:
        extracted = answer.text if answer is not None else None
        if gold is None or (outcome is not None and outcome[0] == OK and outcome[1][0] is None):
            return GradeResult(None, extracted, GOLD_UNPARSABLE)
        if answer is None:
            return GradeResult(False, None, NO_ANSWER)
        status, value = outcome
        if status != OK:
            return GradeResult(False, extracted, status)
        verdict, reading = value
        if reading == "":  # free text in which math-verify read no answer
            return GradeResult(False, None, NO_ANSWER)
        return GradeResult(bool(verdict), extracted if reading is None else reading, OK)

    def warn_unparsable_gold(self, gold: Any) -> bool:
        """Log a gold that cannot be parsed, once per distinct gold; returns whether it was new."""
        text = str(gold)
        if text in self._warned_golds:
            return False
        self._warned_golds.add(text)
        logger.warning(
            "Gold answer %r cannot be parsed by math-verify: its completions score None (left out of their group), "
            "not 0. Fix the dataset's answer column or filter such rows.",
            text[:200],
        )
        return True

    def _verify_many(self, name: str, jobs: list[tuple]) -> list[tuple[str, Any]]:
        if self.num_workers > 0 and not self._pool_failed:
            try:
                self._pool = get_pool(self.num_workers, self.memory_mb)
                return self._pool.map(name, jobs, self.timeout)
            except PoolUnavailable as exc:
                logger.error("Verifier processes unavailable (%s); verifying in the trainer process instead.", exc)
                self._pool_failed = True
                self.close()
        return [self._verify_here(name, job) for job in jobs]

    def _verify_here(self, name: str, job: tuple) -> tuple[str, Any]:
        import rewards.equivalence  # noqa: F401 - before the alarm: an import it cuts short leaves broken modules
        from rewards._worker import FUNCTIONS

        function = FUNCTIONS[name]
        if not on_main_thread() and not self._warned_unbounded:
            self._warned_unbounded = True
            logger.warning(
                "Verifying answers in-process off the main thread: no time limit can be enforced. Set "
                "reward_num_workers > 0 to verify in worker processes with a hard deadline."
            )
        try:
            with alarm_deadline(self.timeout):
                return OK, function(*job)
        except DeadlineExceeded:
            return TIMEOUT, None
        except Exception as exc:  # noqa: BLE001 - a verifier error is a failed completion, not a crashed step
            return ERROR, f"{type(exc).__name__}: {str(exc)[:200]}"


def _question_numbers(prompts: Sequence[Any] | None, size: int) -> list[tuple[str, ...]]:
    """`question_numbers` of each prompt, once per distinct prompt (a group's G completions share theirs)."""
    if prompts is None:
        return [()] * size
    cache: dict[Any, tuple[str, ...]] = {}
    numbers = []
    for prompt in prompts:
        key = prompt if isinstance(prompt, str) else repr(prompt)
        if key not in cache:
            cache[key] = question_numbers(prompt)
        numbers.append(cache[key])
    return numbers


def _normalize_golds(golds: Sequence[Any]) -> list[str | None]:
    """`normalize_gold` of each gold, once per distinct gold (the G completions of a group share theirs)."""
    cache: dict[tuple, str | None] = {}
    texts = []
    for gold in golds:
        try:
            key = (type(gold), gold)  # the type too: 1, 1.0 and True are equal keys but different golds
            if key not in cache:
                cache[key] = normalize_gold(gold)
            texts.append(cache[key])
        except TypeError:  # an unhashable gold (a list)
            texts.append(normalize_gold(gold))
    return texts


_GRADERS: dict[tuple, Grader] = {}
_GRADERS_LOCK = threading.Lock()


def get_grader(
    timeout: float = 5.0,
    num_workers: int | None = None,
    memory_mb: int | None = 2048,
    extraction_mode: str = DEFAULT_EXTRACTION_MODE,
) -> Grader:
    """The shared `Grader` for these settings (rewards with the same settings share one pool and its caches)."""
    key = (float(timeout), num_workers, memory_mb, extraction_mode)
    with _GRADERS_LOCK:
        if key not in _GRADERS:
            _GRADERS[key] = Grader(timeout, num_workers, memory_mb, extraction_mode)
        return _GRADERS[key]


def grade_batch(
    completions: Sequence[Any],
    golds: Sequence[Any],
    grader: Grader | None = None,
    prompts: Sequence[Any] | None = None,
) -> list[GradeResult]:
    """Grade many (completion, gold) pairs at once, in parallel (the default grader unless one is given); `prompts`
    as in `Grader.grade`."""
    return (grader or get_grader()).grade(completions, golds, prompts)


def grade_answer(completion: Any, gold: Any, grader: Grader | None = None) -> tuple[bool | None, str | None]:
    """Grade one completion: `(verdict, extracted)`.

    `verdict` is True/False, or None when the gold cannot be parsed; `extracted` is the normalised final answer
    found in the completion (None if it has none). A verification that times out or fails gives False.
    """
    result = grade_batch([completion], [gold], grader)[0]
    return result.verdict, result.extracted


def answers_equivalent(a: Any, b: Any, grader: Grader | None = None) -> bool:
    """Whether two final answers are the same under math-verify (e.g. `\\frac{1}{2}` and `0.5`); for maj@k voting.

    `a` is read as the reference. Thousands separators, `$...$`, degree signs and a percent sign on either side are
    normalised as in grading. A comparison that times out gives False.
    """
    return (grader or get_grader()).equivalent(a, b)
