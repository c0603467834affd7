"""HSA-SFT: TRL's SFTTrainer on the judge-filtered teacher trajectories (`data_prep._sft`).

The trajectories are tokenized by `datasets.tokenize_rows` under the `{% generation %}` template, so
only assistant tokens (tool calls, skill loads, replies, each with its `<|im_end|>`) carry labels, and
no trajectory is truncated (too long → an error or, with `overlong="drop"`, counted and reported).
SFTTrainer gets `input_ids` + `assistant_masks` and builds the labels from the mask.
"""

from __future__ import annotations

from datasets import Dataset

from training.base_models import load_model, load_tokenizer, lora_config, save_stage_model
from training.datasets import read_jsonl, tokenize_rows
from training.sft_config import SftConfig
from training.stage_runtime import StageContext, summary_metrics, train_with_resume


def run_sft(config: SftConfig, context: StageContext) -> dict[str, float]:
    from trl import SFTConfig as TrlSftConfig
    from trl import SFTTrainer

    input_dir = context.input_model_dir()
    tokenizer = load_tokenizer(input_dir)
    rows = read_jsonl(context.prepared.path)
    tokenized, lengths = tokenize_rows(rows, tokenizer, max_length=config.max_length, overlong=config.overlong)
    context.reporter.line(f"sft: {lengths.kept} trajectories, {lengths.tokens} tokens ({lengths.assistant_tokens} "
                          f"trained), longest {lengths.longest}, {lengths.dropped_overlong} over max_length dropped")
    args = TrlSftConfig(**context.trainer_arguments(config),
                        max_length=config.max_length, packing=False, assistant_only_loss=False,
                        completion_only_loss=False)
    reporter_callback, cancel_callback = context.callbacks()
    trainer = SFTTrainer(model=load_model(input_dir, use_cpu=context.use_cpu), args=args,
                         train_dataset=Dataset.from_list(tokenized), processing_class=tokenizer,
                         peft_config=lora_config(context.model) if context.model.finetune == "lora" else None,
                         callbacks=[reporter_callback, cancel_callback])
    train_with_resume(trainer, context, cancel_callback)
    save_stage_model(trainer, tokenizer, context)
    return {**summary_metrics(reporter_callback.history), "trajectories": float(lengths.kept),
            "dropped_overlong": float(lengths.dropped_overlong), "longest_tokens": float(lengths.longest),
            "assistant_tokens": float(lengths.assistant_tokens)}
