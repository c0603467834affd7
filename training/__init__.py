"""Harness-Aware Training (HAT): HSA-SFT → General OPD → HSA-RL on TRL. Pure core: imports no Django.

Modules (each config dataclass beside the code it configures; docs/training.md tells the story):

- `pipeline.py`        `run_pipeline(config, artifacts_dir=, reporter=, should_stop=)`: chained, resumable,
                       cancellable stages (the Django side's entry); `pipeline_config.py` its config.
- `results.py`         `Reporter`, `StageResult`, `TrainingCancelled`, `StageFailed` (no torch: cheap to import).
- `data_prep.py`       each stage's data, prepared once per job, checked by the lineage guard (`lineage.py`).
- `trajectories.py`    teachers by name (`teachers.py`: `oracle`, any model backend) answer simulator cases
                       through the same runtime, under the original harness and HSA variants; judge
                       filter; retry policy.
- `chat_template.py`   SmolLM2's ChatML + Hermes tools with `{% generation %}` markers.
- `datasets.py`        TRL conversational rows with `tools` → ids with assistant-only labels, never truncated.
- `base_models.py`     base models by name (offline SmolLM2 GGUF, a tiny random SmolLM2), LoRA, outputs.
- `sft.py` / `sft_config.py`, `opd.py` / `opd_config.py`, `rl.py` / `rl_config.py` (+ `rollout.py`,
  `rewards.py`): the three stages; `stage_config.py` their shared knobs; `stage_runtime.py` the
  callbacks (reporting, cancel) and resume.
- `launch.py`          `accelerate launch` commands for one or several GPU nodes, DeepSpeed ZeRO configs
                       (`configs/`); `cli.py` what they start.
- `validation.py`      config dataclasses from JSON with errors naming the field (`ConfigError.field`).

The Django app (`training.models`, `services`, `tasks`, `api`, …) turns rows into a `PipelineConfig`
and calls `run_pipeline`; nothing here imports it.
"""
