"""The one YAML loader of untrusted files: plain values load, aliases and deep nesting are
refused with the line, and a subclass sets its own depth bound."""

import pytest
import yaml

from detector_training.safe_yaml import SafeLoader


def load(text, loader=SafeLoader):
    return yaml.load(text, Loader=loader)  # noqa: S506 (the safe loader under test)


def test_plain_values_load():
    assert load("a: 1\nb: [x, y]\nc: {d: 0.5}\n") == {"a": 1, "b": ["x", "y"], "c": {"d": 0.5}}


def test_an_alias_is_refused_with_its_line():
    with pytest.raises(yaml.MarkedYAMLError) as err:
        load("a: &x [1, 2]\nb: *x\n")
    assert "aliases (*x) are not accepted" in err.value.problem
    assert err.value.problem_mark.line + 1 == 2


def test_nesting_past_the_bound_is_refused_and_a_subclass_sets_the_bound():
    class Shallow(SafeLoader):
        max_depth = 3

    assert load("a: {b: 1}\n", Shallow) == {"a": {"b": 1}}
    with pytest.raises(yaml.MarkedYAMLError, match="nested deeper than 3 levels"):
        load("a: {b: {c: 1}}\n", Shallow)
    deep = "[" * 2000 + "]" * 2000  # would be a RecursionError without the bound
    with pytest.raises(yaml.MarkedYAMLError, match="nested deeper than 32 levels"):
        load(deep)


def test_a_tag_that_builds_an_object_is_refused():
    with pytest.raises(yaml.constructor.ConstructorError):
        load("!!python/object/apply:os.getcwd []\n")
