"""Names of the metrics that diagnostics, warnings and plots read, in one import-light place (no torch), so that
`scripts/plot.py` starts in a second.

Ours share the `diag/` prefix so that dashboards (wandb, TensorBoard) group them; the others are TRL 1.16's own
(`GRPOTrainer._generate_and_score_completions` and `_compute_loss`).
"""

PREFIX = "diag/"
PASS_RATE = PREFIX + "pass_rate"
PASS_AT_GROUP = PREFIX + "pass_at_group"
GROUPS_ALL_CORRECT = PREFIX + "groups_all_correct"
GROUPS_ALL_WRONG = PREFIX + "groups_all_wrong"
LENGTH_CORRECT = PREFIX + "length_correct"
LENGTH_INCORRECT = PREFIX + "length_incorrect"
TRUNCATION_RATE = PREFIX + "truncation_rate"
TRUNCATED_SHARE_OF_CORRECT = PREFIX + "truncated_share_of_correct"
FIRST_UPDATE_RATIO_MEAN = PREFIX + "ratio/first_update_mean"
FIRST_UPDATE_MAX_ABS_LOG_RATIO = PREFIX + "ratio/first_update_max_abs_log"
SAMPLER_TRAINER_RATIO_MEAN = PREFIX + "ratio/sampler_trainer_mean"
SAMPLER_TRAINER_MAX_ABS_LOG_RATIO = PREFIX + "ratio/sampler_trainer_max_abs_log"

# The CPU engine (drgrpo/algorithm/rollout/): casts of the trained weights into its copy so far, the last one's time.
ENGINE_WEIGHT_SYNCS = "engine/weight_syncs"
ENGINE_WEIGHT_SYNC_SECONDS = "engine/weight_sync_seconds"
# The importance-sampling correction of the engine's samples under TRL's names for vLLM's, meaning what TRL's mean
# (one value per generation batch: the weight applied, per completion in the sequence modes;
# drgrpo/algorithm/sampler_correction.py), and the engine's own figures beside them: the ratio pi_learner / pi_sampler
# before truncation or masking, and the share of ratios that truncation or masking changed.
SAMPLING_LOGP_DIFFERENCE_MEAN = "sampling/sampling_logp_difference/mean"
SAMPLING_LOGP_DIFFERENCE_MAX = "sampling/sampling_logp_difference/max"
IMPORTANCE_RATIO_MIN = "sampling/importance_sampling_ratio/min"
IMPORTANCE_RATIO_MEAN = "sampling/importance_sampling_ratio/mean"
IMPORTANCE_RATIO_MAX = "sampling/importance_sampling_ratio/max"
ENGINE_SAMPLER_RATIO_MIN = "engine/sampler_ratio/min"
ENGINE_SAMPLER_RATIO_MEAN = "engine/sampler_ratio/mean"
ENGINE_SAMPLER_RATIO_MAX = "engine/sampler_ratio/max"
ENGINE_SAMPLER_RATIO_TRUNCATED = "engine/sampler_ratio/truncated_share"

# Logged as the maximum (minimum) over all micro-steps since the last log, not TRL's mean of the per-micro-step values.
# (TRL's own `sampling/` metrics are not among them: TRL averages them over the generation batches since the last log.)
MAXIMUM_METRICS = (
    FIRST_UPDATE_MAX_ABS_LOG_RATIO,
    SAMPLER_TRAINER_MAX_ABS_LOG_RATIO,
    ENGINE_SAMPLER_RATIO_MAX,
    ENGINE_WEIGHT_SYNCS,
)
MINIMUM_METRICS = (ENGINE_SAMPLER_RATIO_MIN,)

TRL_REWARD = "reward"
TRL_ZERO_STD_SHARE = "frac_reward_zero_std"
TRL_MEAN_LENGTH = "completions/mean_length"
TRL_ENTROPY = "entropy"
TRL_CLIP_FRACTION = "clip_ratio/region_mean"
TRL_KL = "kl"
LEARNING_RATE = "learning_rate"

