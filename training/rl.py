"""HSA-RL: TRL's GRPOTrainer in the live-room simulator, with segment advantages and dead groups dropped.

Episodes (`data_prep._rl`) are simulator cases under the original harness or an HSA variant; each
rollout is a whole agent turn through the runtime with sandbox tools that fail by injection
(timeouts, malformed output, permission denials; `rl.fault_rate`), see `rollout.py`. Rewards are
`rewards.py` functions by name.

TRL settings (the HAT recipe): GDPO, `multi_objective_aggregation="normalize_then_sum"` (each reward
normalised within its group before the weighted sum); GSPO, `importance_sampling_level="sequence"`
with `loss_type="grpo"` (one length-normalised ratio per sequence); `scale_rewards="group"`.

What TRL does not do, `HarnessGRPOTrainer` adds:

- Zero-spread groups carry no gradient. A group whose every reward is identical across its
  rollouts has nothing to compare. TRL gives it a zero advantage (when its rows are scorable) but
  keeps the rows: they still count in the loss's mean over sequences, diluting the live groups'
  gradient, and still receive the KL and entropy terms (trl#3708). The subclass zeroes those rows'
  loss mask (`tool_mask`), takes the per-sequence mean over the rows that still have a trainable
  token (`alive_mean_scale`), and logs `frac_dropped_zero_spread`. The batch keeps its shape (TRL
  splits it into micro-batches of fixed size); no group is resampled to refill it.
- Segments. TRL computes one advantage per completion. The report treats tool-call and reply
  segments as independent advantage groups, so with `segment_advantages` the subclass computes two
  GDPO advantages per rollout, one from the rewards of each segment (`rewards.SEGMENT_OF`: tool
  rationality, skill selection and the tool-call reasoning penalty → tool-call tokens; accuracy,
  effectiveness and the reply reasoning penalty → reply tokens). Handing TRL (B, T) advantages is not
  enough: under GSPO its one (B, 1) ratio multiplies them and the per-sequence mean then gives every
  token the same length-weighted average, so the segments' credit cancels. The subclass therefore
  computes the loss itself in that mode (`segment_gspo_loss`): GSPO with one length-normalised ratio per
  segment, clipped per segment, so each segment's tokens carry that segment's advantage into the
  gradient. A rollout with no tool call simply has no tool-call tokens to credit.
- GSPO that acts. The ratio departs from 1 only when a generation is optimised more than once
  (`num_iterations` > 1, or more optimiser steps per generation than accumulation steps); the stage
  logs the clipped fraction (`clip_ratio/region_mean`).
"""

from __future__ import annotations

import torch
from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer

from harness.augmentation import HsaConfig, augment
from harness.simulator.cases import Case
from training.base_models import load_model, load_tokenizer, lora_config, save_stage_model
from training.datasets import read_jsonl
from training.rewards import SEGMENT_CODES, SEGMENT_OF, ReasoningTokens, stage_rewards
from training.rl_config import FAULT_KINDS, RlConfig
from training.rollout import Episode, HarnessRollout, prompt_key
from training.stage_runtime import StageContext, StageFailed, summary_metrics, train_with_resume


def _nanstd(x: torch.Tensor, dim: int, keepdim: bool = False) -> torch.Tensor:
    mean = torch.nanmean(x, dim=dim, keepdim=True)
    count = (~torch.isnan(x)).sum(dim=dim, keepdim=True).clamp(min=2)
    var = torch.nansum((x - mean) ** 2, dim=dim, keepdim=True) / (count - 1)
    std = var.sqrt()
    return std if keepdim else std.squeeze(dim)


def zero_spread_groups(rewards: torch.Tensor, num_generations: int, atol: float = 1e-6) -> torch.Tensor:
    """(N,) bool: rows whose group of `num_generations` has no spread in any reward (NaNs ignored).

    `rewards` is (N, K), rows ordered group by group as GRPO lays them out.
    """
    grouped = rewards.view(-1, num_generations, rewards.shape[1])
    high = torch.where(torch.isnan(grouped), torch.full_like(grouped, -torch.inf), grouped).amax(dim=1)
    low = torch.where(torch.isnan(grouped), torch.full_like(grouped, torch.inf), grouped).amin(dim=1)
    spread = (high - low).nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)  # a reward absent from the group: no spread
    dead = (spread <= atol).all(dim=1)
    return dead.repeat_interleave(num_generations)


