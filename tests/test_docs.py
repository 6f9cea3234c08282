"""The documentation: reference pages generated from the code follow the code, the site builds
strictly, every screenshot a page shows exists, and the README stays a short front door.

The reference pages are generated at build time and not committed (docs/reference/.gitignore): these
tests generate them from toy registries, commands, schemas and scripts to see each page follow its
source, and from the real code into a temporary copy of the site for the strict build."""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from django.core.management.base import BaseCommand

from training.recipes.config import DPOConfig
from training.recipes.kinds import KINDS, KindSpec, registered

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
# The screens the documentation shows, each written by tests/browser/test_tutorial.py.
SCREENSHOTS = (
    "labelling",
    "agreement-dashboard",
    "item-browser",
    "adjudication",
    "run-page",
    "compare",
    "eval-rating",
    "eval-round",
    "stopping-panel",
)


def _generator():
    """scripts/gen_docs_reference.py as a module (scripts/ is not a package)."""
    spec = importlib.util.spec_from_file_location(
        "gen_docs_reference", ROOT / "scripts" / "gen_docs_reference.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen = _generator()


@dataclass
class ToyConfig(DPOConfig):
    """A toy kind's settings."""

    toy_temperature: float = dataclasses.field(
        default=0.5, metadata={"help": "how warm the toy runs", "section": "Algorithm"}
    )


@dataclass
class ToyConfigWithMode(ToyConfig):
    """The toy kind with one more setting."""

    toy_mode: str = dataclasses.field(
        default="calm", metadata={"help": "the toy's mood", "choices": ("calm", "wild")}
    )


def _toy_spec(config_class) -> KindSpec:
    return KindSpec(name="toy", label="Toy kind", config_class=config_class, recipe="x:y")


def test_the_training_reference_follows_the_registry_and_the_config_fields():
    """A kind registered in the registry gets its section, its fields with help and choices; a field
    added to its config class appears on the page, and the page without the kind has neither."""
    without = gen.training_config_page(KINDS)
    with registered(_toy_spec(ToyConfig)):
        first = gen.training_config_page(KINDS)
    with registered(_toy_spec(ToyConfigWithMode)):
        second = gen.training_config_page(KINDS)
    assert "toy_temperature" not in without and "Toy kind" not in without
    assert "## Toy kind (`toy`) {#toy}" in first
    assert "| `toy_temperature` | float | `0.5` | - | Algorithm | how warm the toy runs |" in first
    assert "toy_mode" not in first
    assert "| `toy_mode` | str | `'calm'` | `calm`, `wild` | Algorithm | the toy's mood |" in second
    for spec in KINDS.values():  # every real kind and every one of its fields
        assert f"{{#{spec.name}}}" in without
        for field in dataclasses.fields(spec.config_class):
            if field.init:
                assert f"| `{field.name}` |" in without


def test_the_training_reference_marks_the_fields_a_run_fills_in():
    page = gen.training_config_page({"dpo": KINDS["dpo"]}, managed=("model",))
    assert "| `model` | str | `''` | - | filled in from the run |" in page


class ToyCommand(BaseCommand):
    help = "Do a toy thing to a project."

    def add_arguments(self, parser):
        parser.add_argument("path", help="file to read")
        parser.add_argument("--project", required=True, help="project slug")
        parser.add_argument(
            "--limit", type=int, default=10, help="at most this many (default %(default)s)"
        )


class ToyCommandWithFlag(ToyCommand):
    def add_arguments(self, parser):
        super().add_arguments(parser)
        parser.add_argument("--dry-run", action="store_true", help="write nothing")
        parser.add_argument("--format", choices=["jsonl", "hf"], default="jsonl", help="output")


def test_the_commands_reference_follows_each_commands_options():
    """The toy command's usage, help and options (Django's common ones left out); an option added to
    its parser appears on the page, with its choices."""
    first = gen.commands_page([("toy", ToyCommand())])
    second = gen.commands_page([("toy", ToyCommandWithFlag())])
    assert "## `toy` {#toy}" in first and "Do a toy thing to a project." in first
    assert "manage.py toy --project PROJECT [--limit LIMIT] path" in first
    assert "| `path` | - | file to read |" in first
    assert "| `--limit LIMIT` | `10` | at most this many (default 10) |" in first
    assert "--verbosity" not in first.split("## `toy`")[1]
    assert "--dry-run" not in first
    assert "| `--dry-run` | - | write nothing |" in second
    assert "| `--format {jsonl,hf}` | `'jsonl'` | output |" in second


def test_the_commands_reference_lists_every_concord_command(db):
    names = [name for name, _ in gen.concord_commands()]
    assert {"import_comparisons", "export_dataset", "agreement", "train", "rundemo"} <= set(names)
    assert "migrate" not in names  # Django's own are not Concord's
    page = gen.commands_page(gen.concord_commands())
    assert "| `--scalars-as-text` |" in page


def test_the_api_reference_follows_the_schema():
    toy_ref = {"$ref": "#/components/schemas/Toy"}
    get = {
        "description": "One toy.",
        "parameters": [
            {"name": "id", "in": "path", "required": True, "schema": {"type": "integer"}}
        ],
        "responses": {
            "200": {"content": {"application/json": {"schema": toy_ref}}, "description": ""}
        },
    }
    toy = {
        "type": "object",
        "required": ["name"],
        "properties": {"name": {"type": "string", "description": "its name"}},
    }
    schema = {
        "info": {"title": "Toy API", "version": "1.2"},
        "paths": {"/api/toys/{id}/": {"get": get}},
        "components": {
            "schemas": {"Toy": toy},
            "securitySchemes": {"bearerAuth": {"type": "http", "scheme": "bearer"}},
        },
    }
    page = gen.rest_api_page(schema)
    assert "## `GET /api/toys/{id}/`" in page and "One toy." in page
    assert "| `id` | path | yes | integer | - |" in page
    assert "| 200 | application/json: Toy | - |" in page
    assert "| `name` | string | yes | no | its name |" in page
    assert "| `bearerAuth` | http | bearer |" in page
    schema["paths"]["/api/toys/{id}/"]["delete"] = {"description": "Throw it away."}
    assert "## `DELETE /api/toys/{id}/`" in gen.rest_api_page(schema)


def test_the_api_reference_covers_the_served_schema(db):
    page = gen.rest_api_page(gen.served_schema())
    assert "## `POST /api/projects/{slug}/imports/`" in page
    assert "## `GET /api/projects/{slug}/imports/{job_id}/`" in page


def test_the_keyboard_reference_follows_the_scripts():
    script = (
        "// The toy screen. Keys: 1 picks.\n//\n// Not part of the description.\n"
        'const keys = { "1": "left", ArrowRight: "right" };\n'
        'document.addEventListener("keydown", (e) => { if (e.key === "Enter") go(); '
        'else if (key === "x") stop(); });\n'
    )
    page = gen.keyboard_page({"static/toy.js": script, "static/quiet.js": "const a = 1;"})
    assert "## `static/toy.js`" in page and "quiet.js" not in page
    assert "The toy screen. Keys: 1 picks.\n" in page and "Not part of" not in page
    assert "| `keys` | `1` | `left` |" in page and "| `keys` | `ArrowRight` | `right` |" in page
    assert "Other keys it handles: `Enter`, `x`." in page
    more = script.replace('ArrowRight: "right"', 'ArrowRight: "right", "3": "tie"')
    assert "| `keys` | `3` | `tie` |" in gen.keyboard_page({"static/toy.js": more})


def test_the_keyboard_reference_covers_the_labelling_screen():
    page = gen.keyboard_page(gen.screen_scripts())
    section = page.split("## `static/annotation/label.js`", 1)[1].split("\n## ", 1)[0]
    for key, value in (("1", "left"), ("2", "right"), ("3", "tie"), ("4", "both_bad"), ("q", "1")):
        assert f"| `{key}` | `{value}` |" in section


def test_the_site_builds_strictly_with_the_generated_reference(db, tmp_path):
    """``mkdocs build --strict`` on a copy of the site with the reference generated from the code:
    every page in the navigation, every link and anchor found (what `make docs` and CI check)."""
    shutil.copytree(DOCS, tmp_path / "docs", ignore=shutil.ignore_patterns("*.md.tmp"))
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    gen.generate(tmp_path / "docs" / "reference")
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet"]  # as make docs
    result = subprocess.run(
        [*command, "--site-dir", str(tmp_path / "site")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "site" / "reference" / "training-config.html").is_file()


def _markdown_pages() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def test_every_image_a_page_shows_exists():
    """An image link in the README or a docs page names a file that is there (the screenshots are
    written by tests/browser/test_tutorial.py with CONCORD_DOCS_SCREENSHOTS=1)."""
    missing = []
    for page in _markdown_pages():
        for target in re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", page.read_text(encoding="utf-8")):
            if not (page.parent / target).resolve().is_file():
                missing.append(f"{page.relative_to(ROOT)}: {target}")
    assert not missing, missing


def test_every_documented_screen_has_its_screenshot_shown_and_small():
    shown = "".join(page.read_text(encoding="utf-8") for page in _markdown_pages())
    for name in SCREENSHOTS:
        path = DOCS / "img" / f"{name}.png"
        assert path.is_file(), (
            f"{path} missing: run the tutorial test with CONCORD_DOCS_SCREENSHOTS=1"
        )
        assert path.stat().st_size < 400_000, f"{path} is over 400 kB"
        assert f"img/{name}.png" in shown, f"no page shows {name}.png"


def test_the_readme_is_a_short_front_door_into_the_docs():
    """Under 200 lines, with the two commands, and every link into docs/ pointing at a page."""
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) < 200
    assert "make demo" in text and "make test" in text
    for target in re.findall(r"\]\((docs/[^)#\s]+)", text):
        assert (ROOT / target).is_file(), target
