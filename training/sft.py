"""HSA-SFT: TRL's SFTTrainer on the judge-filtered teacher trajectories (`data_prep._sft`).

The trajectories are tokenized by `datasets.tokenize_rows` under the `{% generation %}` template, so
only assistant tokens (tool calls, skill loads, replies, each with its `<|im_end|>`) carry labels, and
no trajectory is truncated (too long → an error or, with `overlong="drop"`, counted and reported).
SFTTrainer gets `input_ids` + `assistant_masks` and builds the labels from the mask.

Two throughput knobs (`SftConfig`):
- `packing`: TRL's best-fit-decreasing packing into padding-free sequences of up to `max_length` tokens.
  Labels are built per row before packing and the collator restarts `position_ids` at every row, from which
  transformers builds a block-diagonal causal mask (no row attends to another; `tests/training/
  test_sft_packing.py` checks both). Off by default: on a CPU that mask is dense (SftConfig.packing says what it cost).
- `compact_lm_head`: on a CPU, TRL's fused LM head projects every position onto the vocabulary (its compact
  path needs Triton); `_score_labelled_positions_only` asks the model for the logits of the labelled
  positions alone (`logits_to_keep`), which is the same loss for a fraction of the work.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import torch
from datasets import Dataset

from training.base_models import load_model, load_tokenizer, lora_config, save_stage_model
from training.datasets import read_jsonl, tokenize_rows
from training.sft_config import SftConfig
from training.stage_runtime import StageContext, summary_metrics, train_with_resume


def run_sft(config: SftConfig, context: StageContext) -> dict[str, float]:
    input_dir = context.input_model_dir()
    tokenizer = load_tokenizer(input_dir)
    rows = read_jsonl(context.prepared.path)
    tokenized, lengths = tokenize_rows(rows, tokenizer, max_length=config.max_length, overlong=config.overlong)
    context.reporter.line(f"sft: {lengths.kept} trajectories, {lengths.tokens} tokens ({lengths.assistant_tokens} "
                          f"trained), longest {lengths.longest}, {lengths.dropped_overlong} over max_length dropped")
    reporter_callback, cancel_callback = context.callbacks()
    trainer = sft_trainer(config, model=load_model(input_dir, use_cpu=context.use_cpu), tokenizer=tokenizer,
                          rows=tokenized, trainer_arguments=context.trainer_arguments(config),
                          peft_config=lora_config(context.model) if context.model.finetune == "lora" else None,
                          callbacks=[reporter_callback, cancel_callback])
    if config.packing:
        context.reporter.line(f"sft: {lengths.kept} trajectories packed into {len(trainer.train_dataset)} "
                              f"sequences of up to {config.max_length} tokens")
    train_with_resume(trainer, context, cancel_callback)
    save_stage_model(trainer, tokenizer, context)
    return {**summary_metrics(reporter_callback.history), "trajectories": float(lengths.kept),
            "dropped_overlong": float(lengths.dropped_overlong), "longest_tokens": float(lengths.longest),
            "assistant_tokens": float(lengths.assistant_tokens)}


def sft_trainer(config: SftConfig, *, model: Any, tokenizer: Any, rows: list[dict[str, list[int]]],
                trainer_arguments: dict[str, Any], peft_config: Any = None, callbacks: Sequence[Any] = ()) -> Any:
    """TRL's SFTTrainer over tokenized rows (`datasets.tokenize_rows`) as this stage sets it up: labels from the
    assistant masks, packed or not (`config.packing`), the compact LM head on a CPU (`config.compact_lm_head`)."""
    from trl import SFTConfig as TrlSftConfig
    from trl import SFTTrainer

    # bfd packing implies padding-free in TRL; every row already fits max_length (tokenize_rows), so packing
    # never cuts one
    args = TrlSftConfig(**trainer_arguments, max_length=config.max_length, packing=config.packing,
                        packing_strategy="bfd", padding_free=config.packing, assistant_only_loss=False,
                        completion_only_loss=False)
    trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows), processing_class=tokenizer,
                         peft_config=peft_config, callbacks=list(callbacks))
    if config.compact_lm_head and trainer_arguments.get("use_cpu"):
        _score_labelled_positions_only(trainer.model)
    return trainer


def _score_labelled_positions_only(model: Any) -> bool:
    """Make the forward that SFTTrainer's loss calls (`fused_lm_head=True`) project only the labelled positions.

    TRL's fused LM head (`trl.trainer.utils.add_fused_lm_head`) keeps to the labelled positions only where it has
    Triton kernels; elsewhere it projects and soft-maxes every position, and a HAT trajectory's labels are ~5% of
    its tokens. This wraps the forward TRL patched: the backbone runs as before, the model's own LM head is asked
    for the labelled positions alone (`logits_to_keep`, a boolean mask), and the output is what TRL's head
    returns there (per-token log-probabilities, entropy and top-1 hits, zero elsewhere; the loss summed over the
    labels and divided by `num_items_in_batch` or their count), so SFTTrainer's loss and metrics are unchanged.
    Costs the labelled positions' logits in memory (labels × vocabulary). Returns False, changing nothing, for a
    model whose forward takes no `logits_to_keep`.
    """
    from peft import PeftModel
    from trl.trainer.utils import FusedCausalLMOutput

    target = model.get_base_model() if isinstance(model, PeftModel) else model
    if "logits_to_keep" not in inspect.signature(type(target).forward).parameters:
        return False
    fused_forward = target.forward

    def forward(*args: Any, fused_lm_head: bool = False, labels: torch.Tensor | None = None,
                shift_labels: torch.Tensor | None = None, num_items_in_batch: Any = None, **kwargs: Any) -> Any:
        if not fused_lm_head or labels is None or shift_labels is not None or kwargs.get("output_router_logits"):
            return fused_forward(*args, fused_lm_head=fused_lm_head, labels=labels, shift_labels=shift_labels,
                                 num_items_in_batch=num_items_in_batch, **kwargs)
        targets = labels[:, 1:]
        mask = targets != -100
        keep = torch.zeros_like(labels, dtype=torch.bool)
        keep[:, :-1] = mask  # position t's logits predict label t+1
        kwargs["use_cache"] = False
        logits = fused_forward(*args, logits_to_keep=keep, **kwargs).logits.float()  # (labels, vocab)
        log_softmax = torch.log_softmax(logits, dim=-1)
        picked = targets[mask]
        log_probs = log_softmax.gather(-1, picked[:, None]).squeeze(-1)
        with torch.no_grad():
            entropy = -(log_softmax.exp() * log_softmax).sum(-1)
            is_top1 = logits.argmax(-1) == picked  # the first maximum, as TRL's kernel counts a tie

        def spread(values: torch.Tensor) -> torch.Tensor:
            return values.new_zeros(mask.shape).masked_scatter(mask, values)

        divisor = mask.sum().clamp(min=1) if num_items_in_batch is None else num_items_in_batch
        return FusedCausalLMOutput(loss=-log_probs.sum() / divisor, log_probs=spread(log_probs),
                                   entropy=spread(entropy), is_top1=spread(is_top1), label_mask=mask)

    target.forward = forward
    return True
