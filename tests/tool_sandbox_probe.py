"""Test helper: the code sandbox's hostile programs (tests/code_sandbox_probe.py) run through the Python tool's path,
and a JSON report of what each achieved.

Each program is the policy's code block in a scripted answer: the rollout loop (algorithm/rollout/loop.py) cuts the
turn at its fence, runs it with `PythonTool` in the sandbox and appends the observation; the scripted policy then copies
the observation's last line into `\\boxed{}`, as a model that trusts its tool would. A program prints its scenario's
marker only if its attack worked, so the answer scores 1 (the marker is in the policy's own text) only if the attack
got through the tool. Run by tests/test_tool_sandbox_hostile.py under the same outer bounds as the code reward's probe.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from code_sandbox_probe import SECRET, accepted_any, scenarios, unix_listeners  # noqa: E402

from drgrpo.algorithm.rollout.arguments import ToolArguments  # noqa: E402
from drgrpo.algorithm.rollout.loop import LoopSettings, run_tool_loop  # noqa: E402
from drgrpo.algorithm.rollout.python_tool import build_python_tool  # noqa: E402
from rewards import RewardArguments  # noqa: E402
from rewards.code.sandbox import NamespacesUnavailable  # noqa: E402

TIMEOUT = 2.0


class CharTokenizer:
    """One token per character (ids are code points; 0 is the eos): enough for the loop, no model needed."""

    eos_token_id = 0

    def encode(self, text: str, add_special_tokens: bool = False, split_special_tokens: bool = False) -> list[int]:
        return [ord(c) for c in text]  # no special tokens to split

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return "".join(chr(i) for i in ids if i)


class CopyingPolicy:
    """Turn 0: the program in a ```python block. Turn 1: \\boxed{the observation's last line}, then eos."""

    def __init__(self, tokenizer: CharTokenizer, program: str) -> None:
        self.tokenizer, self.program = tokenizer, program

    def __call__(self, rows, budgets, owners):
        outputs = []
        for row, owner in zip(rows, owners, strict=True):
            if owner is None or owner[1] == 0:
                text = f"```python\n{self.program}```\nignored"
            else:
                observation = self.tokenizer.decode(row).rsplit("```output\n", 1)[-1].rsplit("\n```", 1)[0]
                text = f"The answer is \\boxed{{{observation.splitlines()[-1] if observation else ''}}}."
            outputs.append((self.tokenizer.encode(text) + [0], None))
        return outputs


def main() -> None:
    logging.basicConfig(level=logging.WARNING)
    for key in ("WANDB_API_KEY", "HF_TOKEN", "AWS_SECRET_ACCESS_KEY"):
        os.environ[key] = SECRET  # planted before the sandbox starts
    plant_dir = Path(tempfile.mkdtemp(prefix="drgrpo-plant-", dir="/var/tmp"))
    plant_dir.chmod(0o777)
    planted = plant_dir / "precious.txt"
    planted.write_text("keep me")
    planted.chmod(0o666)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    unix = unix_listeners(plant_dir)
    settings = ToolArguments(python_tool=True, tool_max_calls=1, tool_timeout=TIMEOUT, tool_num_workers=1)
    code_settings = RewardArguments(code_memory_mb=256, code_max_processes=16, code_max_output_kb=1024)
    report: dict = {}
    try:
        try:
            tool = build_python_tool(settings, code_settings)
        except NamespacesUnavailable as exc:
            print(json.dumps({"unavailable": str(exc)}))
            return
        report["mode"] = tool.sandbox.mode
        tokenizer = CharTokenizer()
        loop = LoopSettings(max_calls=1, max_tokens=4096, eos_ids=(0,))
        programs = scenarios(planted, listener.getsockname()[1], [u.getsockname() for u in unix])
        for name, (program, success) in programs.items():
            start = time.monotonic()
            (answer,) = run_tool_loop([[ord("Q")]], CopyingPolicy(tokenizer, program), tool, tokenizer, loop)
            elapsed = time.monotonic() - start
            model_text = tokenizer.decode(answer.model_ids())
            turn = answer.turns[0]
            observed = [t for t, kept in zip(answer.ids, answer.mask, strict=True) if not kept]
            check = tool.run_many(["print('ok')"])[0]
            report[name] = {
                "score": float(f"\\boxed{{{success}}}" in model_text),
                "status": turn.status,
                "observation": turn.observation,
                "marker_in_observation": success in (turn.observation or ""),
                "secret_in_observation": SECRET in (turn.observation or ""),
                "masked": tokenizer.decode(observed).count("```output") == 1,
                "elapsed": elapsed,
                "tool_works_after": check.status == "ok" and check.output == "ok",
            }
        try:
            listener.accept()[0].close()
            report["listener_accepted"] = True
        except BlockingIOError:
            report["listener_accepted"] = False
        report["unix_accepted"] = accepted_any(unix)
        report["planted_intact"] = planted.exists() and planted.read_text() == "keep me"
        tool.sandbox.close()
    finally:
        listener.close()
        for u in unix:
            os.unlink(u.getsockname())
            u.close()
        for path in plant_dir.iterdir():
            path.unlink()
        plant_dir.rmdir()
    print(json.dumps(report))


if __name__ == "__main__":
    main()
