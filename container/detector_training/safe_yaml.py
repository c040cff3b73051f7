"""The one YAML loader of untrusted files (config files, dataset YAMLs): PyYAML's safe loader
(plain values only, no tag builds an object) that also refuses aliases, so a small file cannot
expand into a huge one, and nesting deeper than ``max_depth``, since PyYAML composes and
constructs recursively and deep nesting would end in a RecursionError. A refusal is PyYAML's
own ComposerError with the line, which each reader turns into its error naming the file."""

import yaml


class SafeLoader(yaml.SafeLoader):
    max_depth = 32  # a subclass sets its own bound

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(None, None, "aliases (*%s) are not accepted; write "
                                              "the value out" % event.anchor, event.start_mark)
        self._depth = getattr(self, "_depth", 0) + 1
        try:
            if self._depth > self.max_depth:
                raise yaml.composer.ComposerError(None, None, "values are nested deeper than %d "
                                                  "levels" % self.max_depth,
                                                  self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1
