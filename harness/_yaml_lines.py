"""YAML loading that remembers line numbers, for errors that name the line.

User-supplied YAML (audit specs, trace taint rules) is parsed with PyYAML's
safe loader, but mappings and sequences come back as :class:`LineDict` and
:class:`LineList`: ordinary ``dict``/``list`` subclasses that also record the
1-based line of the node itself and of each key or item. Validation code can
then say ``rules.yaml:12: rules[2].when.gt: expected a number, got 'abc'``.

Duplicate mapping keys are an error (PyYAML silently keeps the last one,
which would hide a typo such as two ``polarity:`` lines).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

__all__ = ["LineDict", "LineList", "YamlInputError", "line_of", "load_yaml_with_lines"]


class YamlInputError(ValueError):
    """The file could not be read or parsed as YAML; the message names file and line."""


class LineDict(dict[Any, Any]):
    """A mapping that knows its own line and the line of each key."""

    line: int
    key_lines: dict[Any, int]

    def __init__(self, line: int) -> None:
        super().__init__()
        self.line = line
        self.key_lines = {}

    def line_for(self, key: object) -> int:
        return self.key_lines.get(key, self.line)


class LineList(list[Any]):
    """A sequence that knows its own line and the line of each item."""

    line: int
    item_lines: list[int]

    def __init__(self, line: int) -> None:
        super().__init__()
        self.line = line
        self.item_lines = []

    def line_for(self, index: int) -> int:
        if 0 <= index < len(self.item_lines):
            return self.item_lines[index]
        return self.line


def line_of(container: object, key: object, default: int = 1) -> int:
    """Line of ``key`` inside ``container`` if the container recorded it."""
    if isinstance(container, LineDict):
        return container.line_for(key)
    if isinstance(container, LineList) and isinstance(key, int):
        return container.line_for(key)
    return default


class _LineLoader(yaml.SafeLoader):
    """Safe loader whose containers carry line numbers."""


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> LineDict:
    loader.flatten_mapping(node)
    result = LineDict(node.start_mark.line + 1)
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            hash(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(
                None, None, "mapping keys must be scalars", key_node.start_mark
            ) from None
        if key in result:
            raise yaml.constructor.ConstructorError(
                None,
                None,
                f"duplicate key {key!r} (first on line {result.key_lines[key]})",
                key_node.start_mark,
            )
        result[key] = loader.construct_object(value_node, deep=True)
        result.key_lines[key] = key_node.start_mark.line + 1
    return result


def _construct_sequence(loader: yaml.SafeLoader, node: yaml.SequenceNode) -> LineList:
    result = LineList(node.start_mark.line + 1)
    for item_node in node.value:
        result.append(loader.construct_object(item_node, deep=True))
        result.item_lines.append(item_node.start_mark.line + 1)
    return result


_LineLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
    _construct_mapping,
)
_LineLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG,
    _construct_sequence,
)


def load_yaml_with_lines(path: Path) -> object:
    """Read and parse ``path``; raise :class:`YamlInputError` naming file and line."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise YamlInputError(f"{path}: file not found") from None
    except IsADirectoryError:
        raise YamlInputError(f"{path}: is a directory, expected a YAML file") from None
    except UnicodeDecodeError as exc:
        raise YamlInputError(f"{path}: not UTF-8 text ({exc.reason})") from None
    except OSError as exc:
        raise YamlInputError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        return yaml.load(text, Loader=_LineLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{path}:{mark.line + 1}" if mark is not None else f"{path}"
        problem = exc.problem or exc.context or "invalid YAML"
        raise YamlInputError(f"{where}: invalid YAML: {problem}") from None
    except yaml.YAMLError as exc:
        raise YamlInputError(f"{path}: invalid YAML: {exc}") from None
