"""API schemas for the harness registry (XIn / XOut pairs)."""

from datetime import datetime
from typing import Annotated

from ninja import Schema
from pydantic import ConfigDict, Field, StringConstraints

from workspaces.identifiers import IDENTIFIER_MAX, IDENTIFIER_PATTERN
from workspaces.schemas import NOT_BLANK, BodyIn, json_int

VERSION_MAX = 2**31 - 1  # version numbers are PositiveIntegerField
VersionNumber = json_int(ge=1, le=VERSION_MAX)
# Label names are identifiers: the one rule harness.services.label_move applies (workspaces/identifiers.py).
LABEL_PATTERN = IDENTIFIER_PATTERN
LABEL_MAX = IDENTIFIER_MAX

# The paths a harness directory holds (harness/spec/files.py reads them; docs/harness-format.md), with the
# names in them following the Agent Skills rule of harness/spec/validate.py's name_problem (tools may also use
# `_`). A name is also at most 64 characters, which a regular expression without look-ahead cannot say: the
# parser refuses a longer one with the commit's 422.
_NAME = r"[a-z0-9]+(?:-[a-z0-9]+)*"
_TOOL_NAME = r"[a-z0-9_]+(?:-[a-z0-9_]+)*"
HARNESS_PATH_PATTERN = (rf"^(?:harness\.yaml|skills/{_NAME}/SKILL\.md|tools/{_TOOL_NAME}\.json|hooks/{_NAME}\.yaml"
                        rf"|prompt/[0-9][0-9]-{_NAME}\.md)$")
HarnessPath = Annotated[str, StringConstraints(pattern=HARNESS_PATH_PATTERN)]


def _harness_files_schema(schema: dict) -> None:
    # pydantic says key patterns with patternProperties, which lets any other key through; propertyNames
    # says that every key must be a harness path.
    schema.pop("patternProperties", None)
    schema.update(propertyNames={"pattern": HARNESS_PATH_PATTERN}, additionalProperties={"type": "string"},
                  required=["harness.yaml"])


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


# The smallest valid harness: what a commit needs at least (docs/harness-format.md).
MINIMAL_HARNESS = {"harness.yaml": "format: harnessops/v1\ndescription: A shop assistant.\n"}


class CommitIn(BodyIn):
    model_config = ConfigDict(json_schema_extra={"examples": [
        {"base_version": 1, "message": "Describe the assistant", "files": MINIMAL_HARNESS}]})

    base_version: VersionNumber | None = Field(description="The version your files are based on; the commit is refused if it is no longer the head.")
    message: str = Field(min_length=1, max_length=500, pattern=NOT_BLANK)
    files: dict[HarnessPath, str] = Field(
        description="The harness as a directory: relative path → file text (docs/harness-format.md). Paths are "
                    "harness.yaml (required), skills/<name>/SKILL.md, tools/<name>.json, hooks/<name>.yaml and "
                    "prompt/NN-<name>.md, names of at most 64 characters; the harness parser judges the contents "
                    "(a 422 lists each file's errors).",
        json_schema_extra=_harness_files_schema)


class CommitOut(Schema):
    created: bool
    version: VersionOut


class LabelMoveIn(BodyIn):
    version: VersionNumber
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

