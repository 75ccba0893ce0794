"""Evaluation: pass@1, pass@k and maj@k on math benchmarks, graded by the same verifier that rewards training.

One run = one model on one benchmark, written to one folder:
- `samples.jsonl`: one row per (problem, sample), appended and flushed batch by batch, so an interrupted run loses
  nothing and a rerun of the same command generates only what is missing;
- `summary.json` / `summary.md`: pass@1 (mean over samples), unbiased pass@k for k = 1, 2, 4, ..., n, maj@n,
  mean completion length of correct and of incorrect answers, truncation rate, unparsable golds;
- `eval_config.json`: everything that decides the samples, checked on resume so that runs never mix.

Every sample is a deterministic function of (seed, problem index, sample index), not of batch composition: sampling
uses the Gumbel-max trick with one random generator per sample (`SeededSampling`), so a resumed run writes the same
rows as an uninterrupted one. Generation runs on vLLM when it is installed and a GPU is present, else on batched
transformers `generate` with left padding.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import math
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

SAMPLES_FILE = "samples.jsonl"
SUMMARY_JSON = "summary.json"
SUMMARY_MD = "summary.md"
CONFIG_FILE = "eval_config.json"


# --------------------------------------------------------------------------------------------------------------------
# Metrics (pure functions)
# --------------------------------------------------------------------------------------------------------------------


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from `c` correct answers among `n` samples: 1 - C(n-c, k) / C(n, k).

    Chen et al. (2021), "Evaluating Large Language Models Trained on Code", eq. 1 and its numerically stable product
    form 1 - prod_{i=n-c+1}^{n} (1 - k / i), which never forms the huge binomial coefficients.
    """
    if not (isinstance(n, int) and isinstance(c, int) and isinstance(k, int)):
        raise TypeError(f"pass_at_k takes integers, got n={n!r}, c={c!r}, k={k!r}.")
    if n < 1 or not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs n >= 1, 0 <= c <= n and 1 <= k <= n; got n={n}, c={c}, k={k}.")
    if n - c < k:  # every k-subset contains a correct sample
        return 1.0
    product = 1.0
    for i in range(n - c + 1, n + 1):
        product *= 1.0 - k / i
    return 1.0 - product


