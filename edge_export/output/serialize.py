"""One serializer from result objects (frozen dataclasses) to JSON values.

Every result type declares its JSON shape once, beside its fields, instead of a hand-written
``to_dict``:

- a dataclass becomes an object whose keys are its fields, in declaration order;
- ``JSON_KEYS`` (a class attribute) lists the keys and their order when the JSON also carries
  derived values: properties, or methods without arguments (``summary``, ``worst``);
- ``json_field(...)`` declares per-field options: ``name`` (the JSON key, when it differs from the
  field's, e.g. ``class``), ``skip`` (not in the JSON: a torch module, raw bytes), ``omit_none``
  (the key is absent rather than null: keys only some runs have), ``flatten`` (the nested object's
  keys appear in this one) and ``digits`` (rounded, e.g. seconds);
- a class may define ``json_view()`` returning another typed value to serialize in its place (the
  quantization parameters of a tensor: per-tensor or per-channel);
- enums become their values, tuples lists, mapping keys strings; JSON has no NaN or infinity, so a
  non-finite float becomes null (metrics already cap infinities; this is the last guard).

``json_keys(cls)`` gives the layout of a class, which the schema test walks.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Mapping
from typing import Any, NamedTuple

__all__ = ["json_field", "to_json_value", "json_keys", "JsonKey"]

_META = "edge_export_json"


def json_field(
    *,
    name: str | None = None,
    skip: bool = False,
    omit_none: bool = False,
    flatten: bool = False,
    digits: int | None = None,
    **field_args: Any,
) -> Any:
    """A dataclass field with its JSON options (``field_args`` go to ``dataclasses.field``)."""
    options = {"name": name, "skip": skip, "omit_none": omit_none, "flatten": flatten, "digits": digits}
    metadata = {**field_args.pop("metadata", {}), _META: options}
    return dataclasses.field(metadata=metadata, **field_args)


class JsonKey(NamedTuple):
    """One key of a class's JSON object: the attribute it reads and how."""

    key: str  # the JSON name
    attribute: str
    omit_none: bool = False
    flatten: bool = False
    digits: int | None = None


_LAYOUTS: dict[type, tuple[JsonKey, ...]] = {}


def json_keys(cls: type) -> tuple[JsonKey, ...]:
    """The JSON layout of a dataclass type (cached: a class's layout never changes)."""
    layout = _LAYOUTS.get(cls)
    if layout is None:
        layout = _LAYOUTS[cls] = _layout(cls)
    return layout


def _layout(cls: type) -> tuple[JsonKey, ...]:
    fields = {f.name: f for f in dataclasses.fields(cls)}
    order = getattr(cls, "JSON_KEYS", None)
    if order is None:
        order = tuple(fields)
    keys = []
    for attribute in order:
        f = fields.get(attribute)
        if f is None:
            if not hasattr(cls, attribute):
                raise TypeError(f"{cls.__name__}.JSON_KEYS names {attribute!r}, which it does not have")
            keys.append(JsonKey(attribute, attribute))
            continue
        options = f.metadata.get(_META, {})
        if options.get("skip"):
            continue
        keys.append(
            JsonKey(options.get("name") or attribute, attribute, bool(options.get("omit_none")), bool(options.get("flatten")), options.get("digits"))
        )
    return tuple(keys)


def to_json_value(value: Any) -> Any:
    """``value`` as JSON data: dicts, lists, strings, finite numbers, booleans and None."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, (int, str)):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        view = getattr(value, "json_view", None)
        if view is not None:
            return to_json_value(view())
        return _object(value)
    if isinstance(value, Mapping):
        return {str(to_json_value(k)): to_json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json_value(v) for v in value]
    if hasattr(value, "item") and hasattr(value, "dtype"):  # a numpy scalar
        return to_json_value(value.item())
    raise TypeError(f"{type(value).__name__} has no JSON form")


def _object(obj: Any) -> dict:
    out: dict = {}
    for key in json_keys(type(obj)):
        value = getattr(obj, key.attribute)
        if callable(value) and not dataclasses.is_dataclass(value):
            value = value()  # a derived value given by a method (e.g. ``worst()``)
        if value is None and key.omit_none:
            continue
        if key.flatten:
            if value is not None:
                out.update(to_json_value(value))
            continue
        if key.digits is not None and value is not None:
            value = round(value, key.digits)
        out[key.key] = to_json_value(value)
    return out
