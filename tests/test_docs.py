"""The reference pages against the code: what the docs name, the code accepts or reads, and the
reverse; every link in the README and docs/ leads somewhere; the README stays a short guide."""

import ast
import dataclasses
import os
import re
import tomllib

from detector_training import settings
from detector_training.job import builtin_algorithm, config
from detector_training.job.metrics import METRIC_DEFINITIONS
from test_layout import ROOT as PACKAGE_ROOT, module_names, source_path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")
PACKAGE = os.path.join(ROOT, "container", "detector_training")
README_MAX_LINES = 350
README_MAX_LINE_LENGTH = 200


def read(*parts):
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as handle:
        return handle.read()


def markdown_pages():
    pages = ["README.md", os.path.join("benchmarks", "README.md")]
    pages += [os.path.join("docs", name) for name in sorted(os.listdir(DOCS)) if name.endswith(".md")]
    return pages


# --- hyperparameters -------------------------------------------------------------------------

def documented_hyperparameters(text):
    """First-column names of every table whose header starts ``| name | type |``."""
    names, in_table = [], False
    for line in text.splitlines():
        if re.match(r"\|\s*name\s*\|\s*type\s*\|", line):
            in_table = True
        elif in_table and line.startswith("|---"):
            continue
        elif in_table and line.startswith("|"):
            names.append(re.match(r"\|\s*`([^`]+)`", line).group(1))
        else:
            in_table = False
    return names


def test_hyperparameter_reference_names_exactly_what_the_config_accepts():
    accepted = {f.name for f in dataclasses.fields(config.TrainConfig)} | set(config.LAUNCH_KEYS) \
        | set(builtin_algorithm.NAMES)
    documented = documented_hyperparameters(read("docs", "hyperparameters.md"))
    assert len(documented) == len(set(documented)), "listed twice: %s" % sorted(
        n for n in documented if documented.count(n) > 1)
    missing = sorted(accepted - set(documented))
    unknown = sorted(set(documented) - accepted)
    assert not missing, "the config accepts these, docs/hyperparameters.md omits them: %s" % missing
    assert not unknown, "docs/hyperparameters.md lists these, the config does not accept them: %s" % unknown


def test_documented_names_pass_the_configs_own_key_check():
    documented = documented_hyperparameters(read("docs", "hyperparameters.md"))
    refused = [n for n in documented if config.closest_key(n) != n]
    assert not refused, "the config would call these unknown: %s" % refused


# --- environment variables -------------------------------------------------------------------

def _docstring_nodes(tree):
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                yield first.value


def _loop_values(tree, call, variable):
    """String constants that ``variable`` takes in the for-loop around ``call`` that binds it:
    ``for key, ... in (("FETCH_WORKERS", ...), ...)`` gives every first element."""
    for loop in ast.walk(tree):
        if not isinstance(loop, ast.For) or not any(n is call for n in ast.walk(loop)):
            continue
        target = loop.target
        if isinstance(target, ast.Name) and target.id == variable:
            rows, position = [loop.iter], None
        elif isinstance(target, ast.Tuple) and any(isinstance(e, ast.Name) and e.id == variable for e in target.elts):
            rows = getattr(loop.iter, "elts", [])
            position = [getattr(e, "id", None) for e in target.elts].index(variable)
        else:
            continue
        values = []
        for row in rows:
            items = getattr(row, "elts", [row]) if position is None else [row.elts[position]]
            values += [item.value for item in items if isinstance(item, ast.Constant)]
        if values and all(isinstance(v, str) for v in values):
            return values
    return None


def _setting_key(tree, call, path):
    """The key(s) a ``settings.setting(...)``/``settings.name(...)`` call reads."""
    arg = call.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return [arg.value]
    if isinstance(arg, ast.Attribute) and isinstance(arg.value, ast.Name) and arg.value.id == "settings":
        return [getattr(settings, arg.attr)]
    if isinstance(arg, ast.Name):
        values = _loop_values(tree, call, arg.id)
        if values:
            return values
    raise AssertionError("%s:%d: cannot tell which setting this call reads; name the key with a string "
                         "or a settings constant" % (path, call.lineno))


