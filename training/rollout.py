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
episode (case, harness variant), runs the turns, and returns ids, logprobs, `env_mask` and the
columns the reward functions read (`trace`, `case`, `segments`).

Batching. All the turns TRL hands over in one call (a generation batch: whole GRPO groups) run
together on one event loop. A backend's model call does not generate by itself: it hands its prefix
and token budget to the group's `GroupSampler` and waits. When every live turn is waiting (the others
have finished), the sampler serves them all with one batched generation, sorted by slot so the batch
does not depend on timing, and each turn goes on with its own tool calls and hooks until its next model
call. A turn whose deadline passes while it waits is cancelled by the runtime and leaves the group; the
rest are served without it. The generation behind the sampler is one of:

- `TransformersGeneration`: the policy in process, one `model.generate` over the left-padded prefixes,
  each turn's KV cache carried from one of its model calls to the next, so only what the runtime appended
  is prefilled (the CPU path, and `rl.generation: transformers` on a GPU);
- `VllmGeneration`: TRL's vLLM engine (`trainer.vllm_generation`, colocated or a server; TRL syncs the
  policy's weights into it before every rollout), for `rl.generation: vllm-colocate | vllm-server`.

Each row stops at its own `<|im_end|>` or budget; what a batch generated past that is dropped.
`batched=False` runs the turns one after another, and `carry_cache=False` prefills every call's whole prefix
(together, the rollout before batching: the baseline of `benchmarks/rollout_throughput.py`).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers import Cache, DynamicCache

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


# (prefixes, budgets) → for each row, its sampled ids (ending at <|im_end|> or at its budget) and their logprobs
Generation = Callable[[list[list[int]], list[int]], list[tuple[list[int], list[float]]]]


def _until_end(ids: list[int], logprobs: list[float], end_id: int, budget: int) -> tuple[list[int], list[float]]:
    """A row's own sample out of a batch's: up to its budget and its first end token (padding dropped)."""
    ids = ids[:budget]
    if end_id in ids:
        ids = ids[:ids.index(end_id) + 1]
    return ids, logprobs[:len(ids)]


