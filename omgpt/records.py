"""The one reader of the files the project writes and reads back: store records (``done.json``), model
cards (``card.json``), tuned constants (``configs/tuned/*.json``) and experiment configs (YAML).

These files are input like any option: a user can edit, truncate or swap them. Every problem -- missing,
unreadable, binary, not JSON / YAML, a missing key, a value of the wrong type, a model file whose
checksum is not the one recorded -- is one :class:`RecordError` line naming the file and the key (the
CLI prints it and exits with code 2), never a ``JSONDecodeError``, ``KeyError`` or ``StopIteration``
from deep inside a report.

A *schema* is a mapping ``key -> kind``: a type or a tuple of types (``(int, float)``), a nested schema
(a dict), :class:`Optional` for a key that may be absent, :class:`ListOf` for a list of one kind (of a given length),
:class:`MapOf` for a mapping of any keys to values of one kind, :class:`Nullable` for ``None`` or a
value of a kind, or :data:`ANY`. Keys a schema does not
name are allowed (newer writers may add fields).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omgpt.errors import OMGPTError


class RecordError(OMGPTError):
    """A file the project reads back does not hold what it should."""


@dataclass(frozen=True)
class Optional:
    kind: Any


@dataclass(frozen=True)
class ListOf:
    kind: Any
    nonempty: bool = False
    length: int | None = None  # exactly this many items (an interval: its two ends)


@dataclass(frozen=True)
class MapOf:
    """A mapping whose keys are data (policy names, constant names), every value of ``kind``."""

    kind: Any


@dataclass(frozen=True)
class Nullable:
    """``None`` or a value of ``kind`` (a confidence interval that one run does not have)."""

    kind: Any


ANY = object()
NUMBER = (int, float)


def read_text(path: str | Path, what: str = "file") -> str:
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise RecordError(f"{path}: no such {what}") from None
    except IsADirectoryError:
        raise RecordError(f"{path}: is a folder, not a {what}") from None
    except OSError as e:
        raise RecordError(f"{path}: cannot read the {what} ({e.strerror or e})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise RecordError(f"{path}: not a text {what} (binary content)") from None


def read_json(path: str | Path, schema: dict | None = None, what: str = "record") -> Any:
    """The JSON object in ``path``, checked against ``schema`` (if given)."""
    text = read_text(path, what)
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise RecordError(f"{path}: not valid JSON (line {e.lineno}: {e.msg}); the {what} is damaged") from None
    except RecursionError:  # "[[[[..." deeper than Python's stack: no file the project writes
        raise RecordError(f"{path}: not valid JSON (nested too deeply); the {what} is damaged") from None
    if schema is not None:
        check(value, schema, path)
    return value


def read_yaml(path: str | Path, schema: dict | None = None, what: str = "config") -> Any:
    """The YAML document in ``path``, checked against ``schema`` (if given)."""
    import yaml

    text = read_text(path, what)
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        problem = getattr(e, "problem", None) or type(e).__name__
        raise RecordError(f"{path}: not valid YAML{where}: {problem}") from None
    if schema is not None:
        check(value, schema, path)
    return value


def check(value: Any, schema: Any, path: str | Path, key: str = "") -> Any:
    """``value`` against ``schema``; returns ``value``. The error names ``path`` and the dotted key."""
    where = f"{path}: key {key!r}" if key else f"{path}"
    if schema is ANY:
        return value
    if isinstance(schema, Optional):
        return check(value, schema.kind, path, key)
    if isinstance(schema, Nullable):
        return value if value is None else check(value, schema.kind, path, key)
    if isinstance(schema, dict):
        if not isinstance(value, dict):
            raise RecordError(f"{where}: expected a mapping, got {_kind(value)}")
        for name, kind in schema.items():
            sub = f"{key}.{name}" if key else name
            if name not in value:
                if isinstance(kind, Optional):
                    continue
                raise RecordError(f"{path}: missing key {sub!r}")
            check(value[name], kind, path, sub)
        return value
    if isinstance(schema, MapOf):
        if not isinstance(value, dict):
            raise RecordError(f"{where}: expected a mapping, got {_kind(value)}")
        for name, item in value.items():
            check(item, schema.kind, path, f"{key}.{name}" if key else str(name))
        return value
    if isinstance(schema, ListOf):
        if not isinstance(value, list):
            raise RecordError(f"{where}: expected a list, got {_kind(value)}")
        if schema.nonempty and not value:
            raise RecordError(f"{where}: is empty")
        if schema.length is not None and len(value) != schema.length:
            raise RecordError(f"{where}: expected a list of {schema.length} items, got {_kind(value)}")
        for i, item in enumerate(value):
            check(item, schema.kind, path, f"{key}[{i}]")
        return value
    kinds = schema if isinstance(schema, tuple) else (schema,)
    if bool not in kinds and isinstance(value, bool) or not isinstance(value, kinds):
        raise RecordError(f"{where}: expected {' or '.join(k.__name__ for k in kinds)}, got {_kind(value)}")
    if isinstance(value, float) and not math.isfinite(value) and float in kinds:
        raise RecordError(f"{where}: expected a finite number, got {value}")
    return value


def check_finite(value: Any, path: str | Path, key: str = "") -> Any:
    """Every number anywhere in ``value`` finite: what the project writes holds ``null`` where a number is
    undefined (:func:`omgpt.files.write_json`), so a NaN or an infinity is an edit that would otherwise
    be reported as a number."""
    if isinstance(value, float) and not math.isfinite(value):
        raise RecordError(f"{path}: key {key!r}: expected a finite number, got {value}")
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for name, item in items:
        check_finite(item, path, f"{key}[{name}]" if isinstance(name, int) else f"{key}.{name}" if key else str(name))
    return value


def _kind(value: Any) -> str:
    shown = repr(value)
    return f"{type(value).__name__} {shown if len(shown) <= 40 else shown[:37] + '...'}"


def checksum(path: str | Path) -> str:
    """``sha256:<hex>`` of a file's bytes: cards and store records name the model file they describe."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return f"sha256:{digest.hexdigest()}"


def check_checksum(model: str | Path, recorded: str | None, record: str | Path) -> None:
    """The model file is the one ``record`` was written for: one line if it was swapped or changed."""
    if recorded is None:
        return
    try:
        actual = checksum(model)
    except OSError as e:
        raise RecordError(f"{record}: its model {model} cannot be read ({e.strerror or e})") from None
    if actual != recorded:
        raise RecordError(
            f"{model}: not the model {record} was written for (checksum {actual[:19]}..., recorded {recorded[:19]}...); "
            f"retrain or re-card it instead of replacing the file"
        )