def gdpo_advantages(rewards: torch.Tensor, weights: torch.Tensor, num_generations: int) -> torch.Tensor:
    """GDPO as TRL computes it: each reward normalised within its group, weighted sum, batch-normalised.

    Rows where every reward is NaN get 0.
    """
    grouped = rewards.view(-1, num_generations, rewards.shape[1])
    mean = torch.nanmean(grouped, dim=1, keepdim=True)
    std = _nanstd(grouped, dim=1, keepdim=True)
    normalised = ((grouped - mean) / (std + 1e-4)).view(-1, rewards.shape[1])
    summed = (normalised * weights.unsqueeze(0)).nansum(dim=1)
    unscorable = torch.isnan(rewards).all(dim=1)
    summed[unscorable] = torch.nan
    centred = (summed - torch.nanmean(summed)) / (_nanstd(summed, dim=0) + 1e-4)
    return torch.nan_to_num(centred, nan=0.0)


def segment_log_ratio(log_ratio: torch.Tensor, segments: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B, T): each trained token's log ratio replaced by the mean log ratio of its segment in its row (GSPO's
    length-normalised sequence ratio, one per segment); 0 elsewhere."""
    out = torch.zeros_like(log_ratio)
    for code in SEGMENT_CODES.values():
        inside = (segments == code) & (mask > 0)
        mean = (log_ratio * inside).sum(-1, keepdim=True) / inside.sum(-1, keepdim=True).clamp(min=1)
        out = torch.where(inside, mean.expand_as(out), out)
    return out


def segment_gspo_loss(logps: torch.Tensor, old_logps: torch.Tensor, advantages: torch.Tensor,
                      segments: torch.Tensor, mask: torch.Tensor, *, epsilon_low: float, epsilon_high: float
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token clipped surrogate loss with one ratio per segment, and the (B, T) ratios.

    All tensors are (B, T); `advantages` hold each token's segment advantage. A token's gradient is its own
    segment's advantage times that segment's ratio (unless clipped), spread evenly over the segment's tokens.
    """
    ratio = torch.exp(segment_log_ratio(logps - old_logps, segments, mask))
    clipped = torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_high)
    return -torch.min(ratio * advantages, clipped * advantages), ratio


def alive_mean_scale(completion_mask: torch.Tensor, loss_mask: torch.Tensor) -> float:
    """Factor turning TRL's mean over all B sequences into a mean over the sequences with a trainable
    token (0 when there is none: then the micro-batch carries no gradient at all)."""
    alive = int(((completion_mask * loss_mask).sum(-1) > 0).sum())
    return completion_mask.shape[0] / alive if alive else 0.0


