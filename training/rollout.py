"""HSA-RL rollouts: the policy answers a simulator case through the real runtime, as one completion.

`PolicyBackend` is a `ModelBackend` over the model being trained. The runtime (`run_turn`) drives the
turn exactly as in serving, with the harness's hooks, the sandbox tools (with injected faults) and
load_skill; every model call samples from the policy. The backend keeps the turn as token ids:

    prompt_ids      = the first call's prompt (system + viewer), rendered like the local backend does
    completion_ids  = gen₁ env₁ gen₂ env₂ … genₙ

where genᵢ are the sampled tokens of call i and envᵢ what the runtime appended before the next call
(tool results, a loaded skill's body, hook feedback, and the next `<|im_start|>assistant` header),
tokenized once and never re-tokenized, so the ids trained on are the ids sampled from. `env_mask` is 0
on env tokens (TRL masks them out of the loss); `segment_ids` marks each completion token 1 (a call
that produced tool calls: a tool-call segment), 2 (a reply segment) or 0 (env), for the segment
advantages in `rl.py`. A turn longer than `max_completion_length` stops there (the backend raises
and the runtime records an error outcome, which the rewards score as a failure).

`HarnessRollout` is the `rollout_func` TRL's GRPOTrainer calls: it maps each prompt back to its
episode (case, harness variant), runs the turn, and returns ids, logprobs, `env_mask` and the
columns the reward functions read (`trace`, `case`, `segments`).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from harness.model_protocol import BackendError, ModelResponse
from harness.runtime import RoomContext, TurnInput, run_turn
from harness.runtime.messages import assemble_messages
from harness.simulator import SandboxTools
from harness.simulator.cases import Case
from harness.spec import HarnessSpec
from serving.backends.hermes import IM_END, parse_tool_calls, render_chatml
from training.trajectories import TRAINING_NOW

_EMPTY_SYSTEM = render_chatml([{"role": "system", "content": ""}]).removesuffix("<|im_start|>assistant\n")
_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"


def prompt_key(prompt: Sequence[Mapping[str, Any]]) -> str:
    return hashlib.sha256(json.dumps(list(prompt), sort_keys=True, ensure_ascii=False).encode()).hexdigest()


@dataclass(frozen=True)
class Episode:
    case: Case
    spec: HarnessSpec
    fault_rates: Mapping[str, float]
    seed: int

    def turn(self) -> TurnInput:
        return TurnInput(message=self.case.message, viewer_id=self.case.viewer_id,
                         room=RoomContext.from_dict(dict(self.case.room)), recent_dialogue=self.case.dialogue)

    def prompt(self) -> list[dict[str, Any]]:
        """What the runtime sends first: the dataset's `prompt` column (and the key back to this episode)."""
        return assemble_messages(self.spec, self.turn(), TRAINING_NOW)