class TransformersGeneration:
    """One `model.generate` over every waiting row: left padding and an attention mask, ancestral sampling at
    `temperature`, each row's logprobs read from the processed scores (as the trainer's sampler sees them).

    No prefix is read twice within one rollout call (one generation batch, one set of policy weights):
    - rows with the same prefix (a GRPO group's turns all start from one prompt) share its prefill;
    - with `carry_cache` (the default), each row's KV cache is kept after its call (prefix and sampled ids), and
      a later call whose prefix extends a kept one (the same turn after its tool results, skill body or hook
      feedback) prefills only the new tokens. Keys are stored at their rows' real positions (position ids run
      over the attention mask, so padding never shifts them), which makes a kept cache valid in any batch layout.
    A new instance per rollout call, so nothing computed under earlier weights is reused after an update.
    """

    def __init__(self, model: Any, tokenizer: Any, *, temperature: float, carry_cache: bool = True):
        self.model, self.temperature, self.carry_cache = model, temperature, carry_cache
        self.end_id = tokenizer.convert_tokens_to_ids(IM_END)
        self.pad_id = self.end_id if tokenizer.pad_token_id is None else tokenizer.pad_token_id
        self.calls = 0
        self.prefilled_tokens = 0  # prefix tokens run through the model before sampling
        self.reused_tokens = 0  # prefix tokens whose KV came from an earlier call
        # (ids a cache covers, per layer (keys, values) of shape (kv_heads, len(ids), head_dim))
        self._kept: list[tuple[tuple[int, ...], list[tuple[torch.Tensor, torch.Tensor]]]] = []

    @torch.no_grad()
    def __call__(self, prefixes: list[list[int]], budgets: list[int]) -> list[tuple[list[int], list[float]]]:
        self.calls += 1
        was_training = self.model.training
        self.model.eval()
        try:
            input_ids, attention_mask, cache, columns = self._prefill(prefixes)
            out = self.model.generate(input_ids=input_ids, attention_mask=attention_mask, cache=cache,
                                      max_new_tokens=max(budgets), do_sample=True, temperature=self.temperature,
                                      top_k=0, top_p=1.0, eos_token_id=self.end_id, pad_token_id=self.pad_id,
                                      output_scores=True, return_dict_in_generate=True)
        finally:
            self.model.train(was_training)
        width = input_ids.shape[1]
        generated = out.sequences[:, width:]
        logprobs = torch.stack([torch.log_softmax(score.float(), dim=-1).gather(1, generated[:, step, None])[:, 0]
                                for step, score in enumerate(out.scores)], dim=1)
        rows = [_until_end(generated[row].tolist(), logprobs[row].tolist(), self.end_id, budget)
                for row, budget in enumerate(budgets)]
        if self.carry_cache and isinstance(getattr(out, "cache", None), Cache):
            self._keep(prefixes, rows, columns, width, out.cache)
        return rows

    def _prefill(self, prefixes: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor, Any, list[torch.Tensor]]:
        """`generate`'s inputs: every row's prefix, and the KV cache of all but its last token, built from what was
        kept (`carry_cache`) plus one forward over the rest, one row per distinct prefix.

        Layout per row: [pad | kept part, right-aligned in C columns | pad | rest, right-aligned in S | last
        token]; the attention mask is 0 on every pad. Also returns each row's real column indices."""
        device = next(self.model.parameters()).device
        keys = [tuple(ids) for ids in prefixes]
        distinct = list(dict.fromkeys(keys))
        kept = [self._longest_kept(key) for key in distinct]
        reused = [length for length, _ in kept]
        rest = [len(key) - 1 - length for key, length in zip(distinct, reused, strict=True)]
        c_width, s_width = max(reused), max(rest)
        width = c_width + s_width + 1

        def layout(key: tuple[int, ...], length: int) -> tuple[list[int], list[int]]:
            ids = [self.pad_id] * width
            cols = [*range(c_width - length, c_width), *range(width - 1 - (len(key) - 1 - length), width)]
            for col, token in zip(cols, key, strict=True):
                ids[col] = token
            return ids, cols

        laid = [layout(key, length) for key, length in zip(distinct, reused, strict=True)]
        ids = torch.tensor([row for row, _ in laid], dtype=torch.long, device=device)
        mask = torch.zeros_like(ids)
        for row, (_, cols) in enumerate(laid):
            mask[row, cols] = 1
        cache = None
        if c_width:
            layers, template = [], next(entry for _, entry in kept if entry is not None)
            for layer, (keys_like, _) in enumerate(template):
                heads, _, head_dim = keys_like.shape
                k = keys_like.new_zeros((len(distinct), heads, c_width, head_dim))
                v = torch.zeros_like(k)
                for row, (length, entry) in enumerate(kept):
                    if length:
                        k[row, :, c_width - length:] = entry[layer][0][:, :length]
                        v[row, :, c_width - length:] = entry[layer][1][:, :length]
                layers.append((k, v))
            cache = DynamicCache(ddp_cache_data=layers, config=self.model.config)
        if s_width:
            head = mask[:, :width - 1]
            positions = (head.cumsum(-1) - 1).clamp(min=0)
            cache = self.model(input_ids=ids[:, c_width:width - 1], attention_mask=head,
                               position_ids=positions[:, c_width:], cache=cache, use_cache=True).cache
        self.prefilled_tokens += sum(rest) + len(distinct)
        self.reused_tokens += sum(reused)
        rows = [distinct.index(key) for key in keys]
        if cache is not None and len(distinct) < len(keys):
            cache.batch_select_indices(torch.tensor(rows, device=device))
        index = torch.tensor(rows, device=device)
        return ids[index], mask[index], cache, [torch.tensor(laid[row][1], device=device) for row in rows]

    def _longest_kept(self, key: tuple[int, ...]) -> tuple[int, Any]:
        """How many of `key`'s first tokens (never its last) a kept cache covers, and that cache."""
        best: tuple[int, Any] = (0, None)
        for ids, entry in self._kept:
            length = min(len(ids), len(key) - 1)
            if length > best[0] and key[:length] == ids[:length]:
                best = (length, entry)
        return best

    def _keep(self, prefixes: list[list[int]], rows: list[tuple[list[int], list[float]]],
              columns: list[torch.Tensor], width: int, cache: Any) -> None:
        """Each row's cache after its call: its prefix and the sampled ids the cache holds (all but the batch's
        last step, which `generate` sampled without running it through the model)."""
        steps = cache.get_seq_length() - width  # generated ids whose KV the cache holds
        kept = []
        for row, (prefix, (ids, _)) in enumerate(zip(prefixes, rows, strict=True)):
            held = min(len(ids), steps)
            cols = torch.cat([columns[row], torch.arange(width, width + held, device=columns[row].device)])
            kept.append((tuple(prefix) + tuple(ids[:held]),
                         [(layer.keys[row][:, cols], layer.values[row][:, cols]) for layer in cache.layers]))
        self._kept = kept


