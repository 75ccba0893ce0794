"""One GPU's memory in the two phases of a GRPO step: generation (model states + colocated vLLM) and training (model
states + activations + vLLM, unless sleep mode freed it); the findings when either overflows or vLLM cannot run.

Model states stay on the GPU in both phases (DeepSpeed's estimators, `memory.py`). TRL's sleep mode
(`vllm_enable_sleep_mode`, level 2) frees vLLM's weights and KV cache after each generation and wakes them for the
next, so training sees none of vLLM's share; without it vLLM keeps its whole `gpu_memory_utilization` share.
"""

from __future__ import annotations

from dataclasses import dataclass

from drgrpo.planning.activations import ActivationEstimate
from drgrpo.planning.findings import Finding
from drgrpo.planning.kv_cache import TRL_MAX_NUM_BATCHED_TOKENS, VllmMemory
from drgrpo.planning.memory import GIB


def gib(value: int) -> str:
    return f"{value / GIB:.1f} GiB"


def _sequences(count: int) -> str:
    return f"{count} sequence" if count == 1 else f"{count} sequences"


@dataclass(frozen=True)
class GpuBudget:
    """The terms of one GPU's memory; peaks are sums of them."""

    gpu_bytes: int
    states: int  # model states of the run's ZeRO stage (DeepSpeed's estimator)
    stage_name: str
    activations: ActivationEstimate | None
    gradient_checkpointing: bool
    vllm: VllmMemory | None  # colocated vLLM, or None (no vLLM, or a vLLM server)
    sleep_mode: bool = False

    @property
    def generation_peak(self) -> int:
        return self.states + (self.vllm.budget if self.vllm else 0)

    @property
    def vllm_during_training(self) -> int:
        return 0 if self.vllm is None or self.sleep_mode else self.vllm.budget

    @property
    def activation_bytes(self) -> int:
        if self.activations is None:
            return 0
        a = self.activations
        return a.with_checkpointing if self.gradient_checkpointing else a.without_checkpointing

    @property
    def training_peak(self) -> int:
        return self.states + self.vllm_during_training + self.activation_bytes


