"""No branch on a data format's name outside the formats' modules: what differs between formats is
said by the format (data/formats/), and the rest of the package asks it."""

import ast
import os

from test_layout import ROOT, module_names, source_path

FORMATS_PACKAGE = os.path.join(ROOT, "data", "formats")


def names_the_dataset(node):
    """``config.dataset``, ``dataset``, ``x.get("dataset")`` or ``x["dataset"]``."""
    if isinstance(node, ast.Attribute) and node.attr == "dataset":
        return True
    if isinstance(node, ast.Name) and node.id == "dataset":
        return True
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
            and node.func.attr == "get" and node.args and isinstance(node.args[0], ast.Constant) \
            and node.args[0].value == "dataset":
        return True
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) \
            and node.slice.value == "dataset":
        return True
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return names_the_dataset(node.func.value)  # str(...).strip('"') and the like
    if isinstance(node, ast.Call) and node.args:
        return any(names_the_dataset(a) for a in node.args)
    return False


def is_literal_text(node):
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return True
    return isinstance(node, (ast.Tuple, ast.List, ast.Set)) and node.elts and all(
        isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts)


def literal_comparisons(path, names_it):
    """(line, source) of each comparison in the file at ``path`` of a text literal with an
    expression ``names_it`` picks out."""
    source = open(path).read()
    found = []
    for node in ast.walk(ast.parse(source, path)):
        if isinstance(node, ast.Compare):
            sides = [node.left] + list(node.comparators)
            if any(names_it(s) for s in sides) and any(is_literal_text(s) for s in sides):
                found.append((node.lineno, ast.get_source_segment(source, node)))
    return found


def dataset_branches(path):
    """(line, source) of each comparison of the dataset's name with a text literal."""
    return literal_comparisons(path, names_the_dataset)


def test_no_module_outside_the_formats_branches_on_a_dataset_name():
    problems = []
    for module in module_names():
        path = source_path(module)
        if path.startswith(FORMATS_PACKAGE + os.sep):
            continue
        problems += ["%s:%d: %s" % (os.path.relpath(path, ROOT), line, text)
                     for line, text in dataset_branches(path)]
    assert not problems, "branches on a dataset name outside data/formats/:\n" + "\n".join(problems)


def test_the_scan_finds_each_spelling_of_such_a_branch(tmp_path):
    path = tmp_path / "m.py"
    path.write_text('if config.dataset == "coco":\n    pass\n'
                    'x = dataset in ("voc", "custom")\n'
                    'y = str(hyperparameters.get("dataset", "")).strip(\'"\') == "coco"\n'
                    'z = values["dataset"] != "manifest"\n'
                    'fine = datasets.metric == "coco"\n')
    assert [line for line, _ in dataset_branches(str(path))] == [1, 3, 4, 5]


def metric_branches(path):
    """(line, source) of each comparison of a ``.metric`` with a text literal: what differs between
    the metrics is an attribute of core/evaluation.py's Metric objects, asked, never a name."""
    return literal_comparisons(path, lambda node: isinstance(node, ast.Attribute) and node.attr == "metric")


def test_no_module_compares_a_metric_with_a_name():
    problems = []
    for module in module_names():
        path = source_path(module)
        problems += ["%s:%d: %s" % (os.path.relpath(path, ROOT), line, text)
                     for line, text in metric_branches(path)]
    assert not problems, "metrics compared by name:\n" + "\n".join(problems)


def test_the_metric_scan_finds_such_a_comparison(tmp_path):
    path = tmp_path / "m.py"
    path.write_text('a = datasets.metric == "coco"\nb = fmt.metric != "voc07"\nc = datasets.metric.report_ious\n')
    assert [line for line, _ in metric_branches(str(path))] == [1, 2]
