"""Which model a name means (`drgrpo.core.models`): a model that cannot be had is one line naming it and the fix, with
no retries offline; one that can is loaded once, from the local cache first."""

from __future__ import annotations

import runpy
import sys

import pytest
from conftest import ROOT

from drgrpo.core import models
from drgrpo.core.errors import RecipeError
from drgrpo.core.models import load_pretrained, resolve_model

HUB_ID = "no-such-org/no-such-model-for-drgrpo-tests"


@pytest.fixture
def empty_hf_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hf-cache"))


def test_a_local_folder_is_itself_and_a_missing_one_is_one_line(tiny_model_path, tmp_path):
    assert resolve_model(str(tiny_model_path)) == str(tiny_model_path)
    with pytest.raises(RecipeError, match=r"model_name_or_path 'outputs/no/such': no such model folder"):
        resolve_model("outputs/no/such")
    (tmp_path / "empty").mkdir()
    with pytest.raises(RecipeError, match="a folder without config.json or tokenizer_config.json"):
        resolve_model(str(tmp_path / "empty"), key="tokenizer")


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
