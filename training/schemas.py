"""API schemas for training jobs and the checkpoint registry (XIn / XOut pairs)."""

from datetime import datetime

from ninja import Schema
from pydantic import Field


class SimulatorIn(Schema):
    seed: int = 0
    size: int = Field(ge=1, le=100_000)


class JobIn(Schema):
    name: str = Field(max_length=64, description="Letters, digits, - and _.")
    base_model: str = Field(default="", max_length=500, description="Overrides config.model.base: a model the "
                            "pipeline knows (smollm2-135m-instruct) or a Hugging Face model directory on the workers.")
    base_checkpoint: int | None = Field(default=None, description="Continue from a registered checkpoint instead.")
    config: dict = Field(description="The pipeline config without harnesses and data sources: model, trajectories "
                         "(teacher, HSA augmentation), stages [{kind: sft|opd|rl, config}], seed. A bad field is a "
                         "422 naming its path, e.g. stages[0].config.max_steps.")
    harness_versions: list[str] = Field(min_length=1, description="`name@vN`, `name@label` or `name`.")
    excluded_sets: list[str] = Field(default_factory=list, description="Eval sets (`name@vN`) never to train on.")
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
