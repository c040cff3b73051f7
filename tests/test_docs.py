"""The reference pages against the code: what the docs name, the code accepts or reads, and the
reverse; every link in the README and docs/ leads somewhere; the README stays a short guide."""

import ast
import dataclasses
import os
import re

from detector_training import settings
from detector_training.job import builtin_algorithm, config
from detector_training.job.metrics import METRIC_DEFINITIONS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")
PACKAGE = os.path.join(ROOT, "container", "detector_training")
README_MAX_LINES = 350


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
    lines = read("README.md").count("\n")
    assert lines <= README_MAX_LINES, "README.md has %d lines; keep it at most %d and move reference " \
                                      "material to docs/" % (lines, README_MAX_LINES)
