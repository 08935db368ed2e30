"""The package's layers, checked on its source (AST, nothing imported): no import cycles, nothing outside ros/ imports
rclpy, ROS message packages or grounded_planner.ros, each layer imports only the layers below it, and imports sit
at module top unless they load an optional SDK (the layer table of docs/architecture.md, which ALLOWED below is).

Every failure names the importing file and line, the imported module and the rule it breaks.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "grounded_planner"

# The packages every install has (setup.py install_requires): never a reason for a lazy import.
CORE_THIRD_PARTY = {"numpy", "yaml", "PIL", "setuptools"}
# ROS: rclpy and generated message packages belong to ros/ only.
ROS_MODULES = (
    "rclpy",
    "rosidl_runtime_py",
    "grounded_planner_interfaces",
    "action_msgs",
    "builtin_interfaces",
    "geometry_msgs",
    "sensor_msgs",
    "std_msgs",
    "std_srvs",
    "visualization_msgs",
    "lifecycle_msgs",
    "rcl_interfaces",
    "launch",
    "launch_ros",
    "moveit",
    "moveit_py",
    "franka_msgs",
    "control_msgs",
)
# Layer -> the layers it may import (docs/architecture.md's table; "util" are top-level helper modules).
ALLOWED = {
    "util": set(),
    "plan": {"util"},
    "geometry": {"util", "plan"},
    "vlm": {"util", "plan"},
    "msgs": {"util", "plan", "geometry"},
    "execution": {"util", "plan", "geometry", "msgs"},
    "rollout": {"util", "plan", "msgs"},
    "bench": {"util", "plan", "vlm", "rollout"},
    "v2gp": {"util", "plan", "vlm", "geometry", "rollout"},
    "sim": {"util", "plan", "geometry", "vlm", "execution", "rollout", "msgs"},
    "spabench": {"util", "plan", "geometry", "vlm", "execution", "rollout", "sim"},
    # the console's trials.jsonl lines are spabench's TrialRecord (the Spa-Bench contract), written by that class
    "console": {"util", "plan", "rollout", "spabench"},
    "ros": {
        "util",
        "plan",
        "geometry",
        "vlm",
        "execution",
        "rollout",
        "msgs",
        "sim",
        "bench",
        "v2gp",
        "spabench",
        "console",
        "ros",
    },
    "cli": {
        "util",
        "plan",
        "geometry",
        "vlm",
        "execution",
        "rollout",
        "msgs",
        "sim",
        "bench",
        "v2gp",
        "spabench",
        "console",
        "ros",
    },
}
# Named exceptions, each with its reason; the list only shrinks.
EXCEPTIONS = {
    # the backend registry builds the simulator backend by name; the simulator imports execution's base class
    ("grounded_planner.execution.backends", "sim"): "backend registry: 'sim' is one of its backends",
}
# cli commands that run a ROS graph import grounded_planner.ros (rclpy is optional for the CLI: lazily).
CLI_ROS_COMMANDS = {
    "grounded_planner.cli.bringup",
    "grounded_planner.cli.demo",
    "grounded_planner.cli.approve",
    "grounded_planner.cli.console",
    "grounded_planner.cli.execute",
    "grounded_planner.cli.spabench_session",
}


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


MODULES = _modules()


def _layer(module: str) -> str:
    parts = module.split(".")
    if len(parts) < 2 or (PACKAGE / f"{parts[1]}.py").is_file():
        return "util"
    return parts[1]


def _targets(module: str, node: ast.AST, is_package: bool) -> list[str]:
    """Absolute names an import statement loads (a from-import of a submodule names the submodule)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    assert isinstance(node, ast.ImportFrom)
    if node.level:
        base = module.split(".")[: len(module.split(".")) - node.level + (1 if is_package else 0)]
        prefix = ".".join(base + ([node.module] if node.module else []))
    else:
        prefix = node.module or ""
    return [prefix] + [f"{prefix}.{a.name}" for a in node.names if f"{prefix}.{a.name}" in MODULES]


class Import:
    def __init__(self, module: str, target: str, line: int, nested: bool):
        self.module, self.target, self.line, self.nested = module, target, line, nested

    def where(self) -> str:
        return f"{MODULES[self.module].relative_to(REPO)}:{self.line}"


def _imports() -> list[Import]:
    found = []
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        in_function = {
            id(n)
            for fn in ast.walk(tree)
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
            for n in ast.walk(fn)
            if isinstance(n, (ast.Import, ast.ImportFrom))
        }
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in _targets(module, node, path.name == "__init__.py"):
                    found.append(Import(module, target, node.lineno, id(node) in in_function))
    return found


IMPORTS = _imports()


def _internal(target: str) -> str | None:
    """The grounded_planner module an import loads (the nearest existing module), or None."""
    while target.startswith("grounded_planner"):
        if target in MODULES:
            return target
        target = target.rpartition(".")[0]
    return None


