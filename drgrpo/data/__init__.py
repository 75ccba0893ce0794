"""Prompt datasets: hub ids or local files, one source or a weighted mixture, mapped onto `prompt` / `answer`.

The pipeline (`load_prompt_dataset`), in order:
1. each source is loaded (`dataset_name` from the hub, or a local `dataset_path` file/folder);
2. its rows are kept by `dataset_filter` (e.g. MATH levels 3-5);
3. its question column becomes `question` (it must hold strings) and its gold-answer column becomes `answer`
   (read by `answer_extraction`, the gold reader that evaluation's `--answer_format` of that name uses);
4. sources are mixed by `weight` (or concatenated), and the result is shuffled with the run's seed;
5. an optional held-out set is split off (`dataset_test_size`) or loaded (`dataset_test_split`/`dataset_test_path`);
6. `max_train_samples` keeps the first N rows;
7. each question is rendered with `prompt_template` (drgrpo.data.templates) into the `prompt` column;
8. prompts longer than `max_prompt_tokens` (counted the way TRL tokenizes them) are dropped and counted;
9. gold answers that the accuracy reward cannot parse are counted and reported (and optionally dropped).
The trainer sees exactly two columns, `prompt` and `answer`; TRL passes `answer` to every reward function.

Modules, each importing only the ones listed before it:
- `templates`: the prompt templates (`chat`, `r1`, `qwen_math`, `plain`), shared with evaluation;
- `golds`: the gold readers, one registry for `answer_extraction` and evaluation's `--answer_format`;
- `filters`: `dataset_filter` conditions;
- `open_r1`: open-r1's `dataset_mixture` shape (`datasets`, `seed`, `test_split_size`) read as ours;
- `arguments`: `DataArguments`, the recipe's data keys;
- `sources`: one source (hub split or local file) mapped onto (question, answer) examples;
- `mixture`: weighted mixtures of several sources;
- `gold_check`: gold answers the accuracy reward cannot parse (checked once: main process, cached);
- `pipeline`: `load_prompt_dataset`, the steps above in order;
- `preview`: `--show_prompts`, prompts exactly as the trainer renders them.
"""

from drgrpo.data.arguments import MIXTURE_KEYS, DataArguments, parse_structured
from drgrpo.data.filters import FILTER_OPERATORS, Condition, condition_holds, filter_indices, parse_filter
from drgrpo.data.gold_check import (
    GOLD_PROBE,
    report_unparseable,
    reward_gold_check,
    unparseable_indices,
    unparseable_indices_once,
)
from drgrpo.data.golds import ANSWER_FORMATS, check_answer_format, gsm8k_final_answer, last_boxed, normalize_gold
from drgrpo.data.mixture import apportion, default_mixture_size, mix_sources, normalized_weights, sample_rows
from drgrpo.data.pipeline import eval_source, load_prompt_dataset
from drgrpo.data.preview import format_prompts, preview_prompts
from drgrpo.data.sources import (
    DataSource,
    Example,
    check_columns,
    column_values,
    data_sources,
    load_local,
    load_source,
    source_examples,
)

__all__ = [
    "ANSWER_FORMATS",
    "Condition",
    "DataArguments",
    "DataSource",
    "Example",
    "FILTER_OPERATORS",
    "GOLD_PROBE",
    "MIXTURE_KEYS",
    "apportion",
    "check_answer_format",
    "check_columns",
    "column_values",
    "condition_holds",
    "data_sources",
    "default_mixture_size",
    "eval_source",
    "filter_indices",
    "format_prompts",
    "gsm8k_final_answer",
    "last_boxed",
    "load_local",
    "load_prompt_dataset",
    "load_source",
    "mix_sources",
    "normalize_gold",
    "normalized_weights",
    "parse_filter",
    "parse_structured",
    "preview_prompts",
    "report_unparseable",
    "reward_gold_check",
    "sample_rows",
    "source_examples",
    "unparseable_indices",
    "unparseable_indices_once",
]
