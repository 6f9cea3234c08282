"""The dependency rules of ARCHITECTURE.md, enforced by reading every module's imports.

1. Pure modules (agreement, clustering, training algorithms, inference and recipes, monitoring.stats)
   import no Django and nothing of the project but other pure modules.
2. Web code never imports torch, transformers or other heavy ML libraries at module import time: outside
   the pure torch packages, such imports live inside the functions of worker code paths.
3. Apps depend one way: monitoring -> training -> annotation -> common. Nothing imports upwards.
4. No module imports a Celery tasks module (services send tasks by name), so no service <-> task cycle;
   every name sent through ``common.jobs.task_send`` is a task registered under that name.
5. Every project module (and name in it) a module imports exists in this tree (no path left behind
   by a move).
6. No module over MAX_MODULE_LINES lines unless its docstring says why (a line "Long module: ...").
7. No test module imports another test module (nor a conftest.py): what tests share lives in
   tests/helpers/ (fixtures reach a folder through its conftest.py) or tests/factories.py.
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
    "common.text",
    "annotation.agreement",
    "annotation.acquisition",
    "annotation.clustering",
    "annotation.formats",
    "annotation.simulation",
    "training.algorithms",
    "training.inference",
    "training.recipes",
    "monitoring.stats",
)
HEAVY = (
    "torch",
    "transformers",
    "sentence_transformers",
    "accelerate",
    "deepspeed",
    "trl",
    "gguf",
    "peft",
)
LAYER = {"common": 0, "annotation": 1, "training": 2, "monitoring": 3}
MAX_MODULE_LINES = 600
# Modules over MAX_MODULE_LINES in parts of the tree another change is reshaping: each with why it is
# left as it is for now. Remove an entry when the module is split or says "Long module:" itself.
KNOWN_LONG_MODULES: dict[str, str] = {}


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
# Tests and benchmarks: not held to the layering rules, but their imports must resolve too.
OTHER_MODULES = [
    (_module_name(path), path)
    for folder in ("tests", "bench")
    for path in (ROOT / folder).rglob("*.py")
]


def test_the_scan_sees_the_project():
    """Guard against a rule that passes because it looked at nothing."""
    names = {name for name, _ in MODULES}
    assert {"config.settings", "annotation.models", "training.inference.generation"} <= names


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


def _is_service_or_selector(module: str) -> bool:
    parts = module.split(".")
    return parts[0] in LAYER and any(
        part in ("services", "selectors") or part.endswith(("_services", "_selectors"))
        for part in parts[1:]
    )


SERVICES_AND_SELECTORS = [m for m in MODULES if _is_service_or_selector(m[0])]


def test_the_scan_sees_the_services_and_selectors():
    """The service <-> task rule below looked at the packages it is about."""
    names = {name for name, _ in SERVICES_AND_SELECTORS}
    assert {"annotation.services.agreement", "annotation.selectors.labelling"} <= names
    assert {"training.services", "monitoring.services.eval_rounds"} <= names


@pytest.mark.parametrize(("module", "path"), SERVICES_AND_SELECTORS, ids=str)
def test_services_and_selectors_never_import_a_tasks_module(module, path):
    """A tasks module imports the services it calls; a service or selector that imported a tasks
    module (at import time or inside a function, ``import`` or ``importlib``) would close a cycle.
    They name the task instead: ``common.jobs.task_send("app.tasks.name", ...)``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for name in _imports(path, top_level_only=False):
        assert not _is_tasks_module(name), f"{module} imports the task module {name}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _called_name(node) in ("import_module", "__import__"):
            target = _first_string(node)
            assert target is None or not _is_tasks_module(target), (
                f"{module} imports the task module {target} through importlib"
            )


def _called_name(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _first_string(call: ast.Call) -> str | None:
    if call.args and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str):
        return call.args[0].value
    return None


def _registered_tasks(path: Path) -> set[str]:
    """The names a tasks module registers: ``@shared_task(name="...")`` on its functions."""
    names = set()
    for node in ast.parse(path.read_text(), filename=str(path)).body:
        if isinstance(node, ast.FunctionDef):
            for decorator in node.decorator_list:
                if isinstance(decorator, ast.Call):
                    names.update(
                        keyword.value.value
                        for keyword in decorator.keywords
                        if keyword.arg == "name" and isinstance(keyword.value, ast.Constant)
                    )
    return names