def pass_at_k_values(n: int) -> list[int]:
    """The k reported for n samples: powers of two up to n, and n itself (1, 2, 4, ..., n)."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}.")
    ks = [1 << i for i in range(n.bit_length()) if (1 << i) <= n]
    return ks if ks[-1] == n else [*ks, n]


def majority_vote(
    answers: Sequence[str | None], correct: Sequence[bool], equivalent: Callable[[str, str], bool]
) -> bool:
    """maj@k: whether the most frequent answer among the samples is correct.

    Answers are grouped by `equivalent` (math-verify equivalence, so `0.5`, `1/2` and `\\frac{1}{2}` are one vote),
    not by string equality; each answer joins the first earlier group whose first answer it is equivalent to.
    Samples with no extracted answer do not vote. The largest group wins; a tie goes to the group whose first answer
    came first, so the result never depends on dict or set order. The winning group is scored by its first answer's
    verdict. No answer at all scores False. (Majority voting as self-consistency, Wang et al. 2022.)
    """
    if len(answers) != len(correct):
        raise ValueError(f"majority_vote: {len(answers)} answers but {len(correct)} verdicts.")
    groups: list[list[int]] = []  # indices of the samples in each group, in order of first appearance
    for i, answer in enumerate(answers):
        if answer is None:
            continue
        for group in groups:
            first = answers[group[0]]
            if answer == first or equivalent(first, answer):
                group.append(i)
                break
        else:
            groups.append([i])
    if not groups:
        return False
    best = max(groups, key=lambda group: (len(group), -group[0]))
    return bool(correct[best[0]])


# --------------------------------------------------------------------------------------------------------------------
# Gold answers: each benchmark stores its answer differently; these bring them to one plain answer string.
# --------------------------------------------------------------------------------------------------------------------


def gsm8k_final_answer(text: str) -> str | None:
    """GSM8K's gold: the text after the last `####` of the worked solution, without thousands separators.

    Cobbe et al. (2021), GSM8K: every solution ends with `#### <number>`.
    """
    if "####" not in text:
        return None
    answer = text.rsplit("####", 1)[1].strip()
    answer = re.sub(r"(?<=\d),(?=\d{3}\b)", "", answer)
    return answer or None


def last_boxed(text: str) -> str | None:
    """The content of the last complete `\\boxed{...}` (or `\\fbox{...}`) in `text`; None if there is none.

    How MATH and Minerva-Math mark the final answer inside a worked solution (Hendrycks et al. 2021; Lewkowycz et
    al. 2022). The reward library's extractor, so that a gold is read exactly as the verifier reads answers.
    """
    from rewards.extract import last_boxed as reward_last_boxed

    content = reward_last_boxed(text)
    if content is None:
        return None
    return content.strip() or None


def _strip_dollars(text: str) -> str:
    text = text.strip()
    while len(text) >= 2 and text.startswith("$") and text.endswith("$"):
        text = text[1:-1].strip()
    return text


def list_answer(value: Any) -> str | None:
    """A list-valued gold (OlympiadBench's `final_answer`, the Dr.GRPO suite's Minerva answers) as one answer string.

    Each element loses surrounding `$...$` and whitespace; several elements (or one element listing several answers
    as `$69$,$84$`) are joined with ", " so math-verify reads them as one set of answers.
    """
    items = value if isinstance(value, (list, tuple)) else [value]
    parts: list[str] = []
    for item in items:
        if item is None:
            continue
        text = str(item).strip()
        # `$69$,$84$`: several math spans in one element are several answers
        spans = re.findall(r"\$([^$]+)\$", text) if text.count("$") >= 4 else []
        if spans:
            parts.extend(span.strip() for span in spans)
        else:
            parts.append(_strip_dollars(text))
    parts = [p for p in parts if p]
    return ", ".join(parts) if parts else None


def number_answer(value: Any) -> str | None:
    """A gold stored as a number (AMC's `27.0`) as the shortest exact string: `27`, `0.5`, `-3`."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        return str(int(value)) if value.is_integer() else repr(value)
    text = str(value).strip()
    try:
        return number_answer(float(text)) if re.fullmatch(r"-?\d+(?:\.\d+)?", text) else (text or None)
    except ValueError:
        return text or None


def plain_answer(value: Any) -> str | None:
    """A gold that already is the answer (MATH-500, AIME): its string, trimmed; numbers as in `number_answer`."""
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return number_answer(value)
    text = _strip_dollars(str(value))
    return text or None


def auto_answer(value: Any) -> str | None:
    """Guess the gold's shape for a local file: list, number, GSM8K `#### N`, a solution with `\\boxed{}`, or plain."""
    if isinstance(value, (list, tuple)):
        return list_answer(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return number_answer(value)
    if value is None:
        return None
    text = str(value)
    if "####" in text:
        return gsm8k_final_answer(text)
    if re.search(r"\\(?:boxed|fbox)\s*\{", text):
        return last_boxed(text)
    return plain_answer(text)


ANSWER_FORMATS: dict[str, Callable[[Any], str | None]] = {
    "auto": auto_answer,
    "plain": plain_answer,
    "gsm8k": lambda value: gsm8k_final_answer(str(value)) if value is not None else None,
    "last_boxed": lambda value: last_boxed(str(value)) if value is not None else None,
    "list": list_answer,
    "number": number_answer,
}


def normalize_gold(value: Any, answer_format: str) -> str | None:
    """The gold answer string for `value` stored in `answer_format`; None when no answer can be read from it."""
    if answer_format not in ANSWER_FORMATS:
        raise ValueError(f"Unknown answer_format {answer_format!r}. Choose one of: {', '.join(ANSWER_FORMATS)}.")
    return ANSWER_FORMATS[answer_format](value)


# --------------------------------------------------------------------------------------------------------------------
# Benchmark presets
# --------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BenchmarkPreset:
    """Where a standard benchmark lives on the hub and how to read its question and gold answer."""

    name: str
    title: str
    dataset_name: str
    split: str
    question_column: str
    answer_column: str
    answer_format: str
    dataset_config: str | None = None
    note: str = ""


PRESETS: dict[str, BenchmarkPreset] = {
    preset.name: preset
    for preset in (
        BenchmarkPreset("aime24", "AIME 2024", "HuggingFaceH4/aime_2024", "train", "problem", "answer", "plain"),
        BenchmarkPreset(
            "amc",
            "AMC",
            "AI-MO/aimo-validation-amc",
            "train",
            "problem",
            "answer",
            "number",
            note="83 AMC 12 2022-2023 problems, the AMC set of the Dr.GRPO paper's evaluation suite.",
        ),
        BenchmarkPreset(
            "amc23", "AMC 2023", "math-ai/amc23", "test", "question", "answer", "number", note="40 AMC 2023 problems."
        ),
        BenchmarkPreset("math500", "MATH-500", "HuggingFaceH4/MATH-500", "test", "problem", "answer", "plain"),
        BenchmarkPreset(
            "minerva",
            "Minerva Math",
            "knoveleng/Minerva-Math",
            "train",
            "problem",
            "solution",
            "last_boxed",
            note="The gold is the last \\boxed{} of the worked solution.",
        ),
        BenchmarkPreset(
            "olympiadbench",
            "OlympiadBench",
            "Hothan/OlympiadBench",
            "train",
            "question",
            "final_answer",
            "list",
            dataset_config="OE_TO_maths_en_COMP",
            note="Open-ended, text-only English maths competition subset; final_answer is a list.",
        ),
        BenchmarkPreset("gsm8k", "GSM8K", "openai/gsm8k", "test", "question", "answer", "gsm8k", dataset_config="main"),
    )
}

# The order of the Dr.GRPO paper's Table 4, then the rest.
BENCHMARK_ORDER = ["aime24", "amc", "amc23", "math500", "minerva", "olympiadbench", "gsm8k"]

_ALIASES = {
    "aime": "aime24",
    "aime2024": "aime24",
    "aime_2024": "aime24",
    "amc2023": "amc23",
    "math": "math500",
    "math_500": "math500",
    "math-500": "math500",
    "minerva_math": "minerva",
    "minervamath": "minerva",
    "olympiad_bench": "olympiadbench",
    "olympiad": "olympiadbench",
}

# Greedy pass@1 (%) reported in Liu et al., "Understanding R1-Zero-Like Training: A Critical Perspective"
# (arXiv 2503.20783), Table 4: Qwen-Math template, 3000 new tokens.
PAPER_RESULTS: dict[str, dict[str, float]] = {
    "Oat-Zero-7B (paper)": {"aime24": 43.3, "amc": 62.7, "math500": 80.0, "minerva": 30.1, "olympiadbench": 41.0},
    "Oat-Zero-1.5B (paper)": {"aime24": 20.0, "amc": 53.0, "math500": 74.2, "minerva": 25.7, "olympiadbench": 37.6},
}


def resolve_preset(name: str) -> BenchmarkPreset:
    """The preset called `name` (case-insensitive, common aliases accepted)."""
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    if key not in PRESETS:
        raise ValueError(
            f"Unknown benchmark {name!r}. Presets: {', '.join(PRESETS)}; or pass a local .jsonl/.json/.parquet/.csv "
            "file with --data FILE --question_column ... --answer_column ..."
        )
    return PRESETS[key]


# --------------------------------------------------------------------------------------------------------------------
# Problems
# --------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    """One benchmark problem: its position (stable across runs), question and normalised gold (None: unreadable)."""

    index: int
    question: str
    gold: str | None


def problems_from_rows(
    rows: Iterable[dict], question_column: str, answer_column: str, answer_format: str, source: str = "the dataset"
) -> list[Problem]:
    """Turn dataset rows into `Problem`s, reading the gold with `answer_format`."""
    problems = []
    for index, row in enumerate(rows):
        for column in (question_column, answer_column):
            if column not in row:
                raise ValueError(
                    f"Column {column!r} not in {source}; its rows have {sorted(row)}. "
                    "Set --question_column / --answer_column."
                )
        question = row[question_column]
        if not isinstance(question, str) or not question.strip():
            raise ValueError(f"Row {index} of {source}: question column {question_column!r} is empty or not text.")
        problems.append(Problem(index, question, normalize_gold(row[answer_column], answer_format)))
    return problems


def load_rows(
    data: str | None = None, dataset_name: str | None = None, dataset_config: str | None = None, split: str = "test"
) -> list[dict]:
    """Rows of a local file (via the data layer's loader) or of a hub dataset split."""
    if data:
        from drgrpo.data import load_local

        if not Path(data).exists():
            raise FileNotFoundError(f"Evaluation data {str(data)!r} does not exist (--data / BENCH=FILE).")
        return list(load_local(data))
    if dataset_name:
        from datasets import load_dataset

        try:
            return list(load_dataset(dataset_name, dataset_config, split=split))
        except (ConnectionError, OSError) as error:  # offline, or the hub is unreachable
            raise RuntimeError(
                f"Cannot load {dataset_name} ({split}) from the hub: {error}. Without hub access, download the "
                "benchmark file elsewhere and pass it with --data FILE (the preset still picks the columns)."
            ) from error
    raise ValueError("No data: pass a benchmark preset (--benchmark) or a local file (--data FILE).")


def data_fingerprint(problems: Sequence[Problem]) -> str:
    """A short hash of the questions and golds, so that a resumed run is known to evaluate the same problems."""
    digest = hashlib.sha256()
    for problem in problems:
        digest.update(json.dumps([problem.question, problem.gold]).encode())
    return digest.hexdigest()[:16]


# --------------------------------------------------------------------------------------------------------------------
# Prompts
# --------------------------------------------------------------------------------------------------------------------


def build_prompts(
    tokenizer,
    questions: Sequence[str],
    template: str,
    system_prompt: str | None = None,
    chat_template_kwargs: dict | None = None,
) -> list[tuple[str, list[int]]]:
    """(prompt text, prompt token ids) for each question, exactly as training builds them.

    Uses the template layer (`drgrpo.templates`): text templates are rendered and tokenized as TRL tokenizes text
    prompts; `chat` goes through the tokenizer's chat template with `add_generation_prompt=True` and the recipe's
    `chat_template_kwargs`, as TRL does for conversational prompts.
    """
    from drgrpo.templates import prompt_text, prompt_token_ids, render_prompt

    rendered = [render_prompt(question, template, system_prompt) for question in questions]
    texts = [prompt_text(prompt, tokenizer, chat_template_kwargs) for prompt in rendered]
    ids = prompt_token_ids(rendered, tokenizer, chat_template_kwargs)
    return list(zip(texts, ids, strict=True))


# --------------------------------------------------------------------------------------------------------------------
# Sampling: one deterministic random stream per sample
# --------------------------------------------------------------------------------------------------------------------


def sample_seed(seed: int, problem_index: int, sample_index: int) -> int:
    """The random seed of one sample: a hash of (run seed, problem, sample), stable across processes and machines."""
    digest = hashlib.blake2b(f"{seed}:{problem_index}:{sample_index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1  # 63 bits: a valid torch and vLLM seed


def top_p_mask(scores, top_p: float):
    """Boolean mask of the tokens outside the nucleus: the smallest set whose probability reaches `top_p`.

    Holtzman et al. (2020), nucleus sampling; the same cut as transformers' `TopPLogitsWarper` (the most likely
    token always stays).
    """
    import torch

    sorted_scores, order = torch.sort(scores, descending=False, dim=-1)
    cumulative = sorted_scores.softmax(dim=-1).cumsum(dim=-1)
    remove_sorted = cumulative <= (1 - top_p)
    remove_sorted[..., -1] = False
    return remove_sorted.scatter(-1, order, remove_sorted)


class SeededSampling:
    """A transformers logits processor that turns greedy decoding into sampling with one generator per row.

    Gumbel-max trick (Gumbel 1954; Maddison et al. 2014): argmax(logits / T + G) with G ~ Gumbel(0, 1) i.i.d. is
    an exact sample from softmax(logits / T). Each row draws its noise from its own `torch.Generator` seeded by
    `sample_seed(...)`, so a sample does not depend on which other samples share its batch, and a resumed run
    reproduces an uninterrupted one. Temperature is applied first, then top-p, as in transformers and vLLM.
    """

    def __init__(self, row_seeds: Sequence[int], temperature: float, top_p: float = 1.0):
        if temperature <= 0:
            raise ValueError("SeededSampling needs temperature > 0 (temperature 0 is plain greedy decoding).")
        if not 0 < top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}.")
        self.row_seeds = list(row_seeds)
        self.temperature = temperature
        self.top_p = top_p
        self._generators: list | None = None

    def __call__(self, input_ids, scores):
        import torch

        if self._generators is None:
            self._generators = [torch.Generator(device=scores.device).manual_seed(s) for s in self.row_seeds]
        if scores.shape[0] != len(self._generators):
            raise ValueError(f"SeededSampling built for {len(self._generators)} rows, got {scores.shape[0]}.")
        scores = scores.float() / self.temperature
        if self.top_p < 1.0:
            scores = scores.masked_fill(top_p_mask(scores, self.top_p), float("-inf"))
        tiny = torch.finfo(torch.float32).tiny
        noise = torch.stack(
            [
                torch.rand(scores.shape[-1], generator=g, device=scores.device).clamp_(tiny, 1.0 - 1e-7)
                for g in self._generators
            ]
        )
        return scores - torch.log(-torch.log(noise))


# --------------------------------------------------------------------------------------------------------------------
# Generation backends
# --------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    """One sample to generate."""

    problem_index: int
    sample_index: int
    prompt_ids: tuple[int, ...]
    seed: int


@dataclass(frozen=True)
class Generation:
    """What a backend returns for one request."""

    text: str
    num_tokens: int
    truncated: bool


def vllm_usable() -> bool:
    """True when vLLM is installed and a CUDA GPU is visible (vLLM is never imported on a CPU-only machine)."""
    if importlib.util.find_spec("vllm") is None:
        return False
    import torch

    return torch.cuda.is_available()


def choose_backend(name: str) -> str:
    """Resolve `auto` to `vllm` or `transformers`; refuse `vllm` where it cannot run."""
    if name == "auto":
        return "vllm" if vllm_usable() else "transformers"
    if name == "vllm" and not vllm_usable():
        raise ValueError(
            "backend 'vllm' needs vLLM installed (`pip install -e '.[vllm]'`) and a CUDA GPU; "
            "use backend 'transformers' or 'auto'."
        )
    if name not in ("vllm", "transformers"):
        raise ValueError(f"Unknown backend {name!r}: choose 'auto', 'vllm' or 'transformers'.")
    return name


def _eos_ids(model_generation_config, tokenizer) -> list[int]:
    ids = model_generation_config.eos_token_id if model_generation_config is not None else None
    ids = [ids] if isinstance(ids, int) else list(ids or [])
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
        ids.append(tokenizer.eos_token_id)
    if not ids:
        raise ValueError("The model and tokenizer name no end-of-sequence token; generation would never stop.")
    return ids


def _checkpoint_generation_config(model_path: str):
    """The checkpoint's generation_config.json (for its stop tokens), or None when it has none."""
    from transformers import GenerationConfig

    try:
        return GenerationConfig.from_pretrained(model_path)
    except OSError:
        return None


class TransformersBackend:
    """Batched `model.generate` with left padding: what runs on CPU, and on a GPU without vLLM."""

    def __init__(self, model_path: str, tokenizer, dtype: str = "auto", device: str | None = None):
        import torch
        from transformers import AutoModelForCausalLM

        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        if dtype == "auto":
            torch_dtype = torch.bfloat16 if self.device.startswith("cuda") else torch.float32
        else:
            torch_dtype = getattr(torch, dtype)
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch_dtype).to(self.device).eval()
        self.tokenizer = tokenizer
        self.eos_ids = _eos_ids(self.model.generation_config, tokenizer)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_ids[0]

    def generate(self, requests: Sequence[Request], temperature: float, top_p: float, max_new_tokens: int):
        import torch
        from transformers import GenerationConfig, LogitsProcessorList

        width = max(len(r.prompt_ids) for r in requests)
        input_ids = torch.full((len(requests), width), self.pad_id, dtype=torch.long)
        attention_mask = torch.zeros((len(requests), width), dtype=torch.long)
        for row, request in enumerate(requests):  # left padding: every prompt ends where generation starts
            input_ids[row, width - len(request.prompt_ids) :] = torch.tensor(request.prompt_ids)
            attention_mask[row, width - len(request.prompt_ids) :] = 1
        # A clean config: only the budget and the stop tokens, so a checkpoint's own sampling defaults
        # (temperature, top_k, repetition_penalty) cannot leak into the evaluation.
        # transformers fills every field left unset from the checkpoint's generation_config, so the processors that
        # act even in greedy decoding are set to neutral values explicitly.
        config = GenerationConfig(
            max_new_tokens=max_new_tokens,
            do_sample=False,
            eos_token_id=self.eos_ids,
            pad_token_id=self.pad_id,
            repetition_penalty=1.0,
            no_repeat_ngram_size=0,
            min_new_tokens=0,
        )
        processors = LogitsProcessorList()
        if temperature > 0:
            processors.append(SeededSampling([r.seed for r in requests], temperature, top_p))
        with torch.inference_mode():
            output = self.model.generate(
                input_ids=input_ids.to(self.device),
                attention_mask=attention_mask.to(self.device),
                generation_config=config,
                logits_processor=processors,
            )
        completions = output[:, width:].tolist()
        generations = []
        for ids in completions:
            stop = next((i for i, token in enumerate(ids) if token in self.eos_ids), None)
            kept = ids if stop is None else ids[: stop + 1]  # the stop token counts, as in TRL's completion mask
            generations.append(
                Generation(
                    text=self.tokenizer.decode(kept, skip_special_tokens=True),
                    num_tokens=len(kept),
                    truncated=stop is None,
                )
            )
        return generations


class VLLMBackend:
    """vLLM offline generation; each request carries its own seed, so samples do not depend on scheduling."""

    def __init__(
        self,
        model_path: str,
        tokenizer,
        dtype: str = "auto",
        tensor_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.9,
        max_model_len: int | None = None,
        seed: int = 0,
    ):
        from vllm import LLM

        self.llm = LLM(
            model=model_path,
            dtype=dtype,
            tensor_parallel_size=tensor_parallel_size,
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
            seed=seed,
        )
        self.tokenizer = tokenizer
        self.eos_ids = _eos_ids(_checkpoint_generation_config(model_path), tokenizer)

    def generate(self, requests: Sequence[Request], temperature: float, top_p: float, max_new_tokens: int):
        from vllm import SamplingParams

        params = [
            SamplingParams(
                n=1,
                temperature=temperature,
                top_p=top_p if temperature > 0 else 1.0,
                max_tokens=max_new_tokens,
                seed=request.seed if temperature > 0 else None,
                stop_token_ids=self.eos_ids,
                skip_special_tokens=True,
            )
            for request in requests
        ]
        prompts = [{"prompt_token_ids": list(request.prompt_ids)} for request in requests]
        outputs = self.llm.generate(prompts, params, use_tqdm=False)
        generations = []
        for output in outputs:
            completion = output.outputs[0]
            generations.append(
                Generation(
                    text=completion.text,
                    num_tokens=len(completion.token_ids),
                    truncated=completion.finish_reason == "length",
                )
            )
        return generations


# --------------------------------------------------------------------------------------------------------------------
# Grading: the reward library's verifier, so that evaluation and training agree
# --------------------------------------------------------------------------------------------------------------------

CORRECT, INCORRECT, NO_ANSWER, GOLD_UNPARSABLE = "correct", "incorrect", "no_answer", "gold_unparsable"
GRADING_FAILURES = ("timeout", "error", "crash")  # the verifier gave up on the answer; scored incorrect


def grade_completions(completions: Sequence[str], golds: Sequence[str | None]) -> list[tuple[str, str | None]]:
    """(verdict, extracted answer) of each completion against its gold, with the training verifier.

    `rewards.grade_batch` is what the `accuracy` reward calls: same extraction, same math-verify comparison, same
    time limits. Verdicts: correct, incorrect, no_answer (nothing extracted), gold_unparsable, or a grading failure
    (timeout, error, crash), which the reward scores 0 as well.
    """
    from rewards import grade_batch

    return [(_verdict_name(r.status, r.verdict), r.extracted) for r in grade_batch(list(completions), list(golds))]


def _verdict_name(status: str, verdict: bool | None) -> str:
    if status == "ok":
        return CORRECT if verdict else INCORRECT
    return status  # no_answer, gold_unparsable, timeout, error, crash


def answers_equivalent(a: str, b: str) -> bool:
    """Math-verify equivalence of two extracted answers, as the reward library decides it (for maj@k)."""
    from rewards import answers_equivalent as reward_answers_equivalent

    return reward_answers_equivalent(a, b)


# --------------------------------------------------------------------------------------------------------------------
# Summaries (pure functions of the sample rows)
# --------------------------------------------------------------------------------------------------------------------


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def summarize(rows: Sequence[dict], n: int, equivalent: Callable[[str, str], bool]) -> dict:
    """Benchmark metrics from the sample rows (each with problem_index, correct, extracted, num_tokens, truncated).

    pass@1 is the mean correctness over all samples; pass@k is the mean over problems of `pass_at_k(n, c, k)`;
    maj@n is the mean over problems of `majority_vote`. A problem whose gold cannot be parsed counts as wrong (the
    denominator stays the benchmark's size, as in published numbers) and is counted in `unparsable_golds`.
    """
    by_problem: dict[int, list[dict]] = {}
    for row in rows:
        by_problem.setdefault(row["problem_index"], []).append(row)
    incomplete = sorted(p for p, samples in by_problem.items() if len(samples) != n)
    if incomplete:
        raise ValueError(f"Problems {incomplete[:5]} do not have exactly n={n} samples; the run is incomplete.")
    if not by_problem:
        raise ValueError("No samples to summarise.")
    per_problem = [sorted(samples, key=lambda r: r["sample_index"]) for _, samples in sorted(by_problem.items())]
    correct_lengths = [r["num_tokens"] for r in rows if r["correct"]]
    incorrect_lengths = [r["num_tokens"] for r in rows if not r["correct"]]
    summary = {
        "num_problems": len(per_problem),
        "num_samples": len(rows),
        "pass@1": _mean([float(r["correct"]) for r in rows]),
    }
    for k in pass_at_k_values(n):
        if k > 1:
            summary[f"pass@{k}"] = _mean([pass_at_k(n, sum(r["correct"] for r in s), k) for s in per_problem])
    summary[f"maj@{n}"] = _mean(
        [float(majority_vote([r["extracted"] for r in s], [r["correct"] for r in s], equivalent)) for s in per_problem]
    )
    summary.update(
        {
            "mean_length_correct": _mean(correct_lengths),
            "mean_length_incorrect": _mean(incorrect_lengths),
            "mean_length": _mean([r["num_tokens"] for r in rows]),
            "truncation_rate": _mean([float(r["truncated"]) for r in rows]),
            "no_answer_rate": _mean([float(r["verdict"] == NO_ANSWER) for r in rows]),
            "unparsable_golds": sum(s[0]["verdict"] == GOLD_UNPARSABLE for s in per_problem),
            "grading_failures": sum(r["verdict"] in GRADING_FAILURES for r in rows),
        }
    )
    return summary


def _fmt(value: Any, percent: bool = False) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{100 * value:.1f}" if percent else f"{value:.1f}"
    return str(value)


def summary_markdown(summary: dict) -> str:
    """A human-readable summary: the run's settings and its metrics (rates in percent)."""
    metric_keys = [k for k in summary if k.startswith(("pass@", "maj@"))]
    lines = [
        f"# {summary['benchmark']}: {summary['model']}",
        "",
        f"{summary['num_problems']} problems x n={summary['n']} samples; template `{summary['prompt_template']}`, "
        f"temperature {summary['temperature']}, top_p {summary['top_p']}, max_new_tokens {summary['max_new_tokens']}, "
        f"seed {summary['seed']}, backend {summary['backend']}.",
        "",
        "| metric | value |",
        "|---|---|",
        *[f"| {k} (%) | {_fmt(summary[k], percent=True)} |" for k in metric_keys],
        f"| mean length, correct (tokens) | {_fmt(summary['mean_length_correct'])} |",
        f"| mean length, incorrect (tokens) | {_fmt(summary['mean_length_incorrect'])} |",
        f"| truncated (%) | {_fmt(summary['truncation_rate'], percent=True)} |",
        f"| no answer found (%) | {_fmt(summary['no_answer_rate'], percent=True)} |",
        f"| unparsable golds (problems, scored wrong) | {summary['unparsable_golds']} |",
        f"| grading failures (samples, scored wrong) | {summary['grading_failures']} |",
        "",
    ]
    return "\n".join(lines)


def _benchmark_sort_key(name: str) -> tuple[int, str]:
    return (BENCHMARK_ORDER.index(name), name) if name in BENCHMARK_ORDER else (len(BENCHMARK_ORDER), name)


def comparison_table(summaries: Sequence[dict], metric: str = "pass@1", references: dict | None = None) -> str:
    """One markdown table, models as rows and benchmarks as columns (like the Dr.GRPO paper's Table 4), in percent.

    `references` adds rows of published numbers ({row label: {benchmark: percent}}). The average is over the row's
    benchmarks only when it has all of the table's columns ("–" otherwise, rather than an average of a subset).
    """
    cells: dict[str, dict[str, float | None]] = {}
    for summary in summaries:
        row = cells.setdefault(summary["model"], {})
        if summary["benchmark"] in row:
            raise ValueError(f"Two evaluations of {summary['model']} on {summary['benchmark']}; pass only one.")
        value = summary.get(metric)
        row[summary["benchmark"]] = None if value is None else 100 * value
    for label, values in (references or {}).items():
        cells[label] = dict(values)
    benchmarks = sorted({b for row in cells.values() for b in row}, key=_benchmark_sort_key)
    if not benchmarks:
        raise ValueError("No evaluation summaries to compare.")
    titles = [PRESETS[b].title if b in PRESETS else b for b in benchmarks]
    lines = [
        f"| model ({metric}, %) | " + " | ".join(titles) + " | Avg. |",
        "|---|" + "---:|" * (len(benchmarks) + 1),
    ]
    for label, row in cells.items():
        values = [row.get(b) for b in benchmarks]
        average = sum(values) / len(values) if all(v is not None for v in values) else None
        lines.append(
            f"| {label} | "
            + " | ".join("–" if v is None else f"{v:.1f}" for v in values)
            + f" | {'–' if average is None else f'{average:.1f}'} |"
        )
    return "\n".join(lines) + "\n"


def find_summaries(paths: Sequence[str | Path]) -> list[dict]:
    """Every `summary.json` at or under `paths`, sorted by path."""
    found: list[Path] = []
    for path in map(Path, paths):
        if path.is_file():
            found.append(path)
        elif (path / SUMMARY_JSON).is_file():
            found.append(path / SUMMARY_JSON)
        elif path.is_dir():
            found.extend(sorted(path.rglob(SUMMARY_JSON)))
        else:
            raise FileNotFoundError(f"{path}: no such evaluation folder or summary.json.")
    if not found:
        raise FileNotFoundError(f"No {SUMMARY_JSON} under {', '.join(map(str, paths))}; run `make eval` first.")
    return [json.loads(p.read_text()) for p in sorted(set(found))]


# --------------------------------------------------------------------------------------------------------------------
# The resumable runner
# --------------------------------------------------------------------------------------------------------------------


@dataclass
class EvalArguments:
    """One evaluation: a model, a benchmark (preset or local file), the prompt, the sampling and the output folder."""

    model_name_or_path: str = field(metadata={"help": "Checkpoint folder or hub id of the model to evaluate."})
    benchmark: str | None = field(
        default=None,
        metadata={"help": f"Preset ({', '.join(PRESETS)}) or a local data file (same as --data)."},
    )
    data: str | None = field(
        default=None,
        metadata={"help": "Local .jsonl/.json/.parquet/.csv file. With a preset, read it with the preset's columns."},
    )
    question_column: str | None = field(
        default=None, metadata={"help": "Column holding the question (default: the preset's, else 'question')."}
    )
    answer_column: str | None = field(
        default=None, metadata={"help": "Column holding the gold answer (default: the preset's, else 'answer')."}
    )
    answer_format: str | None = field(
        default=None,
        metadata={"help": f"How the gold is stored: {', '.join(ANSWER_FORMATS)} (default: the preset's, else 'auto')."},
    )
    split: str | None = field(default=None, metadata={"help": "Hub split (default: the preset's)."})
    max_problems: int | None = field(default=None, metadata={"help": "Evaluate only the first N problems (None: all)."})
    recipe: str | None = field(
        default=None,
        metadata={"help": "Training recipe YAML whose prompt_template, system_prompt, chat_template_kwargs to use."},
    )
    prompt_template: str | None = field(
        default=None,
        metadata={"help": "'chat', 'r1', 'qwen_math' or 'plain' (default: the recipe's, else 'chat')."},
    )
    system_prompt: str | None = field(default=None, metadata={"help": "System message for the 'chat' template."})
    chat_template_kwargs: str | None = field(
        default=None,
        metadata={"help": "JSON object passed to the chat template, e.g. '{\"enable_thinking\": false}'."},
    )
    n: int = field(default=1, metadata={"help": "Samples per problem."})
    temperature: float = field(default=0.0, metadata={"help": "Sampling temperature; 0 is greedy decoding."})
    top_p: float = field(default=1.0, metadata={"help": "Nucleus sampling cut (1.0: off)."})
    max_new_tokens: int = field(default=3000, metadata={"help": "Generation budget per sample (paper: 3000)."})
    seed: int = field(default=0, metadata={"help": "Seed; every sample's randomness derives from it."})
    backend: str = field(
        default="auto", metadata={"help": "'auto' (vLLM if installed and a GPU is present), 'vllm' or 'transformers'."}
    )
    batch_size: int | None = field(
        default=None,
        metadata={"help": "Samples per generate call and per write (default: 32 transformers, 1024 vLLM)."},
    )
    dtype: str = field(default="auto", metadata={"help": "Model dtype: auto, float32, bfloat16 or float16."})
    tensor_parallel_size: int = field(default=1, metadata={"help": "vLLM: GPUs per model."})
    gpu_memory_utilization: float = field(default=0.9, metadata={"help": "vLLM: share of GPU memory to use."})
    output_dir: str | None = field(
        default=None, metadata={"help": "Output folder (default: outputs/eval/<model>/<benchmark>)."}
    )
    overwrite: bool = field(
        default=False, metadata={"help": "Delete existing results in output_dir instead of resuming."}
    )
    progress: bool = field(default=True, metadata={"help": "Show a progress bar while generating."})

    def __post_init__(self):
        if self.n < 1:
            raise ValueError(f"n must be >= 1, got {self.n}.")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}.")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}.")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}.")
        if self.answer_format is not None and self.answer_format not in ANSWER_FORMATS:
            raise ValueError(f"answer_format {self.answer_format!r}: choose one of {', '.join(ANSWER_FORMATS)}.")
        if self.n > 1 and self.temperature == 0:
            logger.warning("n=%d with temperature 0: greedy samples are identical, pass@k = pass@1.", self.n)


