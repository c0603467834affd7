"""What a training job is: base model, harnesses, data, teacher and stages (`pipeline.py` runs it).

`PipelineConfig.from_dict(data)` validates everything up front (the Django side calls it before it
queues anything) and raises `ConfigError` whose `field` is the path of the bad value, e.g.
`stages[2].config.num_generations` or `harnesses[0].files`. With an sft stage and an `openai` teacher
it also asks the teacher's server for its model list (`teachers.probe_teacher`, a 5 s timeout): a server
that does not answer is `trajectories.teacher_config.base_url`. JSON shape (every key optional except
`harnesses` and `stages`):

    {
      "model": {"base": "smollm2-135m-instruct", "finetune": "full", "device": "cpu"},
      "harnesses": [{"label": "avatar@v3", "files": {"harness.yaml": "…", …}}],   # or {"label", "dir"}
      "data": {"simulator_seed": 1, "simulator_cases": 24, "cases_jsonl": [],
               "exclude": {"lsqa@v2": ["<case content hash>", …]},
               "validation": {"cases": 8, "prompts": 4, "seed": 0}},                # training/holdout.py
      "trajectories": {"teacher": "oracle", "augmented_variants": 1, …},        # trajectories.TrajectoryConfig
      "stages": [{"kind": "sft", "config": {…}}, {"kind": "opd", "config": {…}}, {"kind": "rl", "config": {…}}],
      "seed": 0
    }
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.spec import HarnessSpec, SpecInvalid, parse_files, read_dir
from training.opd_config import OpdConfig
from training.rl_config import RlConfig
from training.sft_config import SftConfig
from training.stage_config import StageConfig
from training.teachers import TeacherRefused, probe_teacher
from training.trajectories import TrajectoryConfig
from training.validation import ConfigError, build, knob, require, to_dict

STAGE_CONFIGS: dict[str, type[StageConfig]] = {"sft": SftConfig, "opd": OpdConfig, "rl": RlConfig}
FINETUNE = ("full", "lora")
DEVICES = ("cpu", "cuda", "auto")
PRECISIONS = ("fp32", "bf16", "auto")


@dataclass(frozen=True)
class ModelConfig:
    base: str = knob("smollm2-135m-instruct", "A base model name (training/base_models.py: smollm2-135m-instruct, "
                                              "tiny-random-smollm2) or a Hugging Face model directory.")
    finetune: str = knob("full", "full (every weight) or lora (peft adapters, merged into each stage's output).")
    lora_r: int = knob(16, "LoRA rank.")
    lora_alpha: int = knob(32, "LoRA alpha.")
    lora_dropout: float = knob(0.05, "LoRA dropout.")
    lora_target_modules: tuple[str, ...] = knob(("q_proj", "k_proj", "v_proj", "o_proj"), "Modules LoRA adapts.")
    device: str = knob("auto", "cpu (use_cpu), cuda, or auto (cuda when available).")
    precision: str = knob("auto", "fp32; bf16 (mixed precision: bf16 compute, fp32 master weights); or auto: bf16 "
                                  "on a GPU and on a CPU with bf16 instructions (AVX512-BF16 or AMX: about 1.6x the "
                                  "fp32 tokens/s for SmolLM2 with LoRA), else fp32 (an AVX2-only CPU emulates bf16, "
                                  "many times slower).")

    def check(self) -> None:
        require(self.base.strip() != "", "base", "must name a base model")
        require(self.finetune in FINETUNE, "finetune", "must be full or lora")
        require(1 <= self.lora_r <= 1024, "lora_r", "must be within 1..1024")
        require(1 <= self.lora_alpha <= 4096, "lora_alpha", "must be within 1..4096")
        require(0.0 <= self.lora_dropout < 1.0, "lora_dropout", "must be within [0, 1)")
        require(len(self.lora_target_modules) > 0, "lora_target_modules", "name at least one module")
        require(self.device in DEVICES, "device", "must be cpu, cuda or auto")
        require(self.precision in PRECISIONS, "precision", "must be fp32, bf16 or auto")


@dataclass(frozen=True)
class HarnessInput:
    label: str = knob("", "How the console names this version (e.g. avatar@v3), recorded with each checkpoint.")
    files: dict[str, str] = knob({}, "The version's canonical files (path → text).")
    dir: str = knob("", "Or a harness directory on disk.")

    def check(self) -> None:
        require(self.label.strip() != "", "label", "must be set")
        require(bool(self.files) != bool(self.dir), "files", "give exactly one of files or dir")

    def spec(self) -> HarnessSpec:
        return parse_files(self.files) if self.files else parse_files(read_dir(self.dir))


@dataclass(frozen=True)
class ValidationConfig:
    cases: int = knob(0, "Simulator cases held out to choose each stage's checkpoint and learning rate, drawn apart "
                         "from the training cases and the excluded eval sets (training/holdout.py). 0: none.")
    prompts: int = knob(0, "IFEval-style prompts held out from the generated pool (OPD distils on the rest), graded "
                           "by IFEval's official checkers. 0: none.")
    seed: int = knob(0, "Seed of the validation draw.")
    max_new_tokens: int = knob(48, "Greedy tokens per model call when a checkpoint answers a validation case or "
                                   "prompt (a CPU-time bound).")
    turn_deadline_s: float = knob(120.0, "Deadline of one validation turn.")

    @property
    def enabled(self) -> bool:
        return self.cases > 0 or self.prompts > 0

    def check(self) -> None:
        require(0 <= self.cases <= 10_000, "cases", "must be within 0..10000")
        require(0 <= self.prompts <= 1_000, "prompts", "must be within 0..1000")
        require(1 <= self.max_new_tokens <= 4096, "max_new_tokens", "must be within 1..4096")
        require(self.turn_deadline_s > 0, "turn_deadline_s", "must be positive")


@dataclass(frozen=True)
class DataConfig:
    simulator_seed: int = knob(0, "Seed of the simulator cases the teacher answers.")
    simulator_cases: int = knob(24, "Simulator cases for HSA-SFT (0: only imported cases).")
    simulator_rooms: int = knob(1, "Rooms those cases are spread over.")
    cases_jsonl: tuple[str, ...] = knob((), "Imported JSONL files of cases (Case.to_dict() per line).")
    exclude: dict[str, list[str]] = knob({}, "Eval-set label → content hashes of its cases "
                                             "(training.case_hashing.case_content_hash): the job refuses data that "
                                             "contains any of them.")
    validation: ValidationConfig = knob(ValidationConfig(), "The validation split that chooses checkpoints and "
                                                            "learning rates; the eval sets above are never read "
                                                            "for it.")

    def check(self) -> None:
        require(0 <= self.simulator_cases <= 1_000_000, "simulator_cases", "must be within 0..1000000")
        require(1 <= self.simulator_rooms <= 10_000, "simulator_rooms", "must be within 1..10000")
        for label, hashes in self.exclude.items():
            require(isinstance(hashes, list) and all(isinstance(h, str) and len(h) == 64 for h in hashes),
                    f"exclude.{label}", "must be a list of sha256 hex digests")


@dataclass(frozen=True)
class StageSpec:
    kind: str
    config: StageConfig

    @property
    def name(self) -> str:
        return self.kind


@dataclass(frozen=True)
class PipelineConfig:
    model: ModelConfig
    harnesses: tuple[HarnessInput, ...]
    data: DataConfig
    trajectories: TrajectoryConfig
    stages: tuple[StageSpec, ...]
    seed: int = 0

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, probe: bool = True) -> PipelineConfig:
        """Validate and build (module docstring). `probe=False` skips asking a model teacher's server, for a
        caller that knows the teacher is no longer needed (its SFT data is prepared)."""
        if not isinstance(data, Mapping):
            raise ConfigError("config", "expected an object")
        unknown = sorted(set(data) - {"model", "harnesses", "data", "trajectories", "stages", "seed"})
        if unknown:
            raise ConfigError(unknown[0], "unknown field; known fields: data, harnesses, model, seed, stages, "
                                          "trajectories")
        model = build(ModelConfig, data.get("model"), "model")
        raw_harnesses = data.get("harnesses")
        if not isinstance(raw_harnesses, list) or not raw_harnesses:
            raise ConfigError("harnesses", "give at least one harness version")
        harnesses = tuple(build(HarnessInput, h, f"harnesses[{i}]") for i, h in enumerate(raw_harnesses))
        for index, harness in enumerate(harnesses):
            try:
                harness.spec()
            except (SpecInvalid, OSError, ValueError) as error:
                raise ConfigError(f"harnesses[{index}].{'files' if harness.files else 'dir'}",
                                  f"not a valid harness: {error}") from None
        data_config = build(DataConfig, data.get("data"), "data")
        for index, path in enumerate(data_config.cases_jsonl):
            if not Path(path).is_file():
                raise ConfigError(f"data.cases_jsonl[{index}]", f"no such file: {path}")
        trajectories = build(TrajectoryConfig, data.get("trajectories"), "trajectories")
        raw_stages = data.get("stages")
        if not isinstance(raw_stages, list) or not raw_stages:
            raise ConfigError("stages", "give at least one stage (sft, opd, rl)")
        stages = []
        for index, stage in enumerate(raw_stages):
            where = f"stages[{index}]"
            if not isinstance(stage, Mapping):
                raise ConfigError(where, "expected an object with kind and config")
            extra = sorted(set(stage) - {"kind", "config"})
            if extra:
                raise ConfigError(f"{where}.{extra[0]}", "unknown field; known fields: config, kind")
            kind = stage.get("kind")
            if kind not in STAGE_CONFIGS:
                raise ConfigError(f"{where}.kind", f"must be one of {', '.join(STAGE_CONFIGS)}")
            stages.append(StageSpec(kind, build(STAGE_CONFIGS[kind], stage.get("config"), f"{where}.config")))
        for index, stage in enumerate(stages):
            if stage.config.learning_rate_candidates and not data_config.validation.enabled:
                raise ConfigError(f"stages[{index}].config.learning_rate_candidates",
                                  "needs a validation split to score them (data.validation.cases or prompts)")
        if data_config.simulator_cases == 0 and not data_config.cases_jsonl and any(s.kind == "sft" for s in stages):
            raise ConfigError("data.simulator_cases", "the sft stage needs cases: simulator cases or cases_jsonl")
        seed = data.get("seed", 0)
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ConfigError("seed", "expected an integer")
        if probe and any(s.kind == "sft" for s in stages):
            # Last: a teacher server that does not answer is refused now, not after the job was queued.
            try:
                probe_teacher(trajectories.teacher, trajectories.teacher_config)
            except TeacherRefused as error:
                raise ConfigError(f"trajectories.teacher_config.{error.option}", str(error)) from None
        return cls(model=model, harnesses=harnesses, data=data_config, trajectories=trajectories,
                   stages=tuple(stages), seed=seed)

    def to_dict(self, *, with_files: bool = True) -> dict[str, Any]:
        """JSON-ready; without files each harness is its label and content hash (what results store)."""
        harnesses = []
        for harness in self.harnesses:
            if with_files:
                harnesses.append(to_dict(harness))
            else:
                harnesses.append({"label": harness.label, "content_hash": harness.spec().content_hash})
        return {"model": to_dict(self.model), "harnesses": harnesses, "data": to_dict(self.data),
                "trajectories": to_dict(self.trajectories),
                "stages": [{"kind": s.kind, "config": to_dict(s.config)} for s in self.stages], "seed": self.seed}

    def fingerprint(self) -> str:
        """sha256 of the whole config: an artifacts directory belongs to exactly one job config."""
        text = json.dumps(self.to_dict(), sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(text.encode()).hexdigest()