def test_no_import_cycles():
    graph: dict[str, dict[str, Import]] = defaultdict(dict)
    for imp in IMPORTS:
        target = _internal(imp.target)
        if target and target != imp.module:
            graph[imp.module].setdefault(target, imp)
    # Tarjan's strongly connected components: every component of more than one module is a cycle
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in MODULES:
        if module not in index:
            visit(module)
    lines = []
    for component in cycles:
        edges = [f"  {graph[a][b].where()}: {a} imports {b}" for a in component for b in component if b in graph[a]]
        lines.append("import cycle between " + ", ".join(component) + ":\n" + "\n".join(edges))
    assert not cycles, (
        "\n".join(lines) + "\n(answer a cycle in the module layout: move the shared part into a module both can import)"
    )


def test_only_ros_imports_rclpy_messages_and_the_ros_package():
    problems = []
    for imp in IMPORTS:
        if _layer(imp.module) == "ros":
            continue
        root = imp.target.split(".")[0]
        is_ros = root in ROS_MODULES or imp.target.startswith("grounded_planner.ros")
        if not is_ros:
            continue
        if imp.module in CLI_ROS_COMMANDS and imp.nested and imp.target.startswith("grounded_planner.ros"):
            continue  # a ROS command of the CLI, lazily: the CLI itself runs without rclpy
        if (imp.module, "ros") in EXCEPTIONS:
            continue
        problems.append(
            f"{imp.where()}: {imp.module} imports {imp.target} — only grounded_planner/ros/ may import "
            "rclpy, ROS message packages or grounded_planner.ros (take message classes as arguments, "
            "as grounded_planner.msgs does)"
        )
    assert not problems, "\n".join(problems)


def test_each_layer_imports_only_the_layers_below_it():
    problems = []
    for imp in IMPORTS:
        target = _internal(imp.target)
        if target is None:
            continue
        src, dst = _layer(imp.module), _layer(target)
        if src == dst or dst in ALLOWED.get(src, set()):
            continue
        if (imp.module, dst) in EXCEPTIONS or any(imp.module.startswith(m + ".") and d == dst for m, d in EXCEPTIONS):
            continue
        problems.append(
            f"{imp.where()}: {imp.module} ({src} layer) imports {target} ({dst} layer); "
            f"{src} may import only {', '.join(sorted(ALLOWED.get(src, set()))) or 'nothing of ours'}"
        )
    assert not problems, "\n".join(problems)


def _loads_optional_sdk(module: str, seen: set[str] | None = None) -> bool:
    """True when importing ``module`` loads (at its top level, transitively) a package outside the core install."""
    seen = set() if seen is None else seen
    if module in seen:
        return False
    seen.add(module)
    for imp in IMPORTS:
        if imp.module != module or imp.nested:
            continue
        target = _internal(imp.target)
        if target is not None:
            if _loads_optional_sdk(target, seen):
                return True
        else:
            root = imp.target.split(".")[0]
            if (
                root
                and root not in sys.stdlib_module_names
                and root not in CORE_THIRD_PARTY
                and root != "grounded_planner"
            ):
                return True
    return False


def _lazy_imports_without_reason() -> set[str]:
    """``module -> target`` of imports inside functions that load no optional SDK (stdlib, core, plain modules)."""
    out = set()
    for imp in IMPORTS:
        if not imp.nested:
            continue
        target = _internal(imp.target)
        root = imp.target.split(".")[0]
        if target is None:
            if root == "__future__" or (root not in sys.stdlib_module_names and root not in CORE_THIRD_PARTY):
                continue  # an optional SDK (torch, mujoco, pyrealsense2, rclpy for the CLI, ...): lazily is right
        elif _loads_optional_sdk(target):
            continue
        if imp.module in CLI_ROS_COMMANDS and (target or "").startswith("grounded_planner.ros"):
            continue
        out.add(f"{imp.module} -> {target or imp.target}")
    return out


def test_imports_sit_at_module_top_unless_they_load_an_optional_sdk():
    """An import inside a function is for an optional SDK (or a module that loads one at its top) only; a cycle
    it would dodge is a layout question."""
    where = {f"{i.module} -> {_internal(i.target) or i.target}": i.where() for i in IMPORTS if i.nested}
    lazy = sorted(_lazy_imports_without_reason())
    assert not lazy, (
        "imports inside functions that load no optional SDK (move them to the module top; a cycle "
        "they dodge is a layout question):\n" + "\n".join(f"  {where[n]}: {n}" for n in lazy)
    )


