"""A registry of named classes of one kind: the data formats (data/formats) and the detector
families (families) are each one ``Registry``, so a format or a family defined anywhere is
registered, listed and looked up the same way."""


class Registry:
    """Subclasses of ``base`` by their ``name``, in registration order. ``what`` names the kind
    in errors ("data format"); ``check(cls, registered)`` may refuse a class with a ValueError
    (the families: a network that another family builds)."""

    def __init__(self, base, what, check=None):
        self.base, self.what, self._check = base, what, check
        self._classes = {}

    def register(self, cls):
        """Register ``cls`` (also usable as a class decorator); returns it. ValueError when it is
        not a named subclass of the base, its name is another class's, or ``check`` refuses it."""
        if not (isinstance(cls, type) and issubclass(cls, self.base)) or not cls.name:
            raise ValueError("%r is not a named %s subclass" % (cls, self.base.__name__))
        if self._classes.get(cls.name, cls) is not cls:
            raise ValueError("a %s named %s is registered already" % (self.what, cls.name))
        if self._check is not None:
            self._check(cls, [c for c in self._classes.values() if c.name != cls.name])
        self._classes[cls.name] = cls
        return cls

    def unregister(self, name):
        """Remove a registered class (for tests that register one of their own)."""
        self._classes.pop(name, None)

    def names(self):
        return tuple(self._classes)

    def classes(self):
        return tuple(self._classes.values())

    def get(self, name):
        """An instance of the class named ``name``; KeyError for an unknown one."""
        return self._classes[name]()

    def instances(self):
        return [cls() for cls in self._classes.values()]
