"""API schemas for the harness registry (XIn / XOut pairs)."""

from datetime import datetime

from ninja import Schema
from pydantic import Field

from workspaces.identifiers import IDENTIFIER_MAX, IDENTIFIER_PATTERN

VERSION_MAX = 2**31 - 1  # version numbers are PositiveIntegerField
NOT_BLANK = r"\S"  # some non-space character (services strip and refuse blank text)
# Label names are identifiers: the one rule harness.services.label_move applies (workspaces/identifiers.py).
LABEL_PATTERN = IDENTIFIER_PATTERN
LABEL_MAX = IDENTIFIER_MAX


class LabelOut(Schema):
    name: str
    version: int
    protected: bool


class HarnessOut(Schema):
    name: str
    description: str
    head: int | None
    labels: list[LabelOut]


class VersionOut(Schema):
    harness: str
    number: int
    content_hash: str
    parent: int | None
    author: str
    message: str
    created_at: datetime
    labels: list[str]


class VersionDetailOut(VersionOut):
    spec: dict
    files: dict[str, str]


class CommitIn(Schema):
    base_version: int | None = Field(ge=1, le=VERSION_MAX, description="The version your files are based on; the commit is refused if it is no longer the head.")
    message: str = Field(min_length=1, max_length=500, pattern=NOT_BLANK)
    files: dict[str, str] = Field(description="The harness as a directory: relative path → file text (docs/harness-format.md).")


class CommitOut(Schema):
    created: bool
    version: VersionOut


class LabelMoveIn(Schema):
    version: int = Field(ge=1, le=VERSION_MAX)
    reason: str = Field(min_length=1, max_length=500, pattern=NOT_BLANK)
    override: bool = Field(default=False, description="Promote even if the regression gate failed (audited).")


class LabelMoveOut(Schema):
    label: str
    from_version: int | None
    to_version: int
    actor: str
    reason: str
    at: datetime


class ModuleChangeOut(Schema):
    module: str
    name: str
    status: str
    path: str
    unified: str


class DiffOut(Schema):
    harness: str
    from_version: int
    to_version: int
    changes: list[ModuleChangeOut]

