"""Numbers from forms and query strings, with messages an operator can act on.

`int("abc")` says "invalid literal for int() with base 10: 'abc'", and `int(x or 0)` quietly turns a typo
into 0; both reach pages. These helpers name the field and what it accepts, and leave blanks to the
caller's default only when the field was really left blank.
"""

import math
from collections.abc import Mapping


class FormValueError(ValueError):
    """A form or filter value that is not what its field accepts; str() is the message for the page."""


def whole_number(data: Mapping[str, str], name: str, *, label: str, default: int | None = None,
                 minimum: int | None = None, maximum: int | None = None) -> int | None:
    """`data[name]` as an int; blank gives `default`. Raises FormValueError naming `label`."""
    text = str(data.get(name) or "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise FormValueError(f"{label}: “{text}” is not a whole number.") from None
    _check_range(label, value, minimum, maximum)
    return value


def decimal_number(data: Mapping[str, str], name: str, *, label: str, default: float | None = None,
                   minimum: float | None = None, maximum: float | None = None) -> float | None:
    """`data[name]` as a finite float; blank gives `default`. Raises FormValueError naming `label`."""
    text = str(data.get(name) or "").strip()
    if not text:
        return default
    return to_decimal(text, label=label, minimum=minimum, maximum=maximum)


def to_decimal(text: str, *, label: str, minimum: float | None = None, maximum: float | None = None) -> float:
    """`text` as a finite float within the bounds, or FormValueError naming `label`."""
    try:
        value = float(text)
    except ValueError:
        raise FormValueError(f"{label}: “{text}” is not a number.") from None
    if not math.isfinite(value):
        raise FormValueError(f"{label}: “{text}” is not a finite number.")
    _check_range(label, value, minimum, maximum)
    return value


def _check_range(label: str, value: float, minimum: float | None, maximum: float | None) -> None:
    if minimum is not None and value < minimum:
        raise FormValueError(f"{label}: {value:g} is below the minimum of {minimum:g}.")
    if maximum is not None and value > maximum:
        raise FormValueError(f"{label}: {value:g} is above the maximum of {maximum:g}.")
