"""The dependency rules of ARCHITECTURE.md, enforced by reading every module's imports.

1. Pure modules (agreement, clustering, training algorithms and recipes, stopping) import no Django
   and nothing of the project but other pure modules.
2. Web code never imports torch, transformers or other heavy ML libraries at module import time: outside
   the pure torch packages, such imports live inside the functions of worker code paths.
3. Apps depend one way: monitoring -> training -> annotation -> common. Nothing imports upwards.
4. No module imports a Celery tasks module (services send tasks by name), so no service <-> task cycle.
"""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROJECT_PACKAGES = ("config", "common", "annotation", "training", "monitoring")
PURE = (
    "common.ngrams",
    "common.sides",
    "annotation.agreement",
    "annotation.clustering",
    "annotation.formats",
    "training.algorithms",
    "training.recipes",
    "monitoring.stopping",
)
HEAVY = ("torch", "transformers", "sentence_transformers", "accelerate", "deepspeed", "trl", "gguf")
LAYER = {"common": 0, "annotation": 1, "training": 2, "monitoring": 3}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _project_modules() -> list[tuple[str, Path]]:
    modules = []
    for package in PROJECT_PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" not in path.parts:
                modules.append((_module_name(path), path))
    return modules


def _imports(path: Path, *, top_level_only: bool) -> list[str]:
    """Absolute names imported by the file; with top_level_only, those run at import time (not
    inside a function or method body)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    deferred: set[int] = set()
    if top_level_only:
        for holder in ast.walk(tree):
            if isinstance(holder, ast.FunctionDef | ast.AsyncFunctionDef):
                deferred.update(id(child) for child in ast.walk(holder))
    names = []
    for node in ast.walk(tree):
        if id(node) in deferred:
            continue
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return names


def _is_pure(module: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in PURE)


MODULES = _project_modules()


def test_the_scan_sees_the_project():
    """Guard against a rule that passes because it looked at nothing."""
    names = {name for name, _ in MODULES}
    assert {"config.settings", "annotation.models", "training.recipes.generation"} <= names


@pytest.mark.parametrize(("module", "path"), [m for m in MODULES if _is_pure(m[0])], ids=str)
def test_pure_modules_import_no_django_and_no_app_code(module, path):
    """Pure maths takes arrays and tensors: no Django, and no project module that is not pure."""
    for name in _imports(path, top_level_only=False):
        root = name.split(".")[0]
        assert root != "django", f"{module} imports {name}"
        if root in PROJECT_PACKAGES:
            assert _is_pure(name), f"pure module {module} imports non-pure {name}"


@pytest.mark.parametrize(("module", "path"), [m for m in MODULES if not _is_pure(m[0])], ids=str)
def test_non_pure_modules_import_no_ml_library_at_import_time(module, path):
    """Heavy ML imports happen inside worker functions, so web processes never load torch."""
    for name in _imports(path, top_level_only=True):
        root = name.split(".")[0]
        assert root not in HEAVY, f"{module} imports {name} at module level"
        assert not (_is_pure(name) and name.startswith("training.")), (
            f"{module} imports the torch package {name} at module level"
        )


@pytest.mark.parametrize(("module", "path"), MODULES, ids=str)
def test_apps_import_one_way(module, path):
    """monitoring -> training -> annotation -> common; never the other way."""
    own = module.split(".")[0]
    if own not in LAYER:
        return
    for name in _imports(path, top_level_only=False):
        root = name.split(".")[0]
        if root in LAYER:
            assert LAYER[root] <= LAYER[own], f"{module} imports {name} (upwards)"


def _is_tasks_module(name: str) -> bool:
    parts = name.split(".")
    return parts[0] in PROJECT_PACKAGES and parts[-1] == "tasks"


@pytest.mark.parametrize(("module", "path"), MODULES, ids=str)
def test_no_module_imports_a_tasks_module(module, path):
    """A task module imports the service it calls, so a service that imported its tasks (even
    inside a function) would close a cycle. Services send tasks by name (common.jobs.task_send);
    Celery finds the one ``tasks.py`` of each app by autodiscovery."""
    for name in _imports(path, top_level_only=False):
        assert not _is_tasks_module(name), f"{module} imports the task module {name}"


def test_each_app_keeps_its_tasks_in_one_module():
    """One ``tasks.py`` per app: no ``<topic>_tasks.py`` beside it for autodiscovery to miss."""
    strays = [name for name, _ in MODULES if name.endswith("_tasks")]
    assert strays == []


def test_web_process_does_not_load_torch():
    """Loading every URL, view and admin of the site, and the recipes package's configs, leaves
    torch and transformers unimported."""
    code = (
        "import sys, django, os;"
        "os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'config.settings');"
        "django.setup();"
        "from django.urls import get_resolver; get_resolver().url_patterns;"
        "import config.wsgi;"
        "from django.contrib import admin; admin.autodiscover();"
        # The admin's run form validates settings through the recipes package: it must stay light.
        "import training.recipes; training.recipes.config_class('dpo');"
        "bad = [m for m in ('torch', 'transformers', 'sentence_transformers') if m in sys.modules];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