class HarnessGRPOTrainer(GRPOTrainer):
    """GRPOTrainer + zero-spread groups dropped + per-segment advantages (module docstring)."""

    def __init__(self, *args, reward_segments: list[str], segment_advantages: bool, drop_zero_spread: bool,
                 **kwargs):
        super().__init__(*args, **kwargs)
        self.reward_segments = reward_segments
        self.segment_advantages = segment_advantages
        self.drop_zero_spread = drop_zero_spread
        self._last_rewards: torch.Tensor | None = None
        self._last_segment_ids: list[list[int]] = []

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._last_rewards = rewards
        self._last_segment_ids = [list(example.get("segment_ids") or ()) for example in inputs]
        return rewards

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        if self._last_rewards is None:
            return output
        mode = "train" if self.model.training else "eval"
        generations = self.num_generations if mode == "train" else self.num_generations_eval
        local = len(output["completion_ids"])
        rows = slice(self.accelerator.process_index * local, (self.accelerator.process_index + 1) * local)
        completion_mask = output["completion_mask"]
        if self.segment_advantages:
            output["advantages"] = self._segment_advantages(generations, rows, completion_mask.shape[1])
            output["segment_ids"] = self._segment_codes(completion_mask.shape[1]).to(completion_mask.device)
        if self.drop_zero_spread:
            dead_all = zero_spread_groups(self._last_rewards, generations)
            dead = dead_all[rows].to(completion_mask.device)
            mask = output.get("tool_mask")
            mask = torch.ones_like(completion_mask) if mask is None else mask.clone()
            mask[dead] = 0
            output["tool_mask"] = mask
            self._metrics[mode]["frac_dropped_zero_spread"].append(dead_all.float().mean().item())
        return output

    def _compute_loss(self, model, inputs):
        if self.segment_advantages and "segment_ids" in inputs:
            loss = self._segment_loss(model, inputs)
        else:
            loss = super()._compute_loss(model, inputs)
        if self.drop_zero_spread and self.loss_type in ("grpo", "sapo") and "tool_mask" in inputs:
            loss = loss * alive_mean_scale(inputs["completion_mask"], inputs["tool_mask"])
        return loss

    def _segment_loss(self, model, inputs) -> torch.Tensor:
        """GRPO's per-sequence mean of `segment_gspo_loss`, with TRL's KL term and vLLM correction (module
        docstring: why TRL's own sequence-level loss cannot carry segment credit)."""
        prompt_ids, completion_ids = inputs["prompt_ids"], inputs["completion_ids"]
        completion_mask = inputs["completion_mask"]
        mask = completion_mask * inputs["tool_mask"] if "tool_mask" in inputs else completion_mask
        logps = self._get_per_token_logps_and_entropies(
            model, torch.cat([prompt_ids, completion_ids], dim=1),
            torch.cat([inputs["prompt_mask"], completion_mask], dim=1), completion_ids.size(1))[0]
        old = inputs.get("old_per_token_logps")
        old = logps.detach() if old is None else old
        per_token, ratio = segment_gspo_loss(logps, old, inputs["advantages"], inputs["segment_ids"], mask,
                                             epsilon_low=self.epsilon_low, epsilon_high=self.epsilon_high)
        if self.use_vllm and self.vllm_importance_sampling_correction:
            per_token = per_token * inputs["importance_sampling_ratio"]
        mode = "train" if self.model.training else "eval"
        if self.beta != 0.0:
            gap = inputs["ref_per_token_logps"] - logps
            kl = torch.exp(gap) - gap - 1
            per_token = per_token + self.beta * kl
            self._metrics[mode]["kl"].append(self._masked_mean(kl, mask))
        loss = ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
        advantages = inputs["advantages"]
        low = (ratio < 1 - self.epsilon_low) & (advantages < 0)
        high = (ratio > 1 + self.epsilon_high) & (advantages > 0)
        self._metrics[mode]["clip_ratio/low_mean"].append(self._masked_mean(low.float(), mask))
        self._metrics[mode]["clip_ratio/high_mean"].append(self._masked_mean(high.float(), mask))
        self._metrics[mode]["clip_ratio/region_mean"].append(self._masked_mean((low | high).float(), mask))
        return loss / (self.current_gradient_accumulation_steps if mode == "train" else 1.0)

    def _masked_mean(self, values: torch.Tensor, mask: torch.Tensor) -> float:
        totals = self.accelerator.reduce(torch.stack([(values * mask).sum(), mask.sum().float()]), reduction="sum")
        return (totals[0] / totals[1].clamp(min=1.0)).item()

    def _segment_codes(self, length: int) -> torch.Tensor:
        """(B, T) segment code of each local completion token (`SEGMENT_CODES`; 0 for env tokens and padding)."""
        codes = torch.zeros(len(self._last_segment_ids), length, dtype=torch.long)
        for row, ids in enumerate(self._last_segment_ids):
            kept = ids[:length]
            codes[row, :len(kept)] = torch.tensor(kept, dtype=torch.long)
        return codes

    def _segment_advantages(self, generations: int, rows: slice, length: int) -> torch.Tensor:
        rewards = self._last_rewards
        weights = self.reward_weights.to(rewards.device)
        per_segment = {}
        for segment in ("tool", "reply"):
            columns = [i for i, s in enumerate(self.reward_segments) if s == segment]
            if columns:
                per_segment[segment] = gdpo_advantages(rewards[:, columns], weights[columns], generations)[rows]
            else:
                per_segment[segment] = torch.zeros(rows.stop - rows.start, device=rewards.device)
        advantages = torch.zeros(rows.stop - rows.start, length, device=rewards.device)
        for row, ids in enumerate(self._last_segment_ids):
            codes = torch.tensor(ids[:length], device=rewards.device)
            for segment, code in SEGMENT_CODES.items():
                positions = torch.nonzero(codes == code).flatten()
                advantages[row, positions] = per_segment[segment][row]
        self._metrics["train" if self.model.training else "eval"]["advantage/tool_mean_abs"].append(
            per_segment["tool"].abs().mean().item())
        return advantages.to(self.accelerator.device)


