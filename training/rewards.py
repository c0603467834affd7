"""HSA-RL reward functions, registered by name (TRL's reward-function signature).

Each function is `f(prompts, completions, completion_ids, **columns) -> list[float | None]`. The
rollout (`rl.py`) runs a whole agent turn through the runtime and adds three columns per completion:

- `trace`: the turn's `harnessops.trace/v1` trace (tool steps, loaded skills, outcome, reply);
- `case`: the case as `Case.to_dict()`, its ground truth in the names of the harness the turn ran
  under (an HSA variant's names when it was augmented);
- `segments`: one entry per model call, `{"kind": "tool" | "reply", "tokens": n, "reasoning_tokens": n}`
  (a call that produced tool calls is a tool-call segment, the others are reply segments);
- `segment_ids`: each completion token's segment (`SEGMENT_CODES`: 1 tool call, 2 reply, 0 what the
  runtime appended), beside TRL's `completion_ids`.

`None` means "does not apply to this completion" (TRL turns it into NaN and leaves that function
out for that row), never "bad".

Rewards (HAT report, HSA-RL): Accuracy and Effectiveness from the reference judge; Tool Rationality;
Skill Selection; and a chain-of-thought length penalty per segment: 0 up to `LENGTH_FREE` (100)
reasoning tokens, falling linearly to `LENGTH_PENALTY` (-0.1) at `LENGTH_FULL` (200) and beyond,
averaged over the segment's model calls. `SEGMENT_OF` says which advantage group each reward feeds
(`rl.py`: tool-call tokens and reply tokens get separate advantages).

Reasoning tokens are counted as the model's chat template marks them (`ReasoningTokens`, from the base
model's template: `<think>…</think>` for Qwen3, whose reasoning vLLM's `qwen3` parser splits off when it
serves it), in the token ids each model call generated. A base whose template marks no reasoning
(SmolLM2's, and the training template `chat_template.py`) emits none: the penalties are then off
(`REASONING_OFF`, None for every completion) and the RL stage says so in its record and log.
`stage_rewards(names, reasoning=…)` binds the stage's count to the two penalties.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from evaluation.judges.reference import judge_reference, match_calls, parse_arguments, tool_steps
from harness.simulator.cases import Case

LENGTH_FREE, LENGTH_FULL, LENGTH_PENALTY = 100, 200, -0.1
LOAD_SKILL = "load_skill"
SEGMENT_CODES = {"tool": 1, "reply": 2}  # a completion token's segment id (0: tokens the runtime appended)

RewardFunction = Callable[..., list[float | None]]
_REWARDS: dict[str, RewardFunction] = {}
# Which advantage group a reward feeds: "tool" (tool-call segments) or "reply" (the reply segment).
SEGMENT_OF: dict[str, str] = {}


def register_reward(name: str, segment: str) -> Callable[[RewardFunction], RewardFunction]:
    if segment not in ("tool", "reply"):
        raise ValueError(f"segment must be 'tool' or 'reply', not {segment!r}")

    def decorate(fn: RewardFunction) -> RewardFunction:
        fn.__name__ = name  # TRL logs rewards under the function's name
        _REWARDS[name] = fn
        SEGMENT_OF[name] = segment
        return fn

    return decorate


def reward_names() -> list[str]:
    return sorted(_REWARDS)


def reward_function(name: str) -> RewardFunction:
    try:
        return _REWARDS[name]
    except KeyError:
        raise KeyError(f"unknown reward {name!r}; registered: {', '.join(reward_names())}") from None


def _case(value: Any) -> Case:
    if isinstance(value, Case):
        return value
    return Case.from_dict(json.loads(value) if isinstance(value, str) else value)


def _verdicts(cases: Sequence[Any], traces: Sequence[Mapping[str, Any]]) -> list[Any]:
    return [judge_reference(_case(c), t) for c, t in zip(cases, traces, strict=True)]


@register_reward("accuracy", "reply")
def accuracy(prompts: list, completions: list, completion_ids: list | None = None, *, case: Sequence[Any],
             trace: Sequence[Mapping[str, Any]], **_: Any) -> list[float | None]:
    """1 when the reply states the facts, claims nothing forbidden and is silent exactly when it should be."""
    return [float(v.accuracy) for v in _verdicts(case, trace)]


@register_reward("effectiveness", "reply")
def effectiveness(prompts: list, completions: list, completion_ids: list | None = None, *, case: Sequence[Any],
                  trace: Sequence[Mapping[str, Any]], **_: Any) -> list[float | None]:
    """The judge's 0 / 0.5 / 1: accurate and reached the right way (skill, tools, a real answer)."""
    return [float(v.effectiveness) for v in _verdicts(case, trace)]