# GRPO-family keys (drgrpo/algorithm/family.py): the KL folded into the reward, and DAPO dynamic sampling.
KL_IN_REWARD = "kl_in_reward/sequence_kl_mean"
DYNAMIC_SAMPLING_ROUNDS = "dynamic_sampling/rounds"
DYNAMIC_SAMPLING_DROPPED_ALL_CORRECT = "dynamic_sampling/groups_dropped_all_correct"
DYNAMIC_SAMPLING_DROPPED_ALL_WRONG = "dynamic_sampling/groups_dropped_all_wrong"
DYNAMIC_SAMPLING_PROMPTS_CONSUMED = "dynamic_sampling/prompts_consumed"
DYNAMIC_SAMPLING_GROUPS_PADDED = "dynamic_sampling/groups_padded"
DYNAMIC_SAMPLING_PADDING_TOKENS = "dynamic_sampling/padding_tokens"  # prompt + completion tokens of padding rows
# Under dynamic sampling TRL's per-round figures (reward, frac_reward_zero_std, completions/*, num_tokens, ...) cover
# every generated round; they are logged under this prefix, and TRL's own names describe the batch trained on.
DYNAMIC_SAMPLING_GENERATED_PREFIX = "dynamic_sampling/generated_"
TRL_NUM_TOKENS = "num_tokens"

# Tool-integrated RL (python_tool: true, drgrpo/algorithm/rollout/): per step, over every rank's answers.
TOOL_PREFIX = PREFIX + "tool/"
TOOL_CALLS_PER_ANSWER = TOOL_PREFIX + "calls_per_answer"
TOOL_ERROR_RATE = TOOL_PREFIX + "error_rate"  # share of the programs run that raised or exited non-zero
TOOL_TIMEOUT_RATE = TOOL_PREFIX + "timeout_rate"  # share of the programs run that ran past tool_timeout
TOOL_VOID_ANSWERS = TOOL_PREFIX + "void_answers"  # share of answers ending with neither a program nor the answer
TOOL_CALL_BUDGET_EXHAUSTED = TOOL_PREFIX + "call_budget_exhausted"  # share of answers ended by tool_max_calls
TOOL_TOKEN_BUDGET_EXHAUSTED = TOOL_PREFIX + "token_budget_exhausted"  # share cut by max_completion_length
TOOL_CUT_IN_CODE = TOOL_PREFIX + "cut_inside_code"  # share cut by max_completion_length inside an open program
TOOL_MODEL_TOKENS = TOOL_PREFIX + "model_tokens"  # mean generated tokens per answer (trained on)
TOOL_OUTPUT_TOKENS = TOOL_PREFIX + "tool_tokens"  # mean observation tokens per answer (masked out of the loss)
# Of the answers whose programs printed something, the share whose final \boxed{} is exactly the last output.
TOOL_BOX_IS_OUTPUT = TOOL_PREFIX + "box_is_last_output"

# Programs rewarded by the `code` reward (drgrpo/observe/code_metrics.py): per step, over every rank's answers.
CODE_PREFIX = PREFIX + "code/"
CODE_BLOCK = CODE_PREFIX + "block"  # share of answers with a block to run
CODE_RUNNABLE = CODE_PREFIX + "runnable"  # share whose block compiles
CODE_SOME_TESTS = CODE_PREFIX + "some_tests"  # share that passed at least one test
CODE_ALL_TESTS = CODE_PREFIX + "all_tests"  # share that passed every test
CODE_NO_BLOCK = CODE_PREFIX + "no_block"
CODE_SYNTAX_ERROR = CODE_PREFIX + "syntax_error"
CODE_WRONG_OUTPUT = CODE_PREFIX + "wrong_output"  # the first failing test: ran, printed something else
CODE_RUNTIME_ERROR = CODE_PREFIX + "runtime_error"  # the first failing test: raised, exited non-zero, killed
CODE_TIMEOUT = CODE_PREFIX + "timeout"  # the first failing test: past code_timeout
CODE_PROGRAM_LINES = CODE_PREFIX + "program_lines"  # mean non-blank lines of the answers' programs
CODE_PROGRAMS_PER_SECOND = CODE_PREFIX + "programs_per_second"  # test runs / the code reward's seconds (rank 0)
