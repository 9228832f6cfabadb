"""YAML (and JSON) documents a user hands in (rule files, hardware profiles), read with bounds."""
from __future__ import annotations

from typing import Type

import yaml

from mrvl_convert.errors import MrvlConvertError, RuleFileError

MAX_DEPTH = 32          # nesting of one document
MAX_NODES = 100_000     # nodes once every alias is expanded


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that refuses deep nesting while composing (the composer recurses)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.depth = 0

    def compose_node(self, parent, index):  # noqa: ANN001 - PyYAML's signature
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise _TooLarge(f"nests deeper than {MAX_DEPTH} levels")
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


class _TooLarge(Exception):
    """A bound of a rule file exceeded; becomes a RuleFileError naming the file."""


def parse_bounded_yaml(text: str, label: str, *, what: str = "rule file",
                       error: Type[MrvlConvertError] = RuleFileError) -> object:
    """YAML (or JSON) text to Python data, refusing what would exhaust memory or the stack:
    nesting deeper than MAX_DEPTH and alias expansion beyond MAX_NODES nodes (a
    "billion laughs" file is a few hundred bytes that expand to gigabytes). Any other document
    a user hands in (``what``, refused with ``error``) is read the same way."""
    loader = None
    try:
        loader = _BoundedLoader(text)  # the reader checks the characters here already
        node = loader.get_single_node()
        if node is None:
            return None
        size = _expanded_size(node, {})
        if size > MAX_NODES:
            raise _TooLarge(f"expands (aliases included) to {size} nodes, more than "
                            f"{MAX_NODES}")
        return loader.construct_document(node)
    except _TooLarge as exc:
        raise error(f"{what} {label} is refused: it {exc}") from None
    except yaml.YAMLError as exc:
        raise error(f"{what} {label} is not valid YAML/JSON: "
                    f"{str(exc).splitlines()[0]}") from None
    except (ValueError, TypeError, RecursionError) as exc:  # e.g. a 5000-digit integer
        raise error(f"{what} {label} has a value that cannot be read: "
                    f"{str(exc).splitlines()[0][:200]}") from None
    finally:
        if loader is not None:
            loader.dispose()


def _expanded_size(node: yaml.Node, memo: dict) -> int:
    """Nodes the document has once every alias is expanded (memoised: linear in the file)."""
    if id(node) in memo:
        return memo[id(node)]
    memo[id(node)] = MAX_NODES + 1  # a node reached again while inside itself: recursive
    if isinstance(node, yaml.SequenceNode):
        size = 1 + sum(_expanded_size(child, memo) for child in node.value)
    elif isinstance(node, yaml.MappingNode):
        size = 1 + sum(_expanded_size(k, memo) + _expanded_size(v, memo) for k, v in node.value)
    else:
        size = 1
    memo[id(node)] = size
    return size
