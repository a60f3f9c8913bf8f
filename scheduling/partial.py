"""Shapes derived from a model's fields: the all-optional copy an update body takes."""

from __future__ import annotations

from collections.abc import Mapping
from types import NoneType, UnionType
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import Field
from pydantic.fields import FieldInfo


def optional_fields(fields: Mapping[str, FieldInfo], *, bounds: bool) -> dict[str, Any]:
    """Each field as an update takes it, for ``create_model``: optional, None when left out;
    with its bounds, description and examples (``bounds``), or with its bare type only."""
    derived: dict[str, Any] = {}
    for name, field in fields.items():
        kept: list[Any] = list(field.metadata) if bounds else []
        if field.discriminator is not None:
            kept.append(Field(discriminator=field.discriminator))
        inner: Any = field.annotation
        if kept:
            inner = Annotated.__class_getitem__((inner, *kept))  # type: ignore[attr-defined]
        described = Field(default=None, description=field.description, examples=field.examples)
        derived[name] = (inner | None, described if bounds else Field(default=None))
    return derived


def admits_null(field: FieldInfo) -> bool:
    """Whether None is a value of the field (an update may then clear it)."""
    kind = field.annotation
    return kind is None or kind is NoneType or (
        get_origin(kind) in (Union, UnionType) and NoneType in get_args(kind))