class VllmGeneration:
    """The same batch through TRL's vLLM engine (`trainer.vllm_generation`: colocated, or a `vllm serve` server).

    TRL's engine is built for single-turn GRPO: it samples up to the whole completion budget and stops at
    EOS. A model call of a turn needs its own budget and must stop at `<|im_end|>`, so both are set on the
    engine for the call and restored after. Not exercised on the development machine (no GPU, no vLLM).
    """

    def __init__(self, engine: Any, tokenizer: Any):
        self.engine = engine
        self.end_id = tokenizer.convert_tokens_to_ids(IM_END)
        self.calls = 0

    def __call__(self, prefixes: list[list[int]], budgets: list[int]) -> list[tuple[list[int], list[float]]]:
        self.calls += 1
        saved = self.engine.max_completion_length, self.engine.generation_kwargs
        self.engine.max_completion_length = max(budgets)
        self.engine.generation_kwargs = {**(saved[1] or {}), "stop_token_ids": [self.end_id]}
        try:
            _, completions, logprobs, _ = self.engine.generate(prompts=prefixes, images=None, num_generations=1)
        finally:
            self.engine.max_completion_length, self.engine.generation_kwargs = saved
        # vLLM returns the sampled token's logprob first in each position's list
        return [_until_end(list(ids), [position[0] for position in row], self.end_id, budget)
                for ids, row, budget in zip(completions, logprobs, budgets, strict=True)]


class GroupSampler:
    """The model calls of one group's turns, served in batches (module docstring: Batching).

    `turns` is how many turns share it; each calls `sample()` for its model calls and `finished()` once when
    its turn is over. A batch runs when every live turn is waiting.
    """

    def __init__(self, generation: Generation, turns: int = 1):
        self.generation = generation
        self.live = turns
        self.batches = 0
        self.calls = 0
        self._waiting: dict[int, tuple[list[int], int, asyncio.Future]] = {}
        self._running: asyncio.Task | None = None

    async def sample(self, slot: int, prefix: list[int], budget: int) -> tuple[list[int], list[float]]:
        """The ids sampled after `prefix` (at most `budget` of them) and their logprobs."""
        future = asyncio.get_running_loop().create_future()
        self._waiting[slot] = (prefix, budget, future)
        self._dispatch()
        return await future

    def finished(self) -> None:
        """A turn is over (replied, failed or past its deadline): the group no longer waits for it."""
        self.live -= 1
        self._dispatch()

    def _dispatch(self) -> None:
        waiting = {slot: request for slot, request in self._waiting.items() if not request[2].done()}
        if self._running is not None or not waiting or len(waiting) < self.live:
            return
        self._waiting.clear()
        self._running = asyncio.get_running_loop().create_task(self._serve(dict(sorted(waiting.items()))))

    async def _serve(self, batch: dict[int, tuple[list[int], int, asyncio.Future]]) -> None:
        self.batches += 1
        self.calls += len(batch)
        requests = list(batch.values())
        try:  # in a thread, so that deadlines still fire while the batch generates
            results = await asyncio.to_thread(self.generation, [r[0] for r in requests], [r[1] for r in requests])
        except Exception as error:  # each waiting turn records it as its own error outcome
            for _, _, future in requests:
                if not future.done():
                    future.set_exception(error)
        else:
            for (_, _, future), result in zip(requests, results, strict=True):
                if not future.done():  # its turn was cancelled (deadline) while the batch ran
                    future.set_result(result)
        finally:
            self._running = None
            self._dispatch()


