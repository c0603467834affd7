"""The one rule for names that reach URLs and templates (CONVENTIONS #17).

Harness, eval set, experiment, arm, label, room, API key and workspace names are
identifiers: 1–64 characters of lowercase letters and digits, in words joined by
single hyphens or underscores (`lsqa-smoke`, `product_qa`, `v2`). Every entry point (console forms,
the API, CLI and file imports) checks them with `check_identifier`; model fields
carry `validate_identifier`, and API schemas use the `Identifier` type, so the
same rule and the same message apply everywhere.

Rows written before the rule existed may hold other names: `IdentifierConverter`
still reaches them by URL (escaped), so they can be opened, archived or deleted.
"""

import re
from typing import Annotated
from urllib.parse import unquote

from django.core.exceptions import ValidationError
from pydantic import StringConstraints

IDENTIFIER_MAX = 64
IDENTIFIER_PATTERN = r"^[a-z0-9]+(?:[-_][a-z0-9]+)*$"
_IDENTIFIER = re.compile(IDENTIFIER_PATTERN)
RULE = "lowercase letters and digits, in words joined by single hyphens or underscores"


class InvalidIdentifier(ValueError):
    """A name that breaks the identifier rule; `field` says which input it came from."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(message)


def identifier_problem(value, *, field: str = "name", max_length: int = IDENTIFIER_MAX) -> str:
    """Why `value` is not a valid identifier, or "" when it is."""
    if not isinstance(value, str) or not value:
        return f"{field} is required ({RULE})."
    if len(value) > max_length:
        return f"{field} is longer than {max_length} characters."
    if not _IDENTIFIER.match(value):
        return f"{field} “{value[:80]}” is not allowed: use {RULE}."
    return ""


def check_identifier(value, *, field: str = "name", max_length: int = IDENTIFIER_MAX) -> str:
    """Return `value` if it is a valid identifier; raise InvalidIdentifier naming `field` otherwise."""
    problem = identifier_problem(value, field=field, max_length=max_length)
    if problem:
        raise InvalidIdentifier(field, problem)
    return value


def validate_identifier(value) -> None:
    """Model-field validator (runs in full_clean, ModelForms and the admin)."""
    problem = identifier_problem(value)
    if problem:
        raise ValidationError(problem, code="invalid_identifier")


# For ninja/pydantic schemas: a bad value is a 422 naming the field.
Identifier = Annotated[str, StringConstraints(min_length=1, max_length=IDENTIFIER_MAX, pattern=IDENTIFIER_PATTERN)]


class IdentifierConverter:
    """URL converter for identifiers: valid names look as usual, and rows stored before the rule existed
    (spaces, markup, non-ASCII, even '/') still reverse and resolve instead of raising NoReverseMatch (a 500)."""

    regex = "[^/]+"

    def to_python(self, value: str) -> str:
        return unquote(value)

    def to_url(self, value) -> str:
        # '%' first, so that to_python's unquote gives back exactly the stored name.
        return str(value).replace("%", "%25").replace("/", "%2F")
