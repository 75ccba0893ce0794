"""What a training run prints about its speed (issue 54, items 2, 3 and 10), from the user's side: the start-up lines
say torch's thread count, every step line says the wall seconds a step and the threads it ran with (TRL's
`step_time`, its `training_step` alone, only in log_history.jsonl, under its own name), and the `precision:` line is
INFO, not a WARNING on every normal run."""

from __future__ import annotations

import json
import re

from test_first_hour import tiny_run

STEP = re.compile(r"step (\d)/2 \| .* \| (\d+\.\d) s/step, (\d+(?:-\d+)?) threads$")


def test_a_tiny_run_says_its_threads_wall_seconds_and_precision_plainly(
    tiny_model_path, addition_data, tmp_path, run_script
):
    output_dir = tmp_path / "run"
    result = run_script(*tiny_run(tiny_model_path, addition_data["train"], output_dir, "--max_steps", "2"),
                        env={"DRGRPO_TORCH_THREADS": "1"})  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    output = result.stdout + result.stderr
    lines = [match for line in output.splitlines() if (match := STEP.search(line.strip()))]
    rows = [json.loads(line) for line in (output_dir / "log_history.jsonl").read_text().splitlines()]
    step_time = {row["step"]: row["step_time"] for row in rows if "step_time" in row}  # TRL's, in the file
    total = float(re.search(r"trained 2 steps in (\d+\.\d) s", output).group(1))
    said = {
        # 2: the thread count at start-up, and why (here the variable that fixed it).
        "threads at start-up": "INFO drgrpo.run.training: torch threads: 1 (DRGRPO_TORCH_THREADS=1)" in result.stderr,
        # 3: each step line ends with its wall seconds and threads; TRL's step_time is not on it.
        "step lines": [m.group(1) for m in lines] == ["1", "2"] and {m.group(3) for m in lines} == {"1"},
        # wall time holds TRL's step time (training_step only) and the rest of the step; the lines add up to no more
        # than the run took
        "wall seconds": bool(lines)
        and all(float(m.group(2)) >= round(step_time[int(m.group(1))], 1) for m in lines)
        and sum(float(m.group(2)) for m in lines) <= total + 0.1,
        # 10: the precision line is information, not a warning.
        "precision at INFO": bool(re.search(r"INFO drgrpo\.run\.training: precision: training float32", result.stderr))
        and not re.search(r"WARNING \S+: precision:", result.stderr),
    }
    assert all(said.values()), ({key: ok for key, ok in said.items() if not ok}, output[-3000:])


def test_step_line_by_hand_shows_wall_seconds_and_threads_not_trls_step_time():
    from drgrpo.observe.step_log import StepClock, step_line

    logs = {"reward": 0.4125, "completions/mean_length": 35.2, "step_time": 16.2}
    assert step_line(logs, 3, 15, seconds=27.7, threads="1-2") == (
        "step 3/15 | reward 0.412 | length 35.2 | 27.7 s/step, 1-2 threads"
    )
    assert step_line(logs, 3, 15) == "step 3/15 | reward 0.412 | length 35.2"  # no clock: no seconds, not TRL's
    clock = StepClock(threads=False)
    clock.start(4)
    assert clock.line({"eval_reward": 0.5}, 4, 15, 0) == "eval at step 4/15 | reward 0.500"
    assert clock.line({"reward": 0.5}, 6, 15, 0).endswith(" s/step")