def tool_rationality_score(case: Case, trace: Mapping[str, Any]) -> float:
    """1.0 for exactly the calls the case needs, made well; less for each kind of waste or mistake.

    - the share of expected calls not made (and a missing any-of tool) is taken off;
    - each call the model got wrong (unknown tool, arguments that are not valid JSON or fail the
      schema) costs 0.25; a denied call or an injected fault is not the model's doing;
    - each repeat of an identical call that already succeeded costs 0.25 (retrying a call that
      failed is rational);
    - calling a tool the case forbids (a write tool the viewer did not ask for) gives 0.
    """
    steps = [s for s in tool_steps(trace) if s.get("name") != LOAD_SKILL]
    banned = set(case.meta.get("forbidden_tools") or ())
    if any(s.get("name") in banned for s in steps):
        return 0.0
    score = 1.0
    expected = case.expected.tools
    if expected:
        _, missing = match_calls(expected, steps)
        score -= len(missing) / len(expected)
    any_of = set(case.meta.get("any_of_tools") or ())
    if any_of and not any(s.get("name") in any_of for s in steps):
        score -= 0.5
    succeeded: set[tuple[str, str]] = set()
    for step in steps:
        error = str(step.get("error") or "")
        model_error = error.startswith(("unknown tool", "invalid arguments", "arguments are not valid JSON"))
        if model_error:
            score -= 0.25
            continue
        key = (str(step.get("name")), json.dumps(parse_arguments(step.get("arguments")), sort_keys=True))
        if key in succeeded:
            score -= 0.25
        if not error:
            succeeded.add(key)
    if not expected and not any_of and steps:
        score -= 0.25 * len(steps)  # nothing needed looking up
    return max(0.0, min(1.0, score))


@register_reward("tool_rationality", "tool")
def tool_rationality(prompts: list, completions: list, completion_ids: list | None = None, *, case: Sequence[Any],
                     trace: Sequence[Mapping[str, Any]], **_: Any) -> list[float | None]:
    """See `tool_rationality_score`."""
    return [tool_rationality_score(_case(c), t) for c, t in zip(case, trace, strict=True)]


def skill_selection_score(case: Case, trace: Mapping[str, Any]) -> float | None:
    """1 when an expected reply skill was loaded; 0.5 when it was, among others that are not expected
    (noise skills cost context); 0 when none was. None when the case expects no skill (silence)."""
    expected = set(case.expected.skills)
    if not expected:
        return None
    loaded = [str(s) for s in trace.get("skills_loaded") or ()]
    if not expected & set(loaded):
        return 0.0
    strategy_or_noise = [s for s in loaded if s not in expected]
    return 1.0 if len(strategy_or_noise) <= 1 else 0.5  # one strategy skill is fine (report: optional helpers)


@register_reward("skill_selection", "tool")
def skill_selection(prompts: list, completions: list, completion_ids: list | None = None, *, case: Sequence[Any],
                    trace: Sequence[Mapping[str, Any]], **_: Any) -> list[float | None]:
    """See `skill_selection_score`."""
    return [skill_selection_score(_case(c), t) for c, t in zip(case, trace, strict=True)]


def length_penalty(reasoning_tokens: int) -> float:
    """0 up to LENGTH_FREE tokens, linear to LENGTH_PENALTY at LENGTH_FULL, flat after."""
    if reasoning_tokens <= LENGTH_FREE:
        return 0.0
    if reasoning_tokens >= LENGTH_FULL:
        return LENGTH_PENALTY
    return LENGTH_PENALTY * (reasoning_tokens - LENGTH_FREE) / (LENGTH_FULL - LENGTH_FREE)


def _segment_penalty(segments: Sequence[Mapping[str, Any]], kind: str) -> float | None:
    chosen = [s for s in segments if s.get("kind") == kind]
    if not chosen:
        return None
    return sum(length_penalty(int(s.get("reasoning_tokens", 0))) for s in chosen) / len(chosen)


# Reasoning blocks as chat templates mark them (open, close). `<think>` is what the production model's template
# writes (Qwen3: vLLM's `qwen3` reasoning parser splits on it, serving/vllm/profile.py) and what the runtime
# strips from replies (harness.runtime.messages.strip_reasoning); the others are other model families' pairs.
REASONING_MARKERS = (("<think>", "</think>"), ("<seed:think>", "</seed:think>"), ("[THINK]", "[/THINK]"))
REASONING_OFF = "off: the model emits no reasoning"
REASONING_REWARDS = ("tool_reasoning_length", "reply_reasoning_length")


def reasoning_markers(chat_template: str | Mapping[str, str] | None) -> tuple[str, str] | None:
    """The (open, close) reasoning markers a chat template writes (the first pair of `REASONING_MARKERS` it holds
    both of), or None when it marks no reasoning. A tokenizer's named templates are read together."""
    text = "\n".join(chat_template.values()) if isinstance(chat_template, Mapping) else (chat_template or "")
    for open_marker, close_marker in REASONING_MARKERS:
        if open_marker in text and close_marker in text:
            return open_marker, close_marker
    return None


def _find(ids: Sequence[int], marker: Sequence[int], start: int) -> int:
    """Index of the first occurrence of `marker` in `ids` at or after `start`, or -1."""
    width = len(marker)
    for index in range(start, len(ids) - width + 1):
        if list(ids[index:index + width]) == list(marker):
            return index
    return -1