def _sanitize(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text.strip("/").removeprefix("./")).strip("_") or "model"


@dataclass(frozen=True)
class ResolvedBenchmark:
    """The benchmark as the run reads it."""

    name: str
    problems: list[Problem]
    source: str


def resolve_benchmark(args: EvalArguments) -> ResolvedBenchmark:
    """Load the problems named by `--benchmark` and/or `--data` with the right columns and gold format."""
    benchmark, data = args.benchmark, args.data
    preset = None
    if benchmark and (data is None) and (Path(benchmark).exists() or Path(benchmark).suffix in _DATA_SUFFIXES):
        data, benchmark = benchmark, None  # `BENCH=path/to/file.jsonl`
    if benchmark:
        preset = resolve_preset(benchmark)
    if preset is None and data is None:
        raise ValueError("Name a benchmark: --benchmark PRESET (e.g. math500) or --data FILE.")
    question_column = args.question_column or (preset.question_column if preset else "question")
    answer_column = args.answer_column or (preset.answer_column if preset else "answer")
    answer_format = args.answer_format or (preset.answer_format if preset else "auto")
    if data is not None:
        path = Path(data)
        rows = load_rows(data=data)
        source = str(path)
        generic = path.stem.lower() in {"test", "train", "validation", "eval", "data", "dataset"}
        name = preset.name if preset else _sanitize(f"{path.parent.name}_{path.stem}" if generic else path.stem)
    else:
        rows = load_rows(
            dataset_name=preset.dataset_name, dataset_config=preset.dataset_config, split=args.split or preset.split
        )
        source = f"{preset.dataset_name} ({preset.dataset_config or 'default'}, {args.split or preset.split})"
        name = preset.name
    if args.max_problems is not None:
        rows = rows[: args.max_problems]
    problems = problems_from_rows(rows, question_column, answer_column, answer_format, source=source)
    if not problems:
        raise ValueError(f"{source} has no rows to evaluate.")
    return ResolvedBenchmark(name=name, problems=problems, source=source)


