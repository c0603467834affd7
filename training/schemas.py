"""API schemas for training jobs and the checkpoint registry (XIn / XOut pairs)."""

from datetime import datetime
from typing import Annotated

from ninja import Schema
from pydantic import Field, StringConstraints

from workspaces.identifiers import IDENTIFIER_PATTERN
from workspaces.schemas import BodyIn, json_int

_NAME = IDENTIFIER_PATTERN.strip("^$")
# `avatar@v3`, `avatar@production` (a label), `avatar@1a2b3c4d` (a content-hash prefix) or `avatar` (its
# production label): what training.services.resolve_harness_versions reads.
HarnessVersionRef = Annotated[str, StringConstraints(pattern=rf"^{_NAME}(?:@[A-Za-z0-9_-]{{1,64}})?$")]
EvalSetVersionRef = Annotated[str, StringConstraints(pattern=rf"^{_NAME}@v[0-9]{{1,9}}$")]
# The stage kinds of training.pipeline_config.STAGE_CONFIGS (not imported here: that loads every trainer's
# config; tests/console/test_api_contract.py checks they agree).
STAGE_KINDS = ("sft", "opd", "rl")
CONFIG_SCHEMA = {
    "type": "object", "additionalProperties": False, "required": ["stages"],
    "properties": {
        "model": {"type": "object", "description": "base, finetune (full|lora), lora_*, device, precision."},
        "trajectories": {"type": "object", "description": "The teacher and HSA augmentation "
                                                          "(training.trajectories.TrajectoryConfig)."},
        "data": {"type": "object", "description": "simulator_rooms (the cases themselves come from `simulator`, "
                                                  "`imported_jsonl` and `excluded_sets`)."},
        "stages": {"type": "array", "minItems": 1, "items": {
            "type": "object", "additionalProperties": False, "required": ["kind"],
            "properties": {"kind": {"enum": list(STAGE_KINDS)}, "config": {"type": "object"}}}},
        "seed": {"type": "integer"},
    },
}


class SimulatorIn(BodyIn):
    seed: json_int() = 0
    size: json_int(ge=1, le=100_000)


class JobIn(BodyIn):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[-a-zA-Z0-9_]+$", description="Letters, digits, - and _.")
    base_model: str = Field(default="", max_length=500, description="Overrides config.model.base: a model the "
                            "pipeline knows (smollm2-135m-instruct) or a Hugging Face model directory on the workers.")
    base_checkpoint: json_int(ge=1, le=2**63 - 1) | None = Field(default=None,
                                        description="Continue from a registered checkpoint instead.")
    config: dict = Field(json_schema_extra=CONFIG_SCHEMA, description=(
        "The pipeline config without harnesses and data sources: model, trajectories (teacher, HSA augmentation), "
        "stages [{kind: sft|opd|rl, config}], seed. The pipeline's config class judges each knob, its range and "
        "the rules between them (an sft stage needs simulator or imported cases): a bad field is a 422 naming "
        "its path, e.g. stages[0].config.max_steps."))
    harness_versions: list[HarnessVersionRef] = Field(
        min_length=1, description="`name@vN`, `name@label` or `name` (its production label), of this workspace "
                                  "(a 422 on harness_versions names one that is not here).")
    excluded_sets: list[EvalSetVersionRef] = Field(default_factory=list,
                                                   description="Eval sets (`name@vN`) never to train on.")
    simulator: SimulatorIn | None = None
    imported_jsonl: str = Field(default="", description="Imported simulator cases as JSONL (Case.to_dict() per line).")


class JobOut(Schema):
    id: int
    name: str
    status: str
    cancel_requested: bool
    base_model: str
    stages: list[str]
    stage: str
    step: int
    total_steps: int
    fraction: float
    tokens_per_s: float | None
    eta_s: float | None
    harness_versions: list[str]
    excluded_sets: list[str]
    data_sources: dict
    error: str
    created_by: str
    created_at: datetime
    checkpoints: list[int]


class CheckpointOut(Schema):
    id: int
    backend: str = Field(description="Name it as a model backend (reply API, eval runs, playground).")
    job: int | None
    parent: int | None
    stage: str
    base_model: str
    path: str
    metrics: dict
    data_lineage: dict
    harness_hashes: list[str]
    promoted: bool
    created_at: datetime