@dataclass(frozen=True)
class ReasoningTokens:
    """A model's reasoning markers as token ids (module docstring); without markers, reasoning is off."""

    open: str = ""
    close: str = ""
    open_ids: tuple[int, ...] = ()
    close_ids: tuple[int, ...] = ()

    @classmethod
    def from_template(cls, chat_template: str | Mapping[str, str] | None,
                      encode: Callable[[str], Sequence[int]]) -> ReasoningTokens:
        """The markers `chat_template` writes, tokenized by `encode` (the policy's tokenizer); off without any."""
        markers = reasoning_markers(chat_template)
        if markers is None:
            return cls()
        return cls(markers[0], markers[1], tuple(encode(markers[0])), tuple(encode(markers[1])))

    @property
    def enabled(self) -> bool:
        return bool(self.open_ids and self.close_ids)

    def describe(self) -> str:
        return f"on: the tokens between {self.open} and {self.close}" if self.enabled else REASONING_OFF

    def count(self, ids: Sequence[int]) -> int:
        """Reasoning tokens among one model call's generated ids: those inside open…close (markers not counted).
        A close with no open before it counts from the call's start (a template that opens the block in the
        generation prompt, as Qwen3's thinking mode does); an open never closed counts to the call's end."""
        if not self.enabled:
            return 0
        total, position = 0, 0
        first_open, first_close = _find(ids, self.open_ids, 0), _find(ids, self.close_ids, 0)
        if first_close != -1 and (first_open == -1 or first_close < first_open):
            total, position = first_close, first_close + len(self.close_ids)
        while (start := _find(ids, self.open_ids, position)) != -1:
            body = start + len(self.open_ids)
            end = _find(ids, self.close_ids, body)
            if end == -1:
                return total + len(ids) - body
            total, position = total + end - body, end + len(self.close_ids)
        return total


def model_calls(completion_ids: Sequence[int], segment_ids: Sequence[int], reasoning: ReasoningTokens
                ) -> list[dict[str, Any]]:
    """One entry per model call of a turn (a run of tokens of one segment; the runtime's tokens separate calls):
    `{"kind", "tokens", "reasoning_tokens"}`, its reasoning counted in its own generated ids."""
    kinds = {code: kind for kind, code in SEGMENT_CODES.items()}
    calls: list[dict[str, Any]] = []
    run: list[int] = []
    code_of_run = 0
    # A sentinel closes the last run; TRL may hand over completion ids cut shorter than their segment ids.
    for token, code in [*zip(completion_ids, segment_ids, strict=False), (None, 0)]:
        if code != code_of_run and run:
            calls.append({"kind": kinds[code_of_run], "tokens": len(run), "reasoning_tokens": reasoning.count(run)})
            run = []
        code_of_run = code
        if code in kinds:
            run.append(token)
    return calls


def _reasoning_penalties(kind: str, segments: Sequence[Sequence[Mapping[str, Any]]], completion_ids: Any,
                         segment_ids: Any, reasoning: ReasoningTokens | None) -> list[float | None]:
    if reasoning is None:  # the counts the segments carry (a caller that counted them itself)
        return [_segment_penalty(s, kind) for s in segments]
    if not reasoning.enabled:
        return [None] * len(segments)  # off: the model emits no reasoning
    if segment_ids is None or completion_ids is None:
        raise ValueError("the reasoning-length rewards need the rollout's completion_ids and segment_ids")
    return [_segment_penalty(model_calls(ids, codes, reasoning), kind)
            for ids, codes in zip(completion_ids, segment_ids, strict=True)]


@register_reward("tool_reasoning_length", "tool")
def tool_reasoning_length(prompts: list, completions: list, completion_ids: list | None = None, *,
                          segments: Sequence[Sequence[Mapping[str, Any]]], segment_ids: list | None = None,
                          reasoning: ReasoningTokens | None = None, **_: Any) -> list[float | None]:
    """Length penalty over the tool-call segments' reasoning; None when the turn called no tool, or when
    `reasoning` is off."""
    return _reasoning_penalties("tool", segments, completion_ids, segment_ids, reasoning)


@register_reward("reply_reasoning_length", "reply")
def reply_reasoning_length(prompts: list, completions: list, completion_ids: list | None = None, *,
                           segments: Sequence[Sequence[Mapping[str, Any]]], segment_ids: list | None = None,
                           reasoning: ReasoningTokens | None = None, **_: Any) -> list[float | None]:
    """Length penalty over the reply segments' reasoning; None when no reply was generated, or when `reasoning`
    is off."""
    return _reasoning_penalties("reply", segments, completion_ids, segment_ids, reasoning)


def stage_rewards(names: Sequence[str], *, reasoning: ReasoningTokens) -> list[RewardFunction]:
    """An RL stage's reward functions by name, the reasoning-length ones counting with `reasoning` (TRL names a
    `functools.partial` by the function it wraps)."""
    return [functools.partial(reward_function(name), reasoning=reasoning) if name in REASONING_REWARDS
            else reward_function(name) for name in names]


DEFAULT_REWARDS = ("accuracy", "effectiveness", "tool_rationality", "skill_selection", "tool_reasoning_length",
                   "reply_reasoning_length")