_DATA_SUFFIXES = {".jsonl", ".json", ".parquet", ".csv"}
_TEMPLATE_KEYS = ("prompt_template", "system_prompt", "chat_template_kwargs")


def recipe_prompt_settings(recipe: str | Path) -> dict:
    """The prompt settings (template, system prompt, chat-template kwargs) of a training recipe YAML."""
    import yaml

    path = Path(recipe)
    if not path.is_file():
        raise FileNotFoundError(f"recipe {str(path)!r} not found.")
    settings = yaml.safe_load(path.read_text()) or {}
    if not isinstance(settings, dict):
        raise ValueError(f"recipe {str(path)!r} must be a YAML mapping of key: value.")
    return {key: settings[key] for key in _TEMPLATE_KEYS if settings.get(key) is not None}


def _prompt_settings(args: EvalArguments) -> tuple[str, str | None, dict]:
    from drgrpo.templates import check_template

    recipe = recipe_prompt_settings(args.recipe) if args.recipe else {}
    template = args.prompt_template or recipe.get("prompt_template") or "chat"
    system_prompt = args.system_prompt if args.system_prompt is not None else recipe.get("system_prompt")
    check_template(template, system_prompt)
    kwargs = recipe.get("chat_template_kwargs") or {}
    if args.chat_template_kwargs:
        try:
            kwargs = json.loads(args.chat_template_kwargs)
        except json.JSONDecodeError as error:
            raise ValueError(
                f"chat_template_kwargs must be a JSON object, e.g. '{{\"enable_thinking\": false}}': {error}"
            ) from error
        if not isinstance(kwargs, dict):
            raise ValueError("chat_template_kwargs must be a JSON object, e.g. '{\"enable_thinking\": false}'.")
    return template, system_prompt, kwargs


