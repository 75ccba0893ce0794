"""Evaluation folders name a model once (issue 54, item 4): `make eval MODEL=../run1` wrote `outputs/eval/.._run1`,
hidden from `ls`, and the same model by its absolute path got a second folder and a second model in `eval-compare`.
Now the folder and the rows name the model's resolved path; `eval-compare` shows the model once, a row per setting.
The commands run in this process (the `run_script` fixture), from a working folder beside the model's."""

from __future__ import annotations

import json
import shutil

from drgrpo.evaluation.folders import sanitize


def test_one_model_by_relative_and_absolute_path_is_one_folder_and_one_model(tiny_model_path, tmp_path, run_script):
    work, model = tmp_path / "clone", tmp_path / "run1"
    work.mkdir()
    shutil.copytree(tiny_model_path, model)
    data = work / "sums.jsonl"
    data.write_text("".join(json.dumps({"question": f"{a}+{a}=", "answer": str(2 * a)}) + "\n" for a in (1, 3)))
    common = ["--benchmark", str(data), "--progress", "false", "--batch_size", "2"]
    for typed, tokens in (("../run1", "3"), (str(model), "4"), ("../run1/", "4")):  # the last resumes the second
        result = run_script(
            "scripts/evaluate.py", "--model_name_or_path", typed, "--max_new_tokens", tokens, *common, cwd=work
        )
        assert result.returncode == 0, result.stderr[-3000:]
    folders = sorted(path.name for path in (work / "outputs" / "eval").iterdir())
    assert folders == [sanitize(model.resolve().as_posix())]  # one folder, its name visible: no leading dot
    assert not folders[0].startswith(".")
    runs = sorted(path.name for path in (work / "outputs" / "eval" / folders[0]).iterdir())
    assert runs == ["sums-tok3", "sums-tok4"]
    table = run_script("scripts/compare_evals.py", "outputs/eval", cwd=work)
    assert table.returncode == 0, table.stderr[-3000:]
    rows = [line for line in table.stdout.splitlines() if line.startswith(f"| {model.resolve().as_posix()}")]
    labels = [row.split(" | ")[0].removeprefix("| ") for row in rows]
    assert labels == [f"{model.resolve().as_posix()} (max_new_tokens={n})" for n in (3, 4)], table.stdout


def test_make_score_reads_an_evaluations_samples_as_they_are(tiny_model_path, tmp_path, run_script):
    """Item 5: docs/rewards.md says `make score` reads an evaluation's samples.jsonl as is; it stopped at `no column
    'answer'` (the file's gold is `gold`). Scored as written, the accuracy reward agrees with the evaluation."""
    data = tmp_path / "sums.jsonl"
    data.write_text("".join(json.dumps({"question": f"{a}+{a}=", "answer": str(2 * a)}) + "\n" for a in (1, 3)))
    output = tmp_path / "eval"
    evaluated = run_script(
        "scripts/evaluate.py", "--model_name_or_path", str(tiny_model_path), "--benchmark", str(data),
        "--max_new_tokens", "3", "--progress", "false", "--output_dir", str(output),
    )  # fmt: skip
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    samples = output / "samples.jsonl"
    assert "answer" not in json.loads(samples.read_text().splitlines()[0])  # the evaluation's own columns
    result = run_script("scripts/score.py", "--input", str(samples), "--reward_funcs", "accuracy")
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"2 rows from {samples} (gold column 'gold')" in result.stdout
    rows = [json.loads(line) for line in samples.read_text().splitlines()]
    scored = [json.loads(line) for line in samples.with_suffix(".scored.jsonl").read_text().splitlines()]
    assert [row["answer"] for row in scored] == [row["gold"] for row in rows]
    assert [row["accuracy"] for row in scored] == [float(row["correct"]) for row in rows]
