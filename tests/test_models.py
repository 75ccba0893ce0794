"""Model names resolved before loading: prepared short names, local folders, hub ids; each failure in one line."""

from __future__ import annotations

import json
import runpy
import subprocess
import sys

import pytest
from conftest import ROOT

from drgrpo.core import models
from drgrpo.core.errors import RecipeError
from drgrpo.core.models import load_pretrained, resolve_model

HUB_ID = "no-such-org/no-such-model-for-drgrpo-tests"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(models.MODEL_CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_cache_folder_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.delenv(models.MODEL_CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert models.model_cache_dir() == tmp_path / "xdg" / "drgrpo" / "models"
    monkeypatch.setenv(models.MODEL_CACHE_ENV, str(tmp_path / "mine"))
    assert models.prepared_model_dir("smollm2-135m-instruct") == tmp_path / "mine" / "smollm2-135m-instruct"


def test_short_name_resolves_to_the_prepared_folder_only_when_complete(cache):
    folder = cache / "smollm2-135m-instruct"
    with pytest.raises(RecipeError, match=r"'smollm2-135m-instruct' is not prepared yet .*make smollm2"):
        models.resolve_model("smollm2-135m-instruct")
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    with pytest.raises(RecipeError, match="not prepared yet"):  # no marker: a half-written folder is not a model
        models.resolve_model("smollm2-135m-instruct")
    (folder / models.PREPARED_MARKER).write_text(json.dumps({"name": "smollm2-135m-instruct"}))
    assert models.resolve_model("smollm2-135m-instruct") == str(folder)


def test_local_folders(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "outputs").mkdir()
    saved = tmp_path / "outputs" / "run"
    saved.mkdir()
    (saved / "config.json").write_text("{}")
    assert models.resolve_model("outputs/run") == "outputs/run"
    for missing in ("outputs/nothing", "./nope", str(tmp_path / "absent"), "a/b/c"):
        with pytest.raises(RecipeError, match=r"no such model folder") as raised:
            models.resolve_model(missing)
        assert "\n" not in str(raised.value) and repr(missing) in str(raised.value)
    (tmp_path / "outputs" / "empty").mkdir()
    with pytest.raises(RecipeError, match="folder without config.json"):
        models.resolve_model("outputs/empty")
    (tmp_path / "outputs" / "empty" / "tokenizer.json").write_text("{}")  # --show_prompts needs only the tokenizer
    assert models.resolve_model("outputs/empty", tokenizer_only=True) == "outputs/empty"
    with pytest.raises(RecipeError, match="folder without config.json"):
        models.resolve_model("outputs/empty")


def test_uncached_hub_id_offline_fails_in_one_line(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(RecipeError) as raised:
        models.resolve_model("Qwen/Qwen2.5-Math-1.5B")
    message = str(raised.value)
    assert "'Qwen/Qwen2.5-Math-1.5B' is not in the Hugging Face cache" in message and "HF_HUB_OFFLINE" in message
    assert "hf download Qwen/Qwen2.5-Math-1.5B" in message and "\n" not in message


def test_unreachable_hub_is_named(monkeypatch):
    import huggingface_hub

    def refuse(*args, **kwargs):
        raise ConnectionError("[Errno -2] Name or service not known")

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)  # `make test` sets it
    monkeypatch.setattr(huggingface_hub, "model_info", refuse)
    with pytest.raises(RecipeError, match="the hub cannot be reached \\(ConnectionError\\)"):
        models.resolve_model("someone/some-model")


def test_training_and_evaluation_fail_in_one_line_on_a_missing_model(tmp_path):
    """The scripts, end to end: two lines (the error and the --traceback hint), no transformers traceback."""
    env = {"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "DRGRPO_MODEL_CACHE": str(tmp_path / "empty-cache"),
           "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}  # fmt: skip
    commands = [
        [sys.executable, "scripts/evaluate.py", "--model_name_or_path", "Qwen/Qwen2.5-Math-7B", "--data", "x.jsonl"],
        [sys.executable, "scripts/evaluate.py", "--model_name_or_path", "smollm2-135m-instruct", "--data", "x.jsonl"],
        [sys.executable, "scripts/train.py", "recipes/tiny_drgrpo.yaml", "--model_name_or_path", "outputs/gone/sft",
         "--show_prompts", "1"],
    ]  # fmt: skip
    for command in commands:
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2, done.stderr[-2000:]
        assert len(lines) == 2 and lines[0].startswith("error: model_name_or_path "), done.stderr[-2000:]
        assert command[command.index("--model_name_or_path") + 1] in lines[0]


@pytest.fixture
def empty_hf_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hf-cache"))


def test_an_uncached_hub_id_offline_is_one_line_with_the_fixes(empty_hf_cache, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    def no_network(*args, **kwargs):
        raise AssertionError("offline: the hub must not be asked")

    monkeypatch.setattr("huggingface_hub.model_info", no_network)
    with pytest.raises(RecipeError) as info:
        resolve_model(HUB_ID)
    message = str(info.value)
    assert f"model_name_or_path {HUB_ID!r} is not in the Hugging Face cache and the hub is switched off" in message
    assert f"hf download {HUB_ID}" in message and "HF_HUB_OFFLINE=0" in message and "local folder" in message


def test_an_unreachable_hub_is_asked_once_then_one_line(empty_hf_cache, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    calls = []

    def unreachable(*args, **kwargs):
        calls.append(kwargs)
        raise ConnectionError("Name or service not known")

    monkeypatch.setattr("huggingface_hub.model_info", unreachable)
    with pytest.raises(RecipeError, match="the hub cannot be reached \\(ConnectionError\\)"):
        resolve_model(HUB_ID)
    assert len(calls) == 1 and calls[0]["timeout"] == models.HUB_TIMEOUT_S


def test_load_pretrained_tries_the_local_files_first(tiny_model_path, monkeypatch):
    seen = []

    def loader(name, **kwargs):
        seen.append((name, kwargs))
        return "tokenizer"

    assert load_pretrained(loader, str(tiny_model_path)) == "tokenizer"
    assert seen == [(str(tiny_model_path), {"revision": None, "local_files_only": True})]
    # A cached hub id: loaded from the cache, no second (network) load.
    seen.clear()
    monkeypatch.setattr(models, "_cached", lambda repo_id, revision: True)
    load_pretrained(loader, HUB_ID, "main")
    assert seen == [(HUB_ID, {"revision": "main", "local_files_only": True})]


def test_show_prompts_on_an_uncached_hub_model_offline_is_one_line(
    empty_hf_cache, addition_data, tmp_path, monkeypatch, capsys
):
    """The CPU login-node pre-flight docs/install.md recommends, on a hub recipe without the model cached: at most
    3 lines naming the model and the fix, exit status 2, no traceback (was 50 s of retries and a 93-line one)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    argv = [
        "scripts/train.py", "recipes/qwen3_8b_drgrpo.yaml", "--model_name_or_path", HUB_ID,
        "--dataset_path", str(addition_data["train"]), "--show_prompts", "1",
    ]  # fmt: skip
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as info:
        runpy.run_path(str(ROOT / "scripts" / "train.py"), run_name="__main__")
    err = capsys.readouterr().err
    assert info.value.code == 2 and "Traceback" not in err and len(err.strip().splitlines()) <= 3, err
    assert f"error: model_name_or_path {HUB_ID!r} is not in the Hugging Face cache" in err
    assert "HF_HUB_OFFLINE=0" in err