def vllm_findings(vllm: VllmMemory, gpu_bytes: int, model: str, requests: str) -> list[Finding]:
    """vLLM cannot start (its share is below the weights, or holds no full sequence), or generation is KV-bound."""
    share = f"vllm_gpu_memory_utilization {vllm.utilization} x {gib(gpu_bytes)} = {gib(vllm.budget)}"
    one_sequence = vllm.utilization_for(1, gpu_bytes)
    if vllm.budget < vllm.weights:
        return [
            Finding(
                "error",
                "vllm_gpu_memory_utilization",
                f"vLLM cannot start: {share} is less than {model}'s {gib(vllm.weights)} of weights per GPU.",
                f"set vllm_gpu_memory_utilization to at least {one_sequence:.2f} (weights, overhead and one "
                f"{vllm.max_model_len}-token sequence of KV cache), or split the weights (vllm_tensor_parallel_size).",
            )
        ]
    if vllm.kv_cache < vllm.sequence_bytes:
        return [
            Finding(
                "error",
                "vllm_gpu_memory_utilization",
                f"vLLM cannot start: {share} minus {gib(vllm.weights)} of weights and "
                f"{gib(vllm.profile + vllm.reserve)} of overhead leaves {gib(max(0, vllm.kv_cache))} of KV cache, "
                f"less than one {vllm.max_model_len}-token sequence needs ({gib(vllm.sequence_bytes)}).",
                f"set vllm_gpu_memory_utilization to at least {one_sequence:.2f}, or lower vllm_max_model_length.",
            )
        ]
    if vllm.concurrent_sequences >= vllm.max_num_seqs:
        return []
    waves = -(-vllm.max_num_seqs // vllm.concurrent_sequences)
    needed = vllm.utilization_for(vllm.max_num_seqs, gpu_bytes)
    raise_fix = (
        f"raise vllm_gpu_memory_utilization to {needed:.2f} to hold all {vllm.max_num_seqs} at full length, if "
        "training leaves room (the training peak above)"
        if needed < 1
        else f"holding all {vllm.max_num_seqs} at full length would take vllm_gpu_memory_utilization {needed:.2f}, "
        "more than the GPU"
    )
    return [
        Finding(
            "warning",
            "vllm_gpu_memory_utilization",
            f"Generation is KV-bound: vLLM's KV cache ({gib(vllm.kv_cache)} per GPU, {vllm.kv_bytes_per_token:,} bytes "
            f"per token) holds {_sequences(vllm.concurrent_sequences)} of {vllm.max_model_len:,} tokens at once, and "
            f"each engine gets {vllm.max_num_seqs} requests per rollout ({requests}): up to {waves} waves when "
            "completions run long.",
            "fewer requests per engine (more GPUs, a smaller per_device_train_batch_size x steps_per_generation) or a "
            f"lower vllm_max_model_length; {raise_fix}. Shorter completions share the cache: a slowdown, not a "
            "failure.",
        )
    ]


def budget_findings(budget: GpuBudget, micro_batch_fix: str) -> list[Finding]:
    """Errors when a phase needs more than the GPU has."""
    findings = []
    gpu = gib(budget.gpu_bytes)
    if budget.vllm is not None and budget.generation_peak > budget.gpu_bytes:
        findings.append(
            Finding(
                "error",
                "memory",
                f"Generation needs {gib(budget.generation_peak)} per GPU ({budget.stage_name} model states "
                f"{gib(budget.states)} + colocated vLLM {gib(budget.vllm.budget)}), more than the {gpu} of one GPU.",
                "lower vllm_gpu_memory_utilization, or shard the model states further (ZeRO-3, more GPUs).",
            )
        )
    if budget.activations is not None and budget.training_peak > budget.gpu_bytes:
        parts = f"{budget.stage_name} model states {gib(budget.states)} + activations {gib(budget.activation_bytes)}"
        if budget.vllm_during_training:
            parts += f" + vLLM awake {gib(budget.vllm_during_training)} (no sleep mode)"
        fixes = []
        if not budget.gradient_checkpointing:
            fixes.append(f"gradient_checkpointing: true ({gib(budget.activations.with_checkpointing)} of activations)")
        if budget.vllm_during_training:
            fixes.append("vllm_enable_sleep_mode: true")
        fixes.append(micro_batch_fix)
        findings.append(
            Finding(
                "error",
                "memory",
                f"Training needs {gib(budget.training_peak)} per GPU ({parts}), more than the {gpu} of one GPU.",
                "; ".join(fixes) + ".",
            )
        )
    return findings


def budget_lines(budget: GpuBudget) -> list[str]:
    """The report's lines: each term, then each phase's peak."""
    lines = [f'GPU memory per GPU ({gib(budget.gpu_bytes)}; estimates, docs/scaling.md "Memory, term by term"):']
    lines.append(f"  model states ({budget.stage_name}, DeepSpeed estimator):  {gib(budget.states)}")
    vllm = budget.vllm
    if vllm is not None:
        lines += [
            f"  generation: colocated vLLM, vllm_gpu_memory_utilization {vllm.utilization} = {gib(vllm.budget)}:",
            f"    weights {gib(vllm.weights)}, profile run {gib(vllm.profile)}, runtime reserve {gib(vllm.reserve)}",
            f"    KV cache {gib(max(0, vllm.kv_cache))} = {_sequences(vllm.concurrent_sequences)} of "
            f"{vllm.max_model_len:,} tokens ({vllm.kv_bytes_per_token:,} bytes per token) for {vllm.max_num_seqs} "
            "requests per rollout",
            f"    peak: states + vLLM = {gib(budget.generation_peak)}",
        ]
        if vllm.max_model_len > TRL_MAX_NUM_BATCHED_TOKENS:
            lines.append(
                f"    vLLM prefill: TRL fixes max_num_batched_tokens at {TRL_MAX_NUM_BATCHED_TOKENS}, below "
                f"max_model_len {vllm.max_model_len:,}: a prompt longer than that is prefilled in chunks (vLLM's "
                "chunked prefill)"
            )
    a = budget.activations
    if a is not None:
        asleep = "vLLM asleep (sleep mode)" if vllm is not None and budget.sleep_mode else ""
        awake = f"vLLM awake {gib(budget.vllm_during_training)}" if budget.vllm_during_training else asleep
        lines += [
            f"  training: micro-batch {a.micro_batch} x {a.sequence_length:,} tokens, {a.scored_tokens:,} scored"
            + (f"; {awake}" if awake else "")
            + ":",
            f"    activations with gradient checkpointing {gib(a.with_checkpointing)} (layer inputs "
            f"{gib(a.layer_inputs)}, one layer {gib(a.one_layer)}, LM head {gib(a.head_saved)} + backward "
            f"{gib(a.head_backward)}, shared {gib(a.shared)})"
            + ("  <- this run" if budget.gradient_checkpointing else ""),
            f"    activations without {gib(a.without_checkpointing)} (every layer {gib(a.all_layers)})"
            + ("" if budget.gradient_checkpointing else "  <- this run"),
            f"    peak: states + activations{' + vLLM' if budget.vllm_during_training else ''} = "
            f"{gib(budget.training_peak)}",
        ]
    return lines
