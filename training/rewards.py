"""HSA-RL reward functions, registered by name (TRL's reward-function signature).

Each function is `f(prompts, completions, completion_ids, **columns) -> list[float | None]`. The
rollout (`rl.py`) runs a whole agent turn through the runtime and adds three columns per completion:

- `trace`: the turn's `harnessops.trace/v1` trace (tool steps, loaded skills, outcome, reply);
- `case`: the case as `Case.to_dict()`, its ground truth in the names of the harness the turn ran
  under (an HSA variant's names when it was augmented);
- `segments`: one entry per model call, `{"kind": "tool" | "reply", "tokens": n, "reasoning_tokens": n}`
  (a call that produced tool calls is a tool-call segment, the others are reply segments).

`None` means "does not apply to this completion" (TRL turns it into NaN and leaves that function
out for that row), never "bad".

Rewards (HAT report, HSA-RL): Accuracy and Effectiveness from the reference judge; Tool Rationality;
Skill Selection; and a chain-of-thought length penalty per segment: 0 up to `LENGTH_FREE` (100)
reasoning tokens, falling linearly to `LENGTH_PENALTY` (-0.1) at `LENGTH_FULL` (200) and beyond,
averaged over the segment's model calls. `SEGMENT_OF` says which advantage group each reward feeds
(`rl.py`: tool-call tokens and reply tokens get separate advantages).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from evaluation.judges.reference import judge_reference, match_calls, parse_arguments, tool_steps
from harness.simulator.cases import Case

LENGTH_FREE, LENGTH_FULL, LENGTH_PENALTY = 100, 200, -0.1
LOAD_SKILL = "load_skill"

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


@register_reward("tool_reasoning_length", "tool")
def tool_reasoning_length(prompts: list, completions: list, completion_ids: list | None = None, *,
                          segments: Sequence[Sequence[Mapping[str, Any]]], **_: Any) -> list[float | None]:
    """Length penalty over the tool-call segments' reasoning; None when the turn called no tool."""
    return [_segment_penalty(s, "tool") for s in segments]


@register_reward("reply_reasoning_length", "reply")
def reply_reasoning_length(prompts: list, completions: list, completion_ids: list | None = None, *,
                           segments: Sequence[Sequence[Mapping[str, Any]]], **_: Any) -> list[float | None]:
    """Length penalty over the reply segments' reasoning; None when no reply was generated."""
    return [_segment_penalty(s, "reply") for s in segments]


DEFAULT_REWARDS = ("accuracy", "effectiveness", "tool_rationality", "skill_selection", "tool_reasoning_length",
                   "reply_reasoning_length")