def settings_the_package_reads():
    names = set()
    for folder, _, files in os.walk(PACKAGE):
        for file_name in files:
            if not file_name.endswith(".py"):
                continue
            path = os.path.join(folder, file_name)
            if os.path.samefile(path, settings.__file__):
                continue
            with open(path, encoding="utf-8") as handle:
                tree = ast.parse(handle.read(), path)
            docstrings = set(map(id, _docstring_nodes(tree)))
            for node in ast.walk(tree):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                        and isinstance(node.func.value, ast.Name) and node.func.value.id == "settings" \
                        and node.func.attr in ("setting", "name"):
                    names.update(settings.name(key) for key in _setting_key(tree, node, path))
                elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                    names.update(re.findall(r"\bDETECTOR_[A-Z0-9_]*[A-Z0-9](?![A-Z0-9_{])", node.value))
    return names


def test_every_setting_the_package_reads_is_in_the_environment_reference():
    read_by_code = settings_the_package_reads()
    assert {"DETECTOR_WORK_DIR", "DETECTOR_FETCH_WORKERS"} <= read_by_code  # the scan finds them
    documented = set(re.findall(r"`(DETECTOR_[A-Z0-9_]+)`", read("docs", "environment.md")))
    missing = sorted(read_by_code - documented)
    assert not missing, "the package reads these, docs/environment.md omits them: %s" % missing
    set_by_image = set(re.findall(r"\b(DETECTOR_[A-Z0-9_]+)=", read("Dockerfile")))
    stale = sorted(documented - read_by_code - set_by_image)
    assert not stale, "docs/environment.md lists these, nothing reads or sets them: %s" % stale


# --- metrics ---------------------------------------------------------------------------------

def test_every_metric_definition_is_in_the_metrics_reference():
    text = read("docs", "logs-and-metrics.md")
    missing = [d["Name"] for d in METRIC_DEFINITIONS if "`%s`" % d["Name"] not in text]
    assert not missing, "docs/logs-and-metrics.md omits these metric definitions: %s" % missing


# --- links and size --------------------------------------------------------------------------

