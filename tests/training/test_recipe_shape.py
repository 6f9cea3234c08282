"""The recipes' shape (issue 21): a reader follows each recipe in one screen, and long modules say
why they are long. Read with ``ast``, nothing imported."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RECIPES = ROOT / "training" / "recipes"
MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 600
RECIPE_MODULES = ("dpo", "kto", "ppo", "reward_model", "reward_rows", "rloo", "grpo")


def _functions(path: Path) -> list[tuple[str, int]]:
    tree = ast.parse(path.read_text())
    return [
        (node.name, node.end_lineno - node.lineno + 1)
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    ]


@pytest.mark.parametrize("path", sorted(RECIPES.glob("*.py")), ids=lambda p: p.name)
def test_no_function_in_the_recipes_is_longer_than_a_screen(path):
    """No function (or method) in training/recipes is over 80 lines, decorators left out."""
    long = [(name, n) for name, n in _functions(path) if n > MAX_FUNCTION_LINES]
    assert not long, f"{path.name}: functions over {MAX_FUNCTION_LINES} lines: {long}"


@pytest.mark.parametrize(
    "path",
    sorted(p for p in (ROOT / "training").rglob("*.py") if "migrations" not in p.parts),
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_a_module_over_600_lines_says_why_at_its_top(path):
    """A module of training/ over 600 lines has a line starting "Long module:" in its first 10."""
    lines = path.read_text().splitlines()
    if len(lines) > MAX_MODULE_LINES:
        head = [line.strip() for line in lines[:10]]
        assert any(line.startswith("Long module:") for line in head), (
            f"{path.relative_to(ROOT)} has {len(lines)} lines and no 'Long module:' reason"
        )


@pytest.mark.parametrize("name", RECIPE_MODULES)
def test_every_recipe_runs_through_the_one_step_loop(name):
    """Each recipe module defines its train_ function, a setup and a step function, and runs the
    steps through ``loop.run_steps`` (directly, or through ``run_pair_steps``, ``train_pair_recipe`` or
    ``run_online``), not a loop of its own over the sampler."""
    tree = ast.parse((RECIPES / f"{name}.py").read_text())
    functions = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    recipe = [f for n, f in functions.items() if n.startswith("train_")]
    steps = [f for n, f in functions.items() if n.endswith("_step")]
    assert recipe, f"{name}.py has no train_ function"
    assert steps, f"{name}.py has no step function"
    called = {
        _name(node.func)
        for f in functions.values()
        for node in ast.walk(f)
        if isinstance(node, ast.Call)
    }
    assert called & {"run_steps", "run_pair_steps", "train_pair_recipe", "run_online"}
    for function in recipe + steps:
        loops = [n for n in ast.walk(function) if isinstance(n, ast.For)]
        assert not any("positions" in ast.unparse(loop.iter) for loop in loops), function.name


def _name(func: ast.expr) -> str:
    return func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")


def test_the_plain_baseline_is_its_own_function_and_the_recipe_does_not_call_itself():
    """``train_reward_model`` trains the plain baseline through ``train_plain_baseline`` and
    never calls itself."""
    tree = ast.parse((RECIPES / "reward_model.py").read_text())
    recipe = next(
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.FunctionDef) and n.name == "train_reward_model"
    )
    called = {
        node.func.id
        for node in ast.walk(recipe)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    }
    assert "train_plain_baseline" in called
    assert "train_reward_model" not in called


def test_scoring_reads_the_chat_encoder_through_its_public_methods():
    """``RewardScorer`` fits chat inputs through ``ChatEncoder``'s public API, no private member."""
    tree = ast.parse((RECIPES / "scoring.py").read_text())
    private = [
        ast.unparse(node)
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and "chat_encoder" in ast.unparse(node.value)
        and node.attr.startswith("_")
    ]
    assert not private