def read_samples(path: Path) -> list[dict]:
    """The rows of a samples file; a torn last line (the run was killed mid-write) is cut off the file."""
    if not path.exists():
        return []
    raw = path.read_bytes()
    rows, good_end, start = [], 0, 0
    while start < len(raw):
        end = raw.find(b"\n", start)
        if end == -1:  # no newline: an unfinished write
            break
        line = raw[start:end].strip()
        if line:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as error:
                line_number = raw.count(b"\n", 0, start) + 1
                raise ValueError(
                    f"{path}: line {line_number} is not JSON ({error}); delete the file or rerun with --overwrite true."
                ) from error
        good_end = start = end + 1
    if good_end < len(raw):
        logger.warning("%s: dropping an unfinished last line left by an interrupted run.", path)
        with open(path, "r+b") as f:
            f.truncate(good_end)
    return rows


def _check_config(output_dir: Path, config: dict, overwrite: bool) -> None:
    config_path = output_dir / CONFIG_FILE
    if overwrite:
        for name in (SAMPLES_FILE, SUMMARY_JSON, SUMMARY_MD, CONFIG_FILE):
            (output_dir / name).unlink(missing_ok=True)
    elif config_path.exists():
        previous = json.loads(config_path.read_text())
        changed = sorted(k for k in set(previous) | set(config) if previous.get(k) != config.get(k))
        if changed:
            details = "; ".join(f"{k}: {previous.get(k)!r} -> {config.get(k)!r}" for k in changed)
            raise ValueError(
                f"{output_dir} holds an evaluation with other settings ({details}). Use another --output_dir, "
                "or --overwrite true to start again."
            )
    elif (output_dir / SAMPLES_FILE).exists():
        raise ValueError(f"{output_dir / SAMPLES_FILE} exists without {CONFIG_FILE}; use --overwrite true.")
    output_dir.mkdir(parents=True, exist_ok=True)
    config_path.write_text(json.dumps(config, indent=2) + "\n")


