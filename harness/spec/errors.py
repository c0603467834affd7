"""Errors that point at the file (and the place in it) an author must fix."""

from __future__ import annotations

from dataclasses import dataclass

_LOCATION_SEPARATOR = ": "


@dataclass(frozen=True)
class SpecError:
    """One problem in a harness.

    `path` is the file's path inside the harness directory, optionally
    followed by ": " and a location inside the file, for example
    ``tools/get_product_info.json: function.parameters.properties.link_id.type``.
    """

    path: str
    message: str

    @classmethod
    def at(cls, file: str, location: str, message: str) -> SpecError:
        """An error at `location` (a dotted path such as `settings.max_turns`) in `file`."""
        return cls(f"{file}{_LOCATION_SEPARATOR}{location}" if location else file, message)

    @property
    def file(self) -> str:
        return self.path.split(_LOCATION_SEPARATOR, 1)[0]

    @property
    def location(self) -> str:
        parts = self.path.split(_LOCATION_SEPARATOR, 1)
        return parts[1] if len(parts) == 2 else ""

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class SpecInvalid(Exception):
    """A harness with errors; `errors` holds every one of them, sorted by path."""

    def __init__(self, errors: list[SpecError] | tuple[SpecError, ...]) -> None:
        self.errors: tuple[SpecError, ...] = tuple(errors)
        count = len(self.errors)
        lines = "\n".join(f"  {error}" for error in self.errors)
        super().__init__(f"{count} error{'s' if count != 1 else ''} in harness:\n{lines}")