def build_episodes(context: StageContext, config: RlConfig) -> dict[str, Episode]:
    hsa = HsaConfig(**context.prepared.report.get("hsa", {}))
    rate = config.fault_rate / len(FAULT_KINDS)
    fault_rates = {kind: rate for kind in FAULT_KINDS} if config.fault_rate else {}
    episodes = {}
    for index, row in enumerate(read_jsonl(context.prepared.path)):
        spec = context.specs[row["harness_index"]]
        if row["hsa_seed"] is not None:
            spec = augment(spec, hsa, seed=row["hsa_seed"]).spec
        if spec.content_hash != row["harness_hash"]:
            raise StageFailed(f"rl: episode {index} was prepared under harness {row['harness_hash'][:12]}, "
                              f"which this job's harnesses no longer produce")
        episode = Episode(case=Case.from_dict(row["case"]), spec=spec, fault_rates=fault_rates,
                          seed=context.seed * 100_003 + index)
        episodes[prompt_key(episode.prompt())] = episode
    return episodes


def reasoning_markup(context: StageContext, tokenizer) -> ReasoningTokens:
    """How the policy marks reasoning: the markers of the base model's own chat template, as the policy's token
    ids (`rewards.ReasoningTokens`); off for a base whose template marks none (SmolLM2)."""
    from transformers import AutoTokenizer

    template = AutoTokenizer.from_pretrained(context.base_model_dir()).chat_template
    return ReasoningTokens.from_template(template, lambda text: tokenizer(text, add_special_tokens=False)["input_ids"])


def run_rl(config: RlConfig, context: StageContext) -> dict[str, float]:
    input_dir = context.input_model_dir()
    tokenizer = load_tokenizer(input_dir)
    tokenizer.padding_side = "left"
    episodes = build_episodes(context, config)
    dataset = Dataset.from_list([{"prompt": episode.prompt()} for episode in episodes.values()])
    args = GRPOConfig(**context.trainer_arguments(config),
                      num_generations=config.num_generations, max_completion_length=config.max_completion_length,
                      temperature=config.temperature, beta=config.beta, epsilon=config.epsilon, loss_type="grpo",
                      num_iterations=config.num_iterations, steps_per_generation=config.steps_per_generation,
                      importance_sampling_level="sequence", multi_objective_aggregation="normalize_then_sum",
                      scale_rewards="group", reward_weights=list(config.reward_weights) or None,
                      log_completions=False, **config.generation_arguments())
    rollout = HarnessRollout(episodes, tokenizer, max_new_tokens=config.max_new_tokens,
                             temperature=config.temperature, max_completion_length=config.max_completion_length,
                             deadline_s=config.turn_deadline_s, generation=config.generation)
    reasoning = reasoning_markup(context, tokenizer)
    context.notes["reasoning_penalty"] = reasoning.describe()
    reporter_callback, cancel_callback = context.callbacks()
    trainer = HarnessGRPOTrainer(
        model=load_model(input_dir, use_cpu=context.use_cpu),
        reward_funcs=stage_rewards(config.rewards, reasoning=reasoning), args=args, train_dataset=dataset,
        processing_class=tokenizer, rollout_func=rollout,
        peft_config=lora_config(context.model) if context.model.finetune == "lora" else None,
        callbacks=[reporter_callback, cancel_callback], reward_segments=[SEGMENT_OF[n] for n in config.rewards],
        segment_advantages=config.segment_advantages, drop_zero_spread=config.drop_zero_spread_groups)
    context.reporter.line(f"rl: {len(episodes)} episodes × {config.num_generations} rollouts, "
                          f"rewards {', '.join(config.rewards)}; reasoning-length penalty {reasoning.describe()}")
    train_with_resume(trainer, context, cancel_callback)
    save_stage_model(trainer, tokenizer, context)
    return {**summary_metrics(reporter_callback.history), "episodes": float(len(episodes)),
            "rollouts": float(rollout.rollouts)}