def test_each_lazy_import_says_why():
    """An import inside a function carries a comment (on its line or the line above) saying which optional SDK
    needs the laziness, so a reader can tell a justified one from a dodged cycle."""
    missing = set()
    for imp in IMPORTS:
        if not imp.nested:
            continue
        lines = MODULES[imp.module].read_text(encoding="utf-8").splitlines()
        here, above = lines[imp.line - 1], lines[imp.line - 2] if imp.line > 1 else ""
        if "#" not in here and not above.strip().startswith("#"):
            missing.add(f"  {imp.where()}: {here.strip()}")
    assert not missing, "imports inside functions without a comment saying why they are lazy:\n" + "\n".join(
        sorted(missing)
    )


def test_every_exception_class_derives_from_the_package_root():
    """Every exception class of the package is a GroundedPlannerError (grounded_planner/errors.py), so callers and
    the command line tell bad input (InputError), a run-time failure (RunFailure) and a bug apart by class. This
    one test imports every module (the others read source only)."""
    import importlib
    import inspect
    import pkgutil

    import grounded_planner
    from grounded_planner.errors import GroundedPlannerError

    outside, unimportable = [], []
    for info in pkgutil.walk_packages(grounded_planner.__path__, "grounded_planner."):
        try:
            module = importlib.import_module(info.name)
        except ImportError as exc:  # a module must import without its optional SDKs (they load inside functions)
            unimportable.append(f"{info.name}: {exc!r}")
            continue
        for obj in vars(module).values():
            if (
                inspect.isclass(obj)
                and issubclass(obj, BaseException)
                and obj.__module__ == info.name
                and not issubclass(obj, GroundedPlannerError)
            ):
                outside.append(f"{info.name}.{obj.__qualname__} (bases: {[b.__name__ for b in obj.__bases__]})")
    assert not unimportable, "modules that do not import:\n" + "\n".join(unimportable)
    assert not outside, (
        "exception classes outside grounded_planner.errors.GroundedPlannerError (derive them from "
        "InputError, RunFailure or a layer's error):\n" + "\n".join(outside)
    )


def test_no_import_renames_a_class_to_another_concepts_name():
    """One name per concept (docs/architecture.md's glossary): a class of the package or a message of
    grounded_planner_interfaces is never imported under the name of another one (``ExecutionResult as Outcome``
    made a test read as if it sent the step-outcome enum). Renaming to a name of its own (``ExecutionResult as
    ExecutionResultMsg``, beside the Python class) stays allowed."""
    ours = {
        node.name
        for path in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ClassDef)
    }
    ours |= {
        p.stem for p in (REPO / "grounded_planner_interfaces").glob("*/*") if p.suffix in (".msg", ".srv", ".action")
    }
    crossed = []
    for folder in ("grounded_planner", "test", "benchmarks"):
        for path in sorted((REPO / folder).rglob("*.py")):
            if "fixtures" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not (isinstance(node, ast.ImportFrom) and (node.module or "").startswith("grounded_planner")):
                    continue
                crossed += [
                    f"  {path.relative_to(REPO)}:{node.lineno}: {alias.name} as {alias.asname}"
                    for alias in node.names
                    if alias.asname and alias.asname != alias.name and alias.asname in ours
                ]
    assert not crossed, "imports that give a class another concept's name:\n" + "\n".join(crossed)


# Class names two modules of the package both define, each with the reason it is left; the list only shrinks.
SHARED_CLASS_NAMES = {
    "ConfigError": "execution.config's and spabench.errors' (the Spa-Bench matrix file): one name, two files' errors",
    "DemoEpisode": "v2gp.episode's (read from a dataset) and spabench.demos' (recorded to write one)",
    "DemoError": "ros.demo's (make demo) and spabench.demos' (spabench demos)",
    "Frame": "console.graph's (a JPEG for the page) and spabench.session's (a camera frame of a live session)",
    "MissingDependencyError": "the v2gp layer's own subclass of errors.MissingDependencyError, as each layer has",
    "Sam3Grounder": "v2gp.ground's (transformers' Sam3Model) and vlm.decoupled's (the sam3 package): two grounders",
    "VLMGrounder": "v2gp.ground's and vlm.decoupled's: two grounders of the same kind in two layers",
}


def test_no_two_classes_of_the_package_share_a_name():
    """One name per concept (docs/architecture.md's glossary): two classes of one name in two modules read as one
    thing in a traceback, a log line or an import, and tests end up renaming them crosswise. The names two modules
    still share are listed in SHARED_CLASS_NAMES with the reason, and that list only shrinks."""
    where = defaultdict(list)
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                where[node.name].append(f"{path.relative_to(REPO)}:{node.lineno}")
    shared = {name: places for name, places in where.items() if len(places) > 1}
    new = {name: places for name, places in shared.items() if name not in SHARED_CLASS_NAMES}
    assert not new, "classes of one name in two modules (give one a name of its own):\n" + "\n".join(
        f"  {name}: {', '.join(places)}" for name, places in sorted(new.items())
    )
