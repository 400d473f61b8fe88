"""Base classes for config models: strict (unknown keys are errors), frozen, a docstring per field."""

from __future__ import annotations

import os
import re

import types
import typing
from pathlib import Path
from typing import Any, ClassVar

import yaml
from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler, ValidationInfo, field_validator, model_serializer

from tokenmill.errors import ConfigError


class _UniqueKeyLoader(yaml.SafeLoader):
    """yaml.SafeLoader (no tags beyond YAML's own), refusing a key written twice in one mapping.

    PyYAML keeps the last of two equal keys without a word, so `seed: 1` ... `seed: 2` would run with seed 2 and
    a second `stages:` block would replace the first whole. A key that a merge (`<<: *defaults`) brings in may be
    overridden: that is what merges are for.
    """

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.setdefault(key, key_node)
            except TypeError:
                continue  # an unhashable key: SafeLoader reports it
            if first is not key_node:
                raise yaml.constructor.ConstructorError(
                    None, None,
                    f"key {key!r} appears twice in one mapping (first on line {first.start_mark.line + 1}); "
                    f"YAML would keep only the last: remove one", key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


def load_yaml(text: str, where: str) -> Any:
    """Parse a config file's text: `yaml.safe_load`, with keys written twice refused. Raises ConfigError naming
    `where` (the file) and the line."""
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as err:
        raise ConfigError(f"config {where} is not valid YAML: {err}") from None


def key_path(loc: tuple[Any, ...]) -> str:
    """A pydantic error's location as the key a person writes in the file: `stages.dedup.threshold`,
    `sources[0].paths`; `(top level)` for the file as a whole."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _takes_number_not_bool(annotation: Any) -> bool:
    """True for `int`, `float`, and unions or constrained forms of them that do not also take `bool`."""
    args: set[Any] = set()
    stack = [annotation]
    while stack:
        ann = stack.pop()
        origin = typing.get_origin(ann)
        if origin is typing.Annotated:
            stack.append(typing.get_args(ann)[0])
        elif origin in (typing.Union, types.UnionType):
            stack.extend(typing.get_args(ann))
        else:
            args.add(ann)
    return bool(args & {int, float}) and bool not in args and Any not in args


class StrictModel(BaseModel):
    """A config block: unknown keys are errors, values are immutable once validated.

    A YAML `true` or `false` given for a number is an error too: pydantic would take it as 1 or 0 (`seed: true`
    would be seed 1, `workers: true` one worker).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    later_fields: ClassVar[tuple[str, ...]] = ()
    """Fields that joined the block after runs were made with it: left out of the dump while at their default, so
    that the identity of a config written before them (a stage's resume key, the golden manifests) does not move."""

    @model_serializer(mode="wrap")
    def _later_fields_out_at_default(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out = handler(self)
        for name in self.later_fields:
            if name in out and getattr(self, name) == type(self).model_fields[name].default:
                del out[name]
        return out

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_number(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, bool) and info.field_name is not None:
            field = cls.model_fields.get(info.field_name)
            if field is not None and _takes_number_not_bool(field.annotation):
                raise ValueError(f"{str(value).lower()} is a boolean, not a number (it would be taken as "
                                 f"{int(value)}); write the number you mean")
        return value


class StageConfig(StrictModel):
    """Options every stage has; a stage's own config model extends this."""

    keep_dropped: bool = True
    """Write dropped documents, with a `drop_reason` column, under `<output>/<stage>/dropped/`."""


_VARIABLE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


def expand_path(value: str) -> str:
    """`~` or `~user` at the start, then `$NAME` and `${NAME}` anywhere, expanded as a shell would.

    Raises ValueError for a variable that is not set or is empty (`$UNSET/run` must not become a folder named
    `$UNSET`, nor `/run`), and for a `~user` with no home folder.
    """
    out = value
    if out.startswith("~"):
        head, sep, tail = out.partition("/")
        home = os.path.expanduser(head)
        if home == head:
            raise ValueError(f"{value!r}: {head!r} is no user's home folder; write the folder out")
        out = home + sep + tail
        start = len(home + sep)
    else:
        start = 0

    def variable(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        found = os.environ.get(name)
        if found is None:
            raise ValueError(f"{value!r} names the environment variable ${name}, which is not set; set it, or write "
                             f"the path out")
        if not found:
            raise ValueError(f"{value!r} names the environment variable ${name}, which is empty; set it, or write "
                             f"the path out")
        return found

    return out[:start] + _VARIABLE.sub(variable, out[start:])


def resolve(path: str, base_dir: str | Path = ".") -> Path:
    """The one way a config path becomes a file: `~` and `$VAR` expanded, then made absolute against `base_dir`
    (the config file's folder). Raises ValueError for an unset variable or an unknown `~user`."""
    p = Path(expand_path(str(path)))
    return p if p.is_absolute() else Path(base_dir) / p