class PolicyBackend:
    """Samples from the policy and records the turn as ids (module docstring)."""

    name = "policy"

    def __init__(self, model: Any, tokenizer: Any, *, max_new_tokens: int, temperature: float,
                 max_completion_length: int):
        self.model, self.tokenizer = model, tokenizer
        self.max_new_tokens, self.temperature = max_new_tokens, temperature
        self.max_completion_length = max_completion_length
        self.prompt_ids: list[int] | None = None
        self.completion_ids: list[int] = []
        self.logprobs: list[float] = []
        self.env_mask: list[int] = []
        self.segment_ids: list[int] = []
        self.segments: list[dict[str, Any]] = []
        self._seen = 0
        self._ended = True
        self._end_id = tokenizer.convert_tokens_to_ids(IM_END)

    def _ids(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _append(self, ids: list[int], *, trained: bool, segment: int, logprobs: list[float] | None = None) -> None:
        self.completion_ids += ids
        self.env_mask += [1 if trained else 0] * len(ids)
        self.segment_ids += [segment] * len(ids)
        self.logprobs += logprobs if logprobs is not None else [0.0] * len(ids)

    async def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, max_tokens: int = 512,
                       temperature: float = 0.0, tool_choice: str = "auto") -> ModelResponse:
        # Tools stay in the prompt even when the runtime asks for tool_choice="none": the prefix must not change.
        if self.prompt_ids is None:
            self.prompt_ids = self._ids(render_chatml(messages, tools))
        else:
            appended = messages[self._seen + 1:]  # [our own assistant message, then what the runtime added]
            text = ("" if self._ended else IM_END) + "\n" + render_chatml(
                [{"role": "system", "content": ""}, *appended]).removeprefix(_EMPTY_SYSTEM)
            self._append(self._ids(text), trained=False, segment=0)
        self._seen = len(messages)
        budget = self.max_completion_length - len(self.completion_ids)
        if budget <= 0:
            raise BackendError(f"the turn reached max_completion_length={self.max_completion_length} tokens")
        generated, logprobs = await asyncio.to_thread(self._sample, min(self.max_new_tokens, budget))
        self._ended = bool(generated) and generated[-1] == self._end_id
        text = self.tokenizer.decode(generated, skip_special_tokens=False).removesuffix(IM_END)
        content, calls = parse_tool_calls(text) if tools else (text.strip(), ())
        kind = "tool" if calls else "reply"
        self._append(generated, trained=True, segment=1 if calls else 2, logprobs=logprobs)
        self.segments.append({"kind": kind, "tokens": len(generated), "reasoning_tokens": self._reasoning(text)})
        return ModelResponse(content=content, tool_calls=calls, tokens_in=len(self.prompt_ids) + len(
            self.completion_ids) - len(generated), tokens_out=len(generated),
            finish_reason="tool_calls" if calls else ("stop" if self._ended else "length"))

    def _reasoning(self, text: str) -> int:
        if _THINK_OPEN not in text:
            return 0
        inner = text.split(_THINK_OPEN, 1)[1].split(_THINK_CLOSE, 1)[0]
        return len(self._ids(inner))

    @torch.no_grad()
    def _sample(self, max_new_tokens: int) -> tuple[list[int], list[float]]:
        device = next(self.model.parameters()).device
        input_ids = torch.tensor([self.prompt_ids + self.completion_ids], device=device)
        was_training = self.model.training
        self.model.eval()
        try:
            out = self.model.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids),
                                      max_new_tokens=max_new_tokens, do_sample=True, temperature=self.temperature,
                                      top_k=0, top_p=1.0, eos_token_id=self._end_id,
                                      pad_token_id=self.tokenizer.pad_token_id, output_scores=True,
                                      return_dict_in_generate=True)
        finally:
            self.model.train(was_training)
        generated = out.sequences[0, input_ids.shape[1]:].tolist()
        logprobs = [torch.log_softmax(score[0].float(), dim=-1)[token].item()
                    for score, token in zip(out.scores, generated, strict=False)]
        return generated, logprobs


class HarnessRollout:
    """TRL `rollout_func(prompts, trainer)` over HSA-RL episodes (module docstring)."""

    def __init__(self, episodes: Mapping[str, Episode], tokenizer: Any, *, max_new_tokens: int, temperature: float,
                 max_completion_length: int, deadline_s: float):
        self.episodes, self.tokenizer = episodes, tokenizer
        self.max_new_tokens, self.temperature = max_new_tokens, temperature
        self.max_completion_length, self.deadline_s = max_completion_length, deadline_s
        self.rollouts = 0

    def __call__(self, prompts: list[list[dict[str, Any]]], trainer: Any) -> dict[str, list[Any]]:
        model = trainer.accelerator.unwrap_model(trainer.model)
        columns: dict[str, list[Any]] = {k: [] for k in ("prompt_ids", "completion_ids", "logprobs", "env_mask",
                                                         "segment_ids", "trace", "case", "segments")}
        for prompt in prompts:
            episode = self.episodes.get(prompt_key(prompt))
            if episode is None:
                raise KeyError("a prompt that belongs to no HSA-RL episode reached the rollout")
            self.rollouts += 1
            backend = PolicyBackend(model, self.tokenizer, max_new_tokens=self.max_new_tokens,
                                    temperature=self.temperature, max_completion_length=self.max_completion_length)
            sandbox = SandboxTools(dict(episode.case.room), fault_rates=dict(episode.fault_rates),
                                   seed=f"{episode.seed}:{self.rollouts}")
            result = asyncio.run(run_turn(episode.spec, episode.turn(), backend, sandbox.registry(),
                                          arm="train:rl", now=TRAINING_NOW, deadline_s=self.deadline_s))
            if backend.prompt_ids is None:  # an input hook answered without the model: nothing to train
                backend.prompt_ids = backend._ids(render_chatml(prompt))
                backend._append([backend._end_id], trained=False, segment=0)
            columns["prompt_ids"].append(backend.prompt_ids)
            columns["completion_ids"].append(backend.completion_ids)
            columns["logprobs"].append(backend.logprobs)
            columns["env_mask"].append(backend.env_mask)
            columns["segment_ids"].append(backend.segment_ids)
            columns["trace"].append(result.trace)
            columns["case"].append(json.dumps(episode.case.to_dict(), ensure_ascii=False))
            columns["segments"].append(backend.segments)
        return columns
