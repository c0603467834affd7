"""Harness-Aware Training (HAT): HSA-SFT → General OPD → HSA-RL on TRL. Pure core: imports no Django.

Modules (each config dataclass beside the code it configures):

- `trajectories.py`  teachers by name (`oracle`, any model backend) run simulator cases through the
                     same runtime, under the original harness and HSA variants; judge filter; retry policy.
- `lineage.py`       content hashes of cases, the eval-set guard, what a stage trained on.
- `chat_template.py` the ChatML + Hermes-tools template with `{% generation %}` markers.
- `base_models.py`   base models by name (offline SmolLM2 GGUF, a tiny random SmolLM2), LoRA, saving.
- `datasets.py`      TRL conversational rows with `tools`; length checks (never a silent truncation).
- `sft.py` / `sft_config.py`, `opd.py` / `opd_config.py`, `rl.py` / `rl_config.py`: the three stages.
- `rewards.py`       HSA-RL reward functions by name.
- `pipeline.py`      `run_pipeline(...)`: the chained, resumable, cancellable stages (the Django side's entry).
- `launch.py`        `accelerate launch` commands for one or several GPU nodes, DeepSpeed ZeRO configs.

The Django app (`training.models`, `services`, `tasks`, `api`, …) turns rows into a `PipelineConfig`
and calls `run_pipeline`; nothing here imports it.
"""