def heading_anchors(text):
    """GitHub's anchors for a page's headings: lower case, punctuation dropped, spaces as '-'."""
    anchors = set()
    for heading in re.findall(r"^#+ (.+)$", text, re.MULTILINE):
        anchors.add(re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-"))
    return anchors


def test_every_link_in_the_readme_and_docs_leads_to_a_repository_path():
    broken = []
    for page in markdown_pages():
        text = read(page)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            resolved = os.path.normpath(os.path.join(ROOT, os.path.dirname(page), path)) if path \
                else os.path.join(ROOT, page)
            if not os.path.exists(resolved) or not resolved.startswith(ROOT + os.sep):
                broken.append("%s: %s" % (page, target))
            elif anchor and resolved.endswith(".md"):
                with open(resolved, encoding="utf-8") as handle:
                    if anchor not in heading_anchors(handle.read()):
                        broken.append("%s: %s (no such heading)" % (page, target))
    assert not broken, "links that lead nowhere: %s" % broken


def test_readme_is_a_short_guide():
    text = read("README.md")
    lines = text.count("\n")
    assert lines <= README_MAX_LINES, "README.md has %d lines; keep it at most %d and move reference " \
                                      "material to docs/" % (lines, README_MAX_LINES)
    long_lines = ["%d (%d characters)" % (number, len(line))
                  for number, line in enumerate(text.splitlines(), 1) if len(line) > README_MAX_LINE_LENGTH]
    assert not long_lines, "README.md lines over %d characters: %s; rewrap them (a table row that cannot " \
                           "be short becomes a short row plus text, or moves to docs/)" % (
                               README_MAX_LINE_LENGTH, ", ".join(long_lines))


# --- the README's tables against the tree ----------------------------------------------------

def table_rows(text, header):
    """The body rows, as lists of cells, of the first table whose header row matches ``header``."""
    rows, in_table = [], False
    for line in text.splitlines():
        if not in_table and re.match(header, line):
            in_table = True
        elif in_table and line.startswith("|---"):
            continue
        elif in_table and line.startswith("|"):
            rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
        elif in_table:
            break
    return rows


def floors_table_modules(text):
    """The modules the README's floors table (``| floor | modules |``) names, dotted, each with how
    often. A row's first cell names its folder in backticks (`core/`, `data/formats/`); a first cell
    without one (foundations, top) is the package's own folder, an empty one the row above's. Every
    `name.py` (or `sub/name.py`) in backticks in its second cell is a module in that folder;
    `__init__.py` is the folder's package."""
    rows = table_rows(text, r"\|\s*floor\s*\|\s*modules\s*\|")
    assert rows, "README.md has no '| floor | modules |' table"
    named, folder = [], None
    for first, modules in (row[:2] for row in rows):
        if first:
            found = re.search(r"`([\w/]+)/`", first)
            folder = found.group(1).split("/") if found else []
        for path in re.findall(r"`([\w/]+)\.py`", modules):
            parts = ["detector_training"] + folder + path.split("/")
            named.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return named


def test_the_floors_table_is_read_by_folder_and_continuation_row():
    text = ("| floor | modules |\n|---|---|\n| 1. foundations | `errors.py` (errors), `DetectorFamily` |\n"
            "| 3. `data/formats/` | `__init__.py` (the registry), `voc.py` (VOC), |\n| | `custom.py` (VOC XML) |\n"
            "| 6. top | `main.py` |\n\n| floor | modules |\n|---|---|\n| 2. `core/` | `engine.py` |\n")
    assert floors_table_modules(text) == [
        "detector_training.errors", "detector_training.data.formats", "detector_training.data.formats.voc",
        "detector_training.data.formats.custom", "detector_training.main"]


def package_holds_code(module):
    """Whether a package's ``__init__.py`` defines something (a function or class: a registry, a
    helper) rather than only a docstring, imports and constants."""
    with open(source_path(module), encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    return any(isinstance(node, (ast.FunctionDef, ast.ClassDef)) for node in tree.body)


def test_the_floors_table_names_every_module_of_the_package():
    """Every module of ``container/detector_training`` (every .py file under it) is named in the
    README's floors table, in its folder's row, and the table names no module that does not exist.
    A package's ``__init__.py`` must be named when it defines a function or class (a registry, a
    helper: code worth naming); one holding only a docstring, imports and constants need not be."""
    assert os.path.samefile(PACKAGE_ROOT, PACKAGE)
    named = floors_table_modules(read("README.md"))
    modules = set(module_names())
    required = {m for m in modules if not source_path(m).endswith("__init__.py") or package_holds_code(m)}
    assert "detector_training.families" in required and "detector_training.core" not in required
    missing = sorted(required - set(named))
    unknown = sorted(set(named) - modules)
    twice = sorted({m for m in named if named.count(m) > 1})
    assert not missing, "the README's floors table omits these modules: %s" % missing
    assert not unknown, "the README's floors table names modules that do not exist: %s" % unknown
    assert not twice, "the README's floors table names these twice: %s" % twice


def console_scripts():
    """Every command the two pip projects install, and every executable in ``entrypoint/``."""
    names = set(os.listdir(os.path.join(ROOT, "entrypoint")))
    for project in ("container", "sagemaker_launch"):
        with open(os.path.join(ROOT, project, "pyproject.toml"), "rb") as handle:
            names.update(tomllib.load(handle)["project"]["scripts"])
    return names


def test_the_commands_table_names_every_command_and_nothing_else():
    rows = table_rows(read("README.md"), r"\|\s*command\s*\|\s*what it is\s*\|")
    assert rows, "README.md has no '| command | what it is |' table"
    listed = {name for row in rows for name in re.findall(r"`([^`]+)`", row[0])}
    commands = console_scripts()
    assert {"train", "serve", "detector-launch"} <= commands  # both projects and entrypoint/ are read
    missing = sorted(commands - listed)
    unknown = sorted(listed - commands)
    assert not missing, "the README's commands table omits: %s" % missing
    assert not unknown, "the README's commands table names commands nothing installs: %s" % unknown
