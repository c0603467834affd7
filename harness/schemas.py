"""API schemas for the harness registry (XIn / XOut pairs)."""

from datetime import datetime

from ninja import Schema
from pydantic import Field


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
    base_version: int | None = Field(description="The version your files are based on; the commit is refused if it is no longer the head.")
    message: str = Field(max_length=500)
    files: dict[str, str] = Field(description="The harness as a directory: relative path → file text (docs/harness-format.md).")


class CommitOut(Schema):
    created: bool
    version: VersionOut


class LabelMoveIn(Schema):
    version: int
    reason: str = Field(max_length=500)
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


class ErrorOut(Schema):
    detail: str
    errors: list[dict] = []
