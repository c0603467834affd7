"""General OPD: on-policy distillation from the pre-SFT base with TRL's DistillationTrainer.

The student (the model this stage receives, usually HSA-SFT's output) answers general-instruction
prompts (`data_prep._opd`); the teacher is the pipeline's base model before any fine-tuning; the loss
is the divergence between their next-token distributions on the student's own samples. With
`beta=1.0` (the default and the HAT recipe) that is the reverse KL(student || teacher): the student
is pulled back towards what the base would say wherever it strayed, which restores the general
instruction following that domain SFT erodes. Teacher and student share SmolLM2's vocabulary
(DistillationTrainer checks it).
"""

from __future__ import annotations

from datasets import Dataset

from training.base_models import load_model, load_tokenizer, lora_config, save_stage_model
from training.datasets import read_jsonl
from training.opd_config import OpdConfig
from training.stage_runtime import StageContext, summary_metrics, train_with_resume


def run_opd(config: OpdConfig, context: StageContext) -> dict[str, float]:
    from trl import DistillationConfig, DistillationTrainer

    input_dir = context.input_model_dir()
    teacher_dir = context.base_model_dir()
    tokenizer = load_tokenizer(input_dir)
    rows = read_jsonl(context.prepared.path)
    args = DistillationConfig(**context.trainer_arguments(config),
                              beta=config.beta, temperature=config.temperature,
                              max_completion_length=config.max_completion_length, use_vllm=False)
    teacher = load_model(teacher_dir, use_cpu=context.use_cpu)
    teacher.eval()
    reporter_callback, cancel_callback = context.callbacks()
    trainer = DistillationTrainer(model=load_model(input_dir, use_cpu=context.use_cpu), teacher_model=teacher,
                                  args=args, train_dataset=Dataset.from_list(rows), processing_class=tokenizer,
                                  peft_config=lora_config(context.model) if context.model.finetune == "lora" else None,
                                  callbacks=[reporter_callback, cancel_callback])
    context.reporter.line(f"opd: student {input_dir}, teacher {teacher_dir} (beta={config.beta})")
    train_with_resume(trainer, context, cancel_callback)
    save_stage_model(trainer, tokenizer, context)
    return {**summary_metrics(reporter_callback.history), "prompts": float(len(rows))}