def _sent_task_names() -> list[tuple[str, str]]:
    sent = []
    for module, path in MODULES:
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Call) and _called_name(node) == "task_send":
                name = _first_string(node)
                if name is not None:
                    sent.append((module, name))
    return sent


def test_every_task_sent_by_name_is_registered_under_that_name():
    """Sending by name must not trade the import cycle for a typo: each ``task_send("x.tasks.f")``
    names a function of ``x/tasks.py`` registered as exactly "x.tasks.f" (what task_send checks at
    send time, checked here for every call site, sent or not in the tests)."""
    sent = _sent_task_names()
    assert len(sent) >= 5, sent  # agreement, clustering, imports, eval generation, training
    for module, name in sent:
        tasks_module, _, _ = name.rpartition(".")
        assert _is_tasks_module(tasks_module), f"{module} sends {name!r}, not in a tasks module"
        path = ROOT / Path(*tasks_module.split(".")).with_suffix(".py")
        assert path.exists(), f"{module} sends {name!r}, but {path} does not exist"
        assert name in _registered_tasks(path), f"{module} sends {name!r}, not registered in {path}"


def _module_path(name: str) -> Path | None:
    path = ROOT / Path(*name.split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.exists():
            return candidate
    return None


def _defined_names(path: Path) -> set[str] | None:
    """Names a module binds at its top level (also inside top-level if/try blocks); None when it
    cannot be known statically (a star import or a module ``__getattr__``)."""
    names: set[str] = set()
    pending = list(ast.parse(path.read_text(), filename=str(path)).body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            if node.name == "__getattr__":
                return None
            names.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                if alias.name == "*":
                    return None
                names.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, ast.If | ast.Try | ast.With):
            pending.extend(ast.iter_child_nodes(node))
        elif isinstance(node, ast.ExceptHandler):
            pending.extend(node.body)
    return names


@pytest.mark.parametrize(("module", "path"), MODULES + sorted(OTHER_MODULES), ids=str)
def test_imported_project_modules_exist(module, path):
    """After a move, an import of the old path must fail here, not fall through to another copy of
    the project installed in the environment. ``import a.b``: a.b is a module of this tree;
    ``from a.b import c``: a.b is one, and c is a name it defines or a submodule a.b.c."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            source, names = node.module, [alias.name for alias in node.names]
        elif isinstance(node, ast.Import):
            source, names = None, [alias.name for alias in node.names]
        else:
            continue
        for name in [source] if source else names:
            if name.split(".")[0] in PROJECT_PACKAGES:
                assert _module_path(name), f"{module} imports {name}, which is not in the tree"
        if source is None or source.split(".")[0] not in PROJECT_PACKAGES:
            continue
        defined = _defined_names(_module_path(source))
        for name in names:
            assert defined is None or name in defined or _module_path(f"{source}.{name}"), (
                f"{module} imports {name} from {source}, which does not define it"
            )


def _long_module_reason(path: Path) -> str | None:
    docstring = ast.get_docstring(ast.parse(path.read_text(), filename=str(path))) or ""
    return next((line for line in docstring.splitlines() if line.startswith("Long module:")), None)


@pytest.mark.parametrize(("module", "path"), MODULES, ids=str)
def test_no_long_module_without_a_reason(module, path):
    """A module over MAX_MODULE_LINES lines (migrations and tests aside) does several things; split
    it, or say at its top why it stays whole ("Long module: ..."). KNOWN_LONG_MODULES lists those
    another change is reshaping."""
    lines = len(path.read_text().splitlines())
    if lines <= MAX_MODULE_LINES or module in KNOWN_LONG_MODULES:
        return
    assert _long_module_reason(path), (
        f"{module} has {lines} lines (over {MAX_MODULE_LINES}): split it, or give the reason in a "
        '"Long module: ..." line of its docstring'
    )


def test_known_long_modules_are_still_long():
    """An entry of KNOWN_LONG_MODULES goes once its module is split (or gives its own reason)."""
    paths = dict(MODULES)
    for module in KNOWN_LONG_MODULES:
        assert module in paths, f"{module} is listed as known long but does not exist"
        path = paths[module]
        assert len(path.read_text().splitlines()) > MAX_MODULE_LINES, f"{module} is short now"
        assert not _long_module_reason(path), f"{module} gives its own reason now"


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


def _resolve(module: str, path: Path, node: ast.ImportFrom) -> str | None:
    """The absolute module a ``from ... import`` names (relative ones resolved against ``module``)."""
    if node.level == 0:
        return node.module
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else [])) or None


def _project_target(name: str, modules: set[str]) -> str | None:
    """The project module an imported name runs: the name itself, else its nearest parent that is
    one (None outside the project)."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def _import_graph() -> dict[str, set[str]]:
    """module -> the project modules it imports, wherever the import sits (module level, inside a
    function, under ``if TYPE_CHECKING``): ``import x``, ``from x import y`` (an edge to x.y when y
    is a module, else to x) and ``importlib.import_module("x")`` with a literal name."""
    modules = {name for name, _ in MODULES}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for module, path in MODULES:
        targets: list[str] = []
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                targets.extend(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                source = _resolve(module, path, node)
                if source is None:
                    continue
                for alias in node.names:
                    sub = f"{source}.{alias.name}"
                    targets.append(sub if sub in modules else source)
            elif isinstance(node, ast.Call) and _called_name(node) in (
                "import_module",
                "__import__",
            ):
                literal = _first_string(node)
                if literal is not None:
                    targets.append(literal)
        for target in targets:
            found = _project_target(target, modules)
            if found is not None and found != module:
                graph[module].add(found)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (a -> b -> ... -> a) per strongly connected component of more than one module
    (Tarjan's algorithm, iterative), sorted so a failure reads the same on every run."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[set[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(component)
    cycles = []
    for component in components:
        start = min(component)
        # Shortest way back to start inside the component (breadth-first).
        previous: dict[str, str] = {}
        frontier = [start]
        while frontier and start not in previous:
            following = []
            for node in frontier:
                for child in sorted(graph[node] & component):
                    if child not in previous:
                        previous[child] = node
                        following.append(child)
            frontier = following
        # Walk the predecessor links back from start to start.
        chain = [start]
        node = previous[start]
        while node != start:
            chain.append(node)
            node = previous[node]
        chain.append(start)
        cycles.append(list(reversed(chain)))
    return sorted(cycles)


def test_the_cycle_finder_names_a_cycle():
    """Guard: a three-module loop (a deferred import closing it counts the same) is found and named
    in order; a tree is not a cycle."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c", "a"]]
    assert _cycles({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []


def test_the_import_graph_sees_deferred_and_package_imports():
    """Guard: the graph holds an import inside a function (tasks -> the services they call), a
    and a ``from package import module`` edge, so the cycle rule looks at them."""
    graph = _import_graph()
    assert "monitoring.services.eval_rounds" in graph["monitoring.tasks"]
    assert "monitoring.stats.stopping" in graph["monitoring.selectors.eval_rounds"]
    assert len(graph) == len(MODULES)


def test_no_import_cycles():
    """ARCHITECTURE.md: no import cycles anywhere, deferred imports included. Each cycle is named
    module by module; break it by moving the shared piece to a module both can import."""
    cycles = _cycles(_import_graph())
    assert cycles == [], "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


# What a module under tests/ may import of tests/: the shared helpers and the factories.
TEST_SHARED = ("tests.helpers", "tests.factories")


def _test_tree_imports(path: Path) -> list[str]:
    """The modules of tests/ that a file imports (``import tests.x``, ``from tests.x import y`` as
    tests.x.y when that is a module, ``from tests import x``), wherever the import sits."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.extend(a.name for a in node.names if a.name.split(".")[0] == "tests")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] != "tests":
                continue
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.append(sub if _module_path(sub) else node.module)
    return found


TEST_FILES = sorted((_module_name(path), path) for path in (ROOT / "tests").rglob("*.py"))


def test_the_test_import_scan_sees_the_helpers():
    """Guard: the scan reads tests/ and finds its imports of the shared helpers."""
    imported = {name for _, path in TEST_FILES for name in _test_tree_imports(path)}
    assert {"tests.factories", "tests.helpers.clients"} <= imported


@pytest.mark.parametrize(("module", "path"), TEST_FILES, ids=str)
def test_no_test_module_imports_another(module, path):
    """A test module (or conftest.py) imported by another runs its fixtures and autouse hooks
    twice and ties the two files together; shared code belongs in tests/helpers/ or
    tests/factories.py."""
    for name in _test_tree_imports(path):
        shared = any(name == s or name.startswith(s + ".") for s in TEST_SHARED)
        assert shared, f"{module} imports {name}: move what it shares to tests/helpers/"
