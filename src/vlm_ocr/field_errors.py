"""A job input's validation errors in a user's words, all of them: each names the field, what it
was given and what is accepted, read from the field's declaration (its type, bounds, choices and
examples), never pydantic's own sentences. A rule a validator states (`value_error`) keeps its
own message, which says what is accepted."""

from __future__ import annotations

import difflib
import json
import types
import typing
from typing import Any, Literal

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from .errors import InputError
from .urls import looks_like_url, redact

SHOWN_CHARS = 40  # of a text value quoted back
MAX_NAME_CHARS = 60  # of a field's name; no field of ours is longer


def field_problems(exc: ValidationError, model: type[BaseModel], root: str) -> list[InputError]:
    """One InputError per problem pydantic found, in the order of the fields."""
    problems = []
    for err in exc.errors():
        loc = err["loc"]
        field = root + "".join(f"[{p}]" if isinstance(p, int) else f".{_name(p)}" for p in loc)
        problems.append(InputError(field, said(err, model)))
    return problems


def _name(key: object) -> str:
    """A field's name as given, cut short: an unknown one may be a megabyte long."""
    name = str(key)
    return name if len(name) <= MAX_NAME_CHARS else name[:MAX_NAME_CHARS] + "…"


def said(err: Any, model: type[BaseModel]) -> str:
    kind, loc = err["type"], err["loc"]
    if kind == "value_error":
        return str(err["msg"]).removeprefix("Value error, ")
    if kind == "extra_forbidden":
        owner = _annotation_at(model, loc[:-1])
        fields = list(owner.model_fields) if _is_model(owner) else []
        hint = ""
        if (name := meant(_name(loc[-1]), fields)) is not None:
            _, _, source = str(loc[-1]).partition("_")
            shape = _SOURCE_SHAPE.get((name, source))
            hint = f" (give it as {shape})" if shape else f" (did you mean `{name}`?)"
        return f"unknown field{hint}; accepted fields: {', '.join(fields)}"
    annotation, info = _declared_at(model, loc)
    return f"got {given(err.get('input'))}; accepted: {accepted(annotation, info)}"


# `pdf_url`, `images_base64`, …: a document's source spelled as one field
_SOURCE_SHAPE = {
    (doc, source): (
        f'`{{"pdf": {{"{source}": …}}}}`'
        if doc == "pdf"
        else f'`{{"images": [{{"{source}": …}}]}}`'
    )
    for doc in ("pdf", "images")
    for source in ("url", "base64", "key")
}


def meant(name: str, fields: list[str]) -> str | None:
    """The field an unknown name most likely meant: one it begins with (`pdf_url`), or one
    spelled nearly the same (`imgaes`); None when none is near."""
    head = name.partition("_")[0]
    if head in fields and head != name:
        return head
    close = difflib.get_close_matches(name, fields, n=1, cutoff=0.6)
    return close[0] if close else None


def given(value: Any) -> str:
    """A value as JSON names it, short."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return f"the number {value}"
    if isinstance(value, str):
        if not value:
            return "empty text"
        if looks_like_url(value):  # shown as every URL is: its credentials and query may be secret
            return f"the URL {json.dumps(redact(value), ensure_ascii=False)}"
        if len(value) > SHOWN_CHARS:
            return f"text of {len(value):,} characters"
        return f"the text {json.dumps(value, ensure_ascii=False)}"
    if isinstance(value, list | tuple):
        n = len(value)
        return f"a list of {n} item{'' if n == 1 else 's'}" if n else "an empty list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def accepted(annotation: Any, info: FieldInfo | None = None) -> str:
    """What a field of this type and declaration takes, in words."""
    annotation = _without_none(annotation)
    rules = info.metadata if info is not None else []
    if annotation is bool:
        return "true or false"
    if typing.get_origin(annotation) is Literal:
        return " or ".join(json.dumps(v) for v in typing.get_args(annotation))
    if annotation is int:
        return "a whole number" + _range(rules)
    if annotation is str:
        length = _length(rules, "character")
        examples = " or ".join(json.dumps(e) for e in (info.examples or [])) if info else ""
        return "text" + length + (f" such as {examples}" if examples else "")
    if typing.get_origin(annotation) is list:
        (item,) = typing.get_args(annotation)
        return f"a list{_length(rules, 'item')}, each {accepted(item)}"
    if typing.get_origin(annotation) is dict or annotation is dict:
        return "a JSON object"
    if _is_model(annotation):
        return getattr(annotation, "ACCEPTED", None) or "an object with the fields " + ", ".join(
            annotation.model_fields
        )
    return "a JSON value"


def _range(rules: list[Any]) -> str:
    low = next((r.ge for r in rules if getattr(r, "ge", None) is not None), None)
    high = next((r.le for r in rules if getattr(r, "le", None) is not None), None)
    if low is not None and high is not None:
        return f" from {low:,} to {high:,}"
    if low is not None:
        return f" of at least {low:,}"
    return f" of at most {high:,}" if high is not None else ""


def _length(rules: list[Any], unit: str) -> str:
    low = next((r.min_length for r in rules if getattr(r, "min_length", None)), None)
    high = next((r.max_length for r in rules if getattr(r, "max_length", None)), None)
    if low is not None and high is not None:
        return f" of {low:,} to {high:,} {unit}s"
    if low is not None:
        return f" of at least {low:,} {unit}{'' if low == 1 else 's'}"
    return f" of at most {high:,} {unit}s" if high is not None else ""


def _declared_at(model: type[BaseModel], loc: tuple[Any, ...]) -> tuple[Any, FieldInfo | None]:
    """The type at `loc` and the field that declares it (None for a list's item)."""
    annotation: Any = model
    info: FieldInfo | None = None
    for part in loc:
        annotation = _without_none(annotation)
        if isinstance(part, int) and typing.get_origin(annotation) is list:
            annotation, info = typing.get_args(annotation)[0], None
        elif isinstance(part, str) and _is_model(annotation) and part in annotation.model_fields:
            info = annotation.model_fields[part]
            annotation = info.annotation
        else:
            return Any, None
    return annotation, info


def _annotation_at(model: type[BaseModel], loc: tuple[Any, ...]) -> Any:
    return _without_none(_declared_at(model, loc)[0])


def _without_none(annotation: Any) -> Any:
    """`X | None` as X."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        kept = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(kept) == 1:
            return kept[0]
    return annotation


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)
