"""registry.Registry: the one registry of the data formats and the detector families."""

import pytest

from detector_training import families
from detector_training.data import formats
from detector_training.registry import Registry


class Base:
    name = ""


class One(Base):
    name = "one"


class Two(Base):
    name = "two"


def test_classes_are_kept_in_registration_order_and_got_as_new_instances():
    registry = Registry(Base, "thing")
    assert registry.register(Two) is Two and registry.register(One) is One
    assert registry.names() == ("two", "one") and registry.classes() == (Two, One)
    first, second = registry.get("one"), registry.get("one")
    assert isinstance(first, One) and first is not second
    assert [type(i) for i in registry.instances()] == [Two, One]
    registry.register(One)  # the same class again: nothing changes
    assert registry.names() == ("two", "one")
    registry.unregister("two")
    assert registry.names() == ("one",)
    with pytest.raises(KeyError):
        registry.get("two")


def test_a_class_of_another_kind_an_unnamed_one_or_a_taken_name_is_refused():
    registry = Registry(Base, "thing")
    registry.register(One)

    class Unnamed(Base):
        pass

    class Other:
        name = "other"

    class Impostor(Base):
        name = "one"

    for cls in (Unnamed, Other):
        with pytest.raises(ValueError, match="is not a named Base subclass"):
            registry.register(cls)
    with pytest.raises(ValueError, match="a thing named one is registered already"):
        registry.register(Impostor)
    assert registry.classes() == (One,)


def test_the_check_sees_the_other_classes_and_may_refuse():
    seen = []

    def check(cls, others):
        seen.append((cls, list(others)))
        if cls is Two:
            raise ValueError("two is refused")

    registry = Registry(Base, "thing", check=check)
    registry.register(One)
    registry.register(One)
    with pytest.raises(ValueError, match="two is refused"):
        registry.register(Two)
    assert seen == [(One, []), (One, []), (Two, [One])]
    assert registry.names() == ("one",)


def test_formats_and_families_are_each_one_registry():
    assert isinstance(formats._REGISTRY, Registry) and isinstance(families._REGISTRY, Registry)
    assert formats.names() == formats._REGISTRY.names()
    assert families.network_names() == tuple(n for c in families._REGISTRY.classes() for n in c.networks)