def run_evaluation(args: EvalArguments) -> dict:
    """Evaluate, resuming from whatever `output_dir/samples.jsonl` already holds; write and return the summary."""
    from transformers import AutoTokenizer

    bench = resolve_benchmark(args)
    template, system_prompt, chat_kwargs = _prompt_settings(args)
    output_dir = Path(args.output_dir or Path("outputs/eval") / _sanitize(args.model_name_or_path) / bench.name)
    config = {
        "model": args.model_name_or_path,
        "benchmark": bench.name,
        "source": bench.source,
        "data_fingerprint": data_fingerprint(bench.problems),
        "num_problems": len(bench.problems),
        "prompt_template": template,
        "system_prompt": system_prompt,
        "chat_template_kwargs": chat_kwargs,
        "n": args.n,
        "temperature": args.temperature,
        "top_p": args.top_p,
        "max_new_tokens": args.max_new_tokens,
        "seed": args.seed,
    }
    _check_config(output_dir, config, args.overwrite)
    samples_path = output_dir / SAMPLES_FILE
    done = {(r["problem_index"], r["sample_index"]) for r in read_samples(samples_path)}

    tokenizer = AutoTokenizer.from_pretrained(args.model_name_or_path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    built = build_prompts(tokenizer, [p.question for p in bench.problems], template, system_prompt, chat_kwargs)
    prompts = {p.index: prompt for p, prompt in zip(bench.problems, built, strict=True)}
    pending = [
        Request(p.index, s, tuple(prompts[p.index][1]), sample_seed(args.seed, p.index, s))
        for p in bench.problems
        for s in range(args.n)
        if (p.index, s) not in done
    ]
    backend_name = choose_backend(args.backend)
    total = len(bench.problems) * args.n
    if done:
        logger.info("Resuming %s: %d of %d samples already written.", output_dir, total - len(pending), total)
    if pending:
        _generate_and_write(args, backend_name, tokenizer, bench, prompts, pending, samples_path)

    rows = read_samples(samples_path)
    keys = [(r["problem_index"], r["sample_index"]) for r in rows]
    if len(keys) != len(set(keys)):
        raise ValueError(f"{samples_path} has duplicate samples; rerun with --overwrite true.")
    summary = {**config, "backend": backend_name, **summarize(rows, args.n, answers_equivalent)}
    (output_dir / SUMMARY_JSON).write_text(json.dumps(summary, indent=2) + "\n")
    (output_dir / SUMMARY_MD).write_text(summary_markdown(summary))
    summary["output_dir"] = str(output_dir)
    return summary


def _generate_and_write(args, backend_name, tokenizer, bench, prompts, pending, samples_path) -> None:
    from tqdm.auto import tqdm

    if backend_name == "vllm":
        backend = VLLMBackend(
            args.model_name_or_path,
            tokenizer,
            dtype=args.dtype,
            tensor_parallel_size=args.tensor_parallel_size,
            gpu_memory_utilization=args.gpu_memory_utilization,
            seed=args.seed,
        )
        batch_size = args.batch_size or 1024
    else:
        backend = TransformersBackend(args.model_name_or_path, tokenizer, dtype=args.dtype)
        batch_size = args.batch_size or 32
        # Similar prompt lengths share a batch, so left padding wastes little; samples do not depend on batching.
        pending = sorted(pending, key=lambda r: (-len(r.prompt_ids), r.problem_index, r.sample_index))
    golds = {p.index: p.gold for p in bench.problems}
    questions = {p.index: p.question for p in bench.problems}
    with (
        open(samples_path, "a") as out,
        tqdm(total=len(pending), desc=f"eval {bench.name}", unit="sample", disable=not args.progress) as bar,
    ):
        for start in range(0, len(pending), batch_size):
            batch = pending[start : start + batch_size]
            generations = backend.generate(batch, args.temperature, args.top_p, args.max_new_tokens)
            grades = grade_completions([g.text for g in generations], [golds[r.problem_index] for r in batch])
            lines = []
            for request, generation, (verdict, extracted) in zip(batch, generations, grades, strict=True):
                row = {
                    "problem_index": request.problem_index,
                    "sample_index": request.sample_index,
                    "question": questions[request.problem_index],
                    "gold": golds[request.problem_index],
                    "prompt": prompts[request.problem_index][0],
                    "completion": generation.text,
                    "extracted": extracted,
                    "verdict": verdict,
                    "correct": verdict == CORRECT,
                    "num_tokens": generation.num_tokens,
                    "truncated": generation.truncated,
                }
                lines.append(json.dumps(row, ensure_ascii=False) + "\n")
            out.write("".join(lines))  # one write per batch: a kill leaves at most one torn line
            out.flush()
            os.fsync(out.fileno())
            bar.update(len(batch))


def evaluate(
    model_path: str,
    data_file: str | None = None,
    question_column: str | None = None,
    answer_column: str | None = None,
    prompt_template: str | None = None,
    n: int = 1,
    temperature: float = 0.0,
    max_new_tokens: int = 3000,
    output_dir: str | None = None,
    batch_size: int | None = None,
    **kwargs: Any,
) -> dict:
    """Evaluate `model_path` on a local file (or `benchmark=PRESET`) and return the summary dict.

    The Python entry point used by the demo; keyword arguments are those of `EvalArguments` (top_p, seed,
    benchmark, answer_format, system_prompt, max_problems, backend, overwrite, progress, ...).
    """
    unknown = set(kwargs) - {f.name for f in fields(EvalArguments)}
    if unknown:
        raise TypeError(f"evaluate() got unknown arguments {sorted(unknown)}; see drgrpo.evaluation.EvalArguments.")
    args = EvalArguments(
        model_name_or_path=str(model_path),
        data=None if data_file is None else str(data_file),
        question_column=question_column,
        answer_column=answer_column,
        prompt_template=prompt_template,
        n=n,
        temperature=temperature,
        max_new_tokens=max_new_tokens,
        output_dir=None if output_dir is None else str(output_dir),
        batch_size=batch_size,
        **kwargs,
    )
    return run_evaluation(args)


__all__ = [
    "ANSWER_FORMATS",
    "PAPER_RESULTS",
    "PRESETS",
    "BenchmarkPreset",
    "EvalArguments",
    "Problem",
    "SeededSampling",
    "comparison_table",
    "evaluate",
    "find_summaries",
    "majority_vote",
    "normalize_gold",
    "pass_at_k",
    "pass_at_k_values",
    "problems_from_rows",
    "run_evaluation",
    "sample_seed",
    "summarize",
    "summary_markdown",
]