class PolicyBackend:
    """Samples from the policy through `sampler` and records the turn as ids (module docstring)."""

    name = "policy"

    def __init__(self, sampler: GroupSampler, tokenizer: Any, *, max_new_tokens: int, max_completion_length: int,
                 slot: int = 0):
        self.sampler, self.tokenizer, self.slot = sampler, tokenizer, slot
        self.max_new_tokens = max_new_tokens
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
        generated, logprobs = await self.sampler.sample(self.slot, self.prompt_ids + self.completion_ids,
                                                        min(self.max_new_tokens, budget))
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


class HarnessRollout:
    """TRL `rollout_func(prompts, trainer)` over HSA-RL episodes (module docstring)."""

    def __init__(self, episodes: Mapping[str, Episode], tokenizer: Any, *, max_new_tokens: int, temperature: float,
                 max_completion_length: int, deadline_s: float, generation: str = "transformers",
                 batched: bool = True, carry_cache: bool = True):
        self.episodes, self.tokenizer = episodes, tokenizer
        self.max_new_tokens, self.temperature = max_new_tokens, temperature
        self.max_completion_length, self.deadline_s = max_completion_length, deadline_s
        self.generation, self.batched, self.carry_cache = generation, batched, carry_cache
        self.rollouts = 0
        self.prefilled_tokens = self.reused_tokens = 0  # over all calls (transformers generation)
        self.model_calls = 0  # over all calls of this rollout_func
        self.batches = 0  # generations that served them

    def sampler_generation(self, trainer: Any) -> Generation:
        """What generates for `trainer`'s rollouts: the policy in process, or TRL's vLLM engine."""
        if self.generation == "transformers":
            return TransformersGeneration(trainer.accelerator.unwrap_model(trainer.model), self.tokenizer,
                                          temperature=self.temperature, carry_cache=self.carry_cache)
        engine = trainer.vllm_generation
        if engine.mode == "server" and trainer.accelerator.num_processes > 1:
            # TRL's server client gathers every process's prompts in one collective call that assumes each
            # process asks the same number of times; agent turns of different lengths would hang it.
            raise RuntimeError("rl.generation: vllm-server drives the server from one training process; "
                               "use vllm-colocate with several GPUs")
        return VllmGeneration(engine, self.tokenizer)

    def __call__(self, prompts: list[list[dict[str, Any]]], trainer: Any) -> dict[str, list[Any]]:
        episodes = []
        for prompt in prompts:
            episode = self.episodes.get(prompt_key(prompt))
            if episode is None:
                raise KeyError("a prompt that belongs to no HSA-RL episode reached the rollout")
            self.rollouts += 1
            episodes.append((prompt, episode, f"{episode.seed}:{self.rollouts}"))
        generation = self.sampler_generation(trainer)
        if self.batched:
            turns = asyncio.run(self._run_group(episodes, generation))
        else:
            turns = [turn for one in episodes for turn in asyncio.run(self._run_group([one], generation))]
        self.prefilled_tokens += getattr(generation, "prefilled_tokens", 0)
        self.reused_tokens += getattr(generation, "reused_tokens", 0)
        columns: dict[str, list[Any]] = {k: [] for k in ("prompt_ids", "completion_ids", "logprobs", "env_mask",
                                                         "segment_ids", "trace", "case", "segments")}
        for (prompt, episode, _), (backend, result) in zip(episodes, turns, strict=True):
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

    async def _run_group(self, episodes: list[tuple[Any, Episode, str]], generation: Generation
                         ) -> list[tuple[PolicyBackend, Any]]:
        sampler = GroupSampler(generation, turns=len(episodes))
        turns = await asyncio.gather(*(self._run_turn(sampler, slot, episode, seed)
                                       for slot, (_, episode, seed) in enumerate(episodes)))
        self.model_calls += sampler.calls
        self.batches += sampler.batches
        return list(turns)

    async def _run_turn(self, sampler: GroupSampler, slot: int, episode: Episode, seed: str
                        ) -> tuple[PolicyBackend, Any]:
        backend = PolicyBackend(sampler, self.tokenizer, max_new_tokens=self.max_new_tokens,
                                max_completion_length=self.max_completion_length, slot=slot)
        sandbox = SandboxTools(dict(episode.case.room), fault_rates=dict(episode.fault_rates), seed=seed)
        try:
            result = await run_turn(episode.spec, episode.turn(), backend, sandbox.registry(), arm="train:rl",
                                    now=TRAINING_NOW, deadline_s=self.deadline_s)
        finally:
            sampler.finished()
        return backend, result
