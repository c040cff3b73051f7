"""The package's floors only look down, and no two modules import each other round a circle.

Floors, bottom up: errors/settings/values/safe_yaml/registry < core < data < families < job < the top (main, rank,
commands, predict, serve: every other top-level module or package). A module may import from its
own floor or a lower one. Every import counts: at module level and inside functions (``ast``).
"""

import ast
import os

import pytest

PACKAGE = "detector_training"
ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "container", PACKAGE)

FLOORS = {"errors": 1, "settings": 1, "values": 1, "safe_yaml": 1, "registry": 1, "core": 2, "data": 3, "families": 4, "job": 5}
TOP = 6

# Upward imports allowed for now, each with the issue that removes it (none today); the test
# below fails once one is gone, so that the list is kept short.
KNOWN_UPWARD = set()


def module_names():
    """Every module of the package, dotted (``detector_training.core.engine``)."""
    names = []
    for directory, _dirs, files in os.walk(ROOT):
        for name in files:
            if name.endswith(".py"):
                rel = os.path.relpath(os.path.join(directory, name), os.path.dirname(ROOT))[:-3]
                parts = rel.split(os.sep)
                names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return sorted(names)


def source_path(module):
    path = os.path.join(os.path.dirname(ROOT), *module.split("."))
    return os.path.join(path, "__init__.py") if os.path.isdir(path) else path + ".py"


def floor(module):
    parts = module.split(".")
    if len(parts) == 1:  # the package's own __init__
        return 1
    return FLOORS.get(parts[1], TOP)


def imported_modules(module, known):
    """The package modules ``module`` imports, anywhere in its source (resolved to modules: ``from
    detector_training.core import archive`` is ``detector_training.core.archive``)."""
    tree = ast.parse(open(source_path(module)).read(), source_path(module))
    is_package = source_path(module).endswith("__init__.py")
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")[: len(module.split(".")) - node.level + (1 if is_package else 0)]
                base = ".".join(anchor + ([base] if base else []))
            targets = [base + "." + alias.name if base + "." + alias.name in known else base
                       for alias in node.names]
        else:
            continue
        for target in targets:
            if target == PACKAGE or target.startswith(PACKAGE + "."):
                while target not in known and "." in target:
                    target = target.rsplit(".", 1)[0]
                if target != module:
                    found.add(target)
    return found


def import_graph():
    known = set(module_names())
    return {module: imported_modules(module, known) for module in known}


def upward_imports(graph):
    return sorted((importer, floor(importer), imported, floor(imported))
                  for importer, targets in graph.items() for imported in targets
                  if floor(imported) > floor(importer) and (importer, imported) not in KNOWN_UPWARD)


def circles(graph):
    """Every module that lies on a circle of imports, with one circle through it."""
    found = {}
    for start in graph:
        stack, seen = [(start, (start,))], set()
        while stack:
            node, path = stack.pop()
            for nxt in graph.get(node, ()):
                if nxt == start:
                    found[start] = path + (start,)
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, path + (nxt,)))
    return found


def test_the_walk_sees_every_floor_and_the_imports_inside_functions():
    graph = import_graph()
    assert {floor(m) for m in graph} == {1, 2, 3, 4, 5, TOP}
    # main.py imports the model directory's writer at module level, the report inside a function
    assert "detector_training.core.model_dir" in graph["detector_training.main"]
    assert "detector_training.core.report" in graph["detector_training.core.model_dir"]


def test_no_module_imports_from_a_floor_above_it():
    problems = ["%s (floor %d) imports %s (floor %d)" % item for item in upward_imports(import_graph())]
    assert not problems, "imports of a higher floor:\n" + "\n".join(problems)


def test_every_known_upward_import_still_exists():
    graph = import_graph()
    gone = sorted(pair for pair in KNOWN_UPWARD if pair[1] not in graph.get(pair[0], ()))
    assert not gone, "remove from KNOWN_UPWARD, they are gone: %s" % gone


def test_no_circle_between_modules():
    found = circles(import_graph())
    assert not found, "import circles:\n" + "\n".join(" -> ".join(c) for c in found.values())


@pytest.mark.parametrize("importer, imported, upward", [
    ("detector_training.core.start_model", "detector_training.predict", True),
    ("detector_training.data.common", "detector_training.job.config", True),
    ("detector_training.job.launcher", "detector_training.core.archive", False),
    ("detector_training.main", "detector_training.errors", False),
])
def test_floors_order_the_package_as_the_layout_says(importer, imported, upward):
    assert (floor(imported) > floor(importer)) == upward


def test_a_circle_is_found_and_named():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert set(circles(graph)) == {"a", "b", "c"}
    assert circles(graph)["a"] == ("a", "b", "c", "a")


def test_every_module_of_the_package_has_its_test_module_in_the_mirroring_folder():
    tests = os.path.dirname(os.path.abspath(__file__))
    missing = []
    for module in module_names():
        parts = module.split(".")[1:]
        if source_path(module).endswith("__init__.py"):  # a package's face (the registry: test_registry)
            continue
        expected = os.path.join(tests, *parts[:-1], "test_%s.py" % parts[-1])
        if not os.path.isfile(expected):
            missing.append("%s -> %s" % (module, os.path.relpath(expected, tests)))
    assert not missing, "modules without their test module: %s" % ", ".join(missing)
