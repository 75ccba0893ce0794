"""Context: does the longest prompt plus the longest completion fit the model (and vLLM's max_model_len)?"""

from __future__ import annotations

from drgrpo.planning.findings import Finding
from drgrpo.recipe.batch_rules import context_fix


def context_findings(
    max_prompt_tokens: int | None,
    max_completion_length: int,
    context_length: int | None,
    vllm_max_model_length: int | None,
) -> list[Finding]:
    """Does the longest prompt plus the longest completion fit the model (and vLLM's max_model_len)?"""
    findings = []
    if max_prompt_tokens is None:
        findings.append(
            Finding(
                "warning",
                "max_prompt_tokens",
                "Prompt length is not bounded, so prompt + completion cannot be checked against the context.",
                "set max_prompt_tokens (longer prompts are dropped and counted at start-up).",
            )
        )
        return findings
    needed = max_prompt_tokens + max_completion_length
    for limit, name in ((context_length, "the model's context"), (vllm_max_model_length, "vllm_max_model_length")):
        if limit is not None and needed > limit:
            findings.append(
                Finding(
                    "error",
                    "max_completion_length",
                    f"max_prompt_tokens {max_prompt_tokens} + max_completion_length {max_completion_length} = "
                    f"{needed} tokens exceed {name} ({limit}).",
                    context_fix(max_prompt_tokens, max_completion_length, limit)
                    + ("; or raise vllm_max_model_length." if name == "vllm_max_model_length" else "."),
                )
            )
    if vllm_max_model_length is not None and context_length is not None and vllm_max_model_length > context_length:
        findings.append(
            Finding(
                "error",
                "vllm_max_model_length",
                f"vllm_max_model_length {vllm_max_model_length} exceeds the model's context ({context_length}).",
                f"set vllm_max_model_length to at most {context_length}.",
            )
        )
    return findings
