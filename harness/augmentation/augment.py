"""Harness-State Augmentation: seeded, task-preserving variants of a HarnessSpec along five dimensions.

    aug = augment(spec, HsaConfig(), seed=7)
    aug.spec                      # a valid HarnessSpec (checked: augment raises otherwise)
    aug.mapping.rewrite_case(c)   # ground truth in the augmented harness's names

The dimensions (HAT report, "Harness-State Augmentation"):

1. skill identifiers - noise skills added, skills renamed, descriptions rewritten or masked;
2. skill content     - bodies paraphrased, low-importance items masked, rules reordered;
3. tool definitions  - tools renamed, descriptions rewritten;
4. system prompt     - blocks reordered inside their cache tier, bullet items reordered, limits perturbed;
5. hooks             - retry budgets, feedback-message structure, length hooks rewrite ↔ retry.

Task preservation: no skill an eval case can expect is ever deleted (masking
shortens descriptions; only opt-in, unreferenced, unprotected strategy skills
may be dropped); every rename is applied to every reference (allowed-tools,
hook matchers, CEL string literals, regex and JSON-Schema literals, hook
messages, prompt blocks, skill and tool texts); numbers, negations, quoted
examples and `{{ tags }}` are never paraphrased; settings stay in their valid
ranges and tier order stays valid. The result is validated before it is
returned. Each dimension draws from its own seeded stream, so enabling one
dimension never changes what another does.
"""

from __future__ import annotations

import dataclasses
import math
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from harness.augmentation.config import DIMENSIONS, MEANINGLESS_STYLES, HsaConfig
from harness.augmentation.mapping import HsaMapping, HsaOperation
from harness.augmentation.names import fresh_name, fresh_variant
from harness.augmentation.noise import BANK
from harness.augmentation.text import (
    can_reorder,
    droppable_count,
    map_json_strings,
    mask_items,
    mentions,
    paraphrase,
    rename_identifiers,
    rename_in_cel,
    rename_in_json,
    reorder_lists,
    restyle_markdown,
    shuffle_enumerations,
    split_sentences,
)
from harness.spec import (
    HarnessSpec,
    Hook,
    PromptBlock,
    Settings,
    Skill,
    SpecError,
    SpecInvalid,
    Tool,
    validate,
)
from harness.spec.model import BUILTIN_TOOLS, CACHE_TIERS
from harness.spec.template import render_template
from harness.spec.validate import MAX_DESCRIPTION_CHARS, SETTINGS_RANGES

if TYPE_CHECKING:
    from harness.simulator.cases import Case

VERSION = "hsa/v1"
# Usage sentences ("Use when …", "Call this before …"): independent of the sentences around them.
_TRIGGER = re.compile(r"^(Use|Load|Pick|Choose|Apply|Call this|Invoke this)\b")


class AugmentationError(Exception):
    """An augmentation produced an invalid spec (a bug: every transform is meant to be valid by construction)."""

    def __init__(self, errors: list[SpecError], operations: tuple[HsaOperation, ...]):
        self.errors, self.operations = tuple(errors), operations
        lines = "\n".join(f"  {error}" for error in errors)
        super().__init__(f"augmentation produced an invalid spec:\n{lines}")


@dataclass(frozen=True)
class Augmentation:
    """An augmented spec, the original it came from, and the mapping between them."""

    __hash__ = None  # type: ignore[assignment]  # the mapping holds dicts

    spec: HarnessSpec
    mapping: HsaMapping
    original: HarnessSpec = field(repr=False)

    def rewrite_case(self, case: Case) -> Case:
        return self.mapping.rewrite_case(case)

    def rewrite_trajectory(self, messages: list[dict[str, Any]], *, system: str | None = None
                           ) -> list[dict[str, Any]]:
        return self.mapping.rewrite_trajectory(messages, system=system)


def augment(spec: HarnessSpec, config: HsaConfig | None = None, seed: int = 0) -> Augmentation:
    """A task-preserving variant of `spec`; deterministic in (spec, config, seed).

    Raises SpecInvalid when `spec` itself is invalid, AugmentationError if a
    transform ever produced an invalid spec (a bug; never silently returned).
    """
    config = config or HsaConfig()
    if errors := _input_errors(spec):
        raise SpecInvalid(errors)  # augmenting an invalid harness is the caller's bug
    base = f"{VERSION}:{config.seed}:{seed}"
    state = _State.of(spec, config)
    for dimension in _dimensions(config, random.Random(f"{base}:dimensions")):
        _APPLY[dimension](state, config, random.Random(f"{base}:{dimension}"))
    augmented = state.build()
    if errors := validate(augmented):
        raise AugmentationError(errors, tuple(state.operations))
    return Augmentation(spec=augmented, mapping=state.mapping(augmented, seed), original=spec)


@lru_cache(maxsize=32)
def _input_errors(spec: HarnessSpec) -> tuple[SpecError, ...]:
    """validate() of a source spec, once per content (a training loop augments one spec many times)."""
    return tuple(validate(spec))


def _dimensions(config: HsaConfig, rng: random.Random) -> list[str]:
    active = [d for d in DIMENSIONS if rng.random() < config.probability(d)]
    weights = [config.probability(d) for d in DIMENSIONS]
    if not active and config.at_least_one and sum(weights) > 0:
        active = [rng.choices(DIMENSIONS, weights)[0]]
    return active


def _select(rng: random.Random, candidates: list[tuple[str, str, float]]) -> list[tuple[str, str]]:
    """Roll every (op, target, p); when none is rolled, force one candidate with p > 0."""
    chosen = [(op, target) for op, target, p in candidates if rng.random() < p]
    if not chosen:
        possible = [(op, target) for op, target, p in candidates if p > 0]
        if possible:
            chosen = [rng.choice(possible)]
    return chosen


# The working copy ---------------------------------------------------------------------------------


@dataclass
class _State:
    source: HarnessSpec
    config: HsaConfig
    skills: dict[str, Skill]   # original name → current module (renames are applied in build())
    tools: dict[str, Tool]
    hooks: dict[str, Hook]
    prompt: list[PromptBlock]
    settings: Settings
    noise: list[Skill] = field(default_factory=list)
    skill_renames: dict[str, str] = field(default_factory=dict)
    tool_renames: dict[str, str] = field(default_factory=dict)
    dropped: list[str] = field(default_factory=list)
    masked: list[str] = field(default_factory=list)
    settings_changed: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    operations: list[HsaOperation] = field(default_factory=list)
    taken: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, spec: HarnessSpec, config: HsaConfig) -> _State:
        state = cls(source=spec, config=config, skills={s.name: s for s in spec.skills},
                    tools={t.name: t for t in spec.tools}, hooks={h.name: h for h in spec.hooks},
                    prompt=list(spec.prompt), settings=spec.settings)
        state.taken = set(state.skills) | set(state.tools) | set(BUILTIN_TOOLS)
        return state

    @property
    def module_names(self) -> frozenset[str]:
        return frozenset(self.skills) | frozenset(self.tools) | frozenset(BUILTIN_TOOLS)

    def record(self, dimension: str, op: str, target: str, detail: str = "") -> None:
        self.operations.append(HsaOperation(dimension, op, target, detail))

    def texts(self, *, except_skill: str | None = None) -> Iterator[str]:
        """Every model-visible text of the current state (to find references)."""
        for name, skill in self.skills.items():
            if name != except_skill:
                yield skill.description
                yield skill.body
        for tool in self.tools.values():
            yield tool.description
        for hook in self.hooks.values():
            yield hook.message
            yield hook.condition.expr
            yield hook.condition.pattern
        for block in self.prompt:
            yield block.template

    def build(self) -> HarnessSpec:
        names = {**self.skill_renames, **self.tool_renames}

        def rename(text: str) -> str:
            return rename_identifiers(text, names)

        skills = [
            dataclasses.replace(
                skill, name=self.skill_renames.get(old, old), description=rename(skill.description),
                body=rename(skill.body), allowed_tools=tuple(self.tool_renames.get(t, t) for t in skill.allowed_tools))
            for old, skill in self.skills.items() if old not in self.dropped
        ]
        tools = [dataclasses.replace(tool, name=self.tool_renames.get(old, old), description=rename(tool.description),
                                     parameters=rename_in_json(tool.parameters, names))
                 for old, tool in self.tools.items()]
        hooks = [_rename_hook(hook, names, self.tool_renames) for hook in self.hooks.values()]
        prompt = [dataclasses.replace(block, template=rename(block.template)) for block in self.prompt]
        variables = {key: rename(value) if isinstance(value, str) else value
                     for key, value in self.source.variables.items()}
        return HarnessSpec(description=rename(self.source.description), settings=self.settings, variables=variables,
                           skills=(*skills, *self.noise), tools=tuple(tools), hooks=tuple(hooks), prompt=tuple(prompt))

    def mapping(self, augmented: HarnessSpec, seed: int) -> HsaMapping:
        source = self.source
        bodies = {}
        for skill in source.skills:
            if skill.name in self.dropped:
                continue
            new = self.skill_renames.get(skill.name, skill.name)
            if augmented.skill(new).body != skill.body:
                bodies[new] = augmented.skill(new).body
        old_constants = {**dataclasses.asdict(source.settings), **source.variables}
        new_constants = {**dataclasses.asdict(augmented.settings), **augmented.variables}
        messages = {}
        for hook in source.hooks:
            new_hook = augmented.hook(hook.name)
            if hook.message and new_hook.message:
                old, new = render_template(hook.message, old_constants), render_template(new_hook.message, new_constants)
                if old != new:
                    messages[old] = new
        return HsaMapping(
            seed=seed, source_hash=source.content_hash, skills=dict(self.skill_renames),
            tools=dict(self.tool_renames), settings=dict(self.settings_changed),
            noise_skills=tuple(s.name for s in self.noise),
            masked_skills=tuple(self.skill_renames.get(n, n) for n in self.masked if n not in self.dropped),
            dropped_skills=tuple(self.dropped), hook_messages=messages, skill_bodies=bodies,
            operations=tuple(self.operations),
        )


def _rename_hook(hook: Hook, names: dict[str, str], tools: dict[str, str]) -> Hook:
    matcher = hook.matcher if hook.matcher == "*" else "|".join(tools.get(t, t) for t in hook.matcher.split("|"))
    condition = hook.condition
    if condition.kind == "cel":
        condition = dataclasses.replace(condition, expr=rename_in_cel(condition.expr, names))
    elif condition.kind == "regex":
        condition = dataclasses.replace(condition, pattern=rename_identifiers(condition.pattern, names))
    elif condition.kind == "json_schema" and condition.schema is not None:
        condition = dataclasses.replace(condition, schema=rename_in_json(dict(condition.schema), names))
    rewrite = hook.rewrite
    if rewrite is not None:
        rewrite = {key: rename_identifiers(value, names) if isinstance(value, str) else value
                   for key, value in rewrite.items()}
    return dataclasses.replace(hook, matcher=matcher, condition=condition,
                               message=rename_identifiers(hook.message, names), rewrite=rewrite)


# (1) skill identifiers ----------------------------------------------------------------------------


def _skill_identifiers(state: _State, config: HsaConfig, rng: random.Random) -> None:
    dim = "skill_identifiers"
    candidates: list[tuple[str, str, float]] = [("add_noise", "", config.noise_skills_p)]
    for name in sorted(state.skills):
        description = state.skills[name].description
        candidates.append(("rename", name, config.rename_skill_p))
        if mask_description(description) is not None:
            candidates.append(("mask_description", name, config.mask_skill_description_p))
        candidates.append(("rewrite_description", name, config.rewrite_skill_description_p))
        if _droppable_skill(state, name):
            candidates.append(("drop", name, config.drop_skill_p))
    chosen = _select(rng, candidates)
    drops = {target for op, target in chosen if op == "drop"}
    for op, target in chosen:
        if target in drops and op != "drop":
            continue
        if op == "add_noise":
            _add_noise(state, config, rng)
        elif op == "rename":
            new = fresh_name(target, "skill", config.skill_rename_styles, rng, state.taken)
            state.skill_renames[target] = new
            state.record(dim, "rename", target, f"{target} -> {new}")
        elif op == "mask_description":
            skill = state.skills[target]
            masked = mask_description(skill.description)
            state.skills[target] = dataclasses.replace(skill, description=masked)
            state.masked.append(target)
            state.record(dim, "mask_description", target, masked)
        elif op == "rewrite_description":
            skill = state.skills[target]
            rewritten = rewrite_description(skill.description, rng, config.paraphrase_rate)
            if rewritten != skill.description:
                state.skills[target] = dataclasses.replace(skill, description=rewritten)
                state.record(dim, "rewrite_description", target, rewritten)
        elif op == "drop":
            state.dropped.append(target)
            state.record(dim, "drop", target, "unreferenced strategy skill removed")


def _add_noise(state: _State, config: HsaConfig, rng: random.Random) -> None:
    count = rng.randint(1, min(config.max_noise_skills, len(BANK)))
    for template in rng.sample(BANK, count):
        # Drawn only when on, so a config without it augments exactly as before (seeded, replayable).
        if config.opaque_noise_names_p and rng.random() < config.opaque_noise_names_p:
            name = fresh_name(template.names[0], "skill", MEANINGLESS_STYLES, rng, state.taken)
        else:
            name = fresh_variant(template.names, "skill", rng, state.taken)
        description = rewrite_description(template.description, rng, config.paraphrase_rate) \
            if rng.random() < 0.5 else template.description
        state.noise.append(Skill(name=name, description=description, kind=template.kind, body=template.body()))
        state.record("skill_identifiers", "add_noise", name, template.kind)


def _droppable_skill(state: _State, name: str) -> bool:
    skill = state.skills[name]
    if skill.kind != "strategy" or name in state.config.protected_skills:
        return False
    return not any(mentions(text, name) for text in state.texts(except_skill=name))


def mask_description(description: str) -> str | None:
    """What the skill does, without its trigger examples ('Use when …'); None when nothing would change."""
    what = [s for s in split_sentences(description) if not _TRIGGER.match(s)]
    if not what:
        return None
    first = what[0]
    cut = re.split(r"\s+-\s+|:\s+", first, maxsplit=1)[0].rstrip(" ,;.")
    if len(cut) >= 24 and cut != first.rstrip("."):
        first = cut + "."
    return first if first != description else None


# Frames for the sentence that says what a module does, and for its usage sentences. With the phrase
# substitutions (text.PHRASES) and the shuffled enumerations they make a rewritten description rarely the
# same twice (benchmarks/hsa_names.py counts how rarely), so a model cannot learn descriptions by heart.
_WHAT_FRAMES = ("{s}", "Purpose: {s}", "What it does: {s}", "In short: {s}", "Role: {s}", "Summary: {s}",
                "Scope: {s}", "Description: {s}", "About: {s}", "Function: {s}", "Overview: {s}", "Task: {s}",
                "Job: {s}", "Area: {s}", "Duty: {s}")
_TRIGGER_FRAMES = ("{t}", "Usage: {t}", "When to use: {t}", "Trigger: {t}", "Tip: {t}")


def rewrite_description(description: str, rng: random.Random, rate: float) -> str:
    """A deterministic paraphrase: enumerations shuffled, phrase substitutions, a framed first sentence and
    framed usage sentences, usage first or last."""
    text = paraphrase(shuffle_enumerations(description, rng), rng, rate)
    sentences = split_sentences(text)
    triggers = [rng.choice(_TRIGGER_FRAMES).format(t=s) for s in sentences if _TRIGGER.match(s)]
    what = [s for s in sentences if not _TRIGGER.match(s)]
    if what:
        what[0] = rng.choice(_WHAT_FRAMES).format(s=what[0])
    sentences = [*triggers, *what] if triggers and what and rng.random() < 0.5 else [*what, *triggers]
    rewritten = " ".join(sentences)
    if rewritten == description:
        rewritten = f"Purpose: {description}"
    return rewritten if len(rewritten) <= MAX_DESCRIPTION_CHARS else description


# (2) skill content --------------------------------------------------------------------------------


def _skill_content(state: _State, config: HsaConfig, rng: random.Random) -> None:
    dim = "skill_content"
    names = state.module_names
    candidates: list[tuple[str, str, float]] = []
    for name in sorted(state.skills):
        if name in state.dropped:
            continue
        body = state.skills[name].body
        candidates.append(("paraphrase", name, config.paraphrase_p))
        if droppable_count(body, names):
            candidates.append(("mask_lines", name, config.mask_lines_p))
        if can_reorder(body):
            candidates.append(("reorder_rules", name, config.reorder_rules_p))
    chosen = _select(rng, candidates)
    for op in ("mask_lines", "reorder_rules", "paraphrase"):  # masking first: it looks at the original items
        for target in [t for o, t in chosen if o == op]:
            skill = state.skills[target]
            detail = ""
            if op == "mask_lines":
                body, removed = mask_items(skill.body, rng, config.max_masked_lines, names)
                detail = f"dropped {len(removed)} item(s): " + " | ".join(r.strip()[:60] for r in removed)
            elif op == "reorder_rules":
                body = reorder_lists(skill.body, rng)
            else:
                body = restyle_markdown(paraphrase(skill.body, rng, config.paraphrase_rate), rng)
            if body.strip() and body != skill.body:
                state.skills[target] = dataclasses.replace(skill, body=body)
                state.record(dim, op, target, detail)


# (3) tool definitions -----------------------------------------------------------------------------


def _tool_definitions(state: _State, config: HsaConfig, rng: random.Random) -> None:
    dim = "tool_definitions"
    candidates: list[tuple[str, str, float]] = []
    for name in sorted(state.tools):
        if name in state.skills:  # a tool and a skill sharing a name: text mentions would be ambiguous
            continue
        candidates.append(("rename", name, config.rename_tool_p))
        candidates.append(("rewrite_description", name, config.rewrite_tool_description_p))
    for op, target in _select(rng, candidates):
        tool = state.tools[target]
        if op == "rename":
            new = fresh_name(target, "tool", config.tool_rename_styles, rng, state.taken)
            state.tool_renames[target] = new
            state.record(dim, "rename", target, f"{target} -> {new}")
            continue
        description = rewrite_description(tool.description, rng, config.paraphrase_rate)

        def param_text(key: str, text: str) -> str:
            return paraphrase(text, rng, config.paraphrase_rate) if key == "description" else text

        parameters = map_json_strings(tool.parameters, param_text)
        if description != tool.description or parameters != tool.parameters:
            state.tools[target] = dataclasses.replace(tool, description=description, parameters=parameters)
            state.record(dim, "rewrite_description", target, description)


# (4) system prompt --------------------------------------------------------------------------------

_LIMIT_UNITS = {
    "reply_max_chars": r"\s*(?:characters|chars)\b",
    "max_turns": r"\s+(?:model\s+)?(?:turns|calls)\b",
    "max_hook_retries": r"\s+(?:retries|retry rounds|feedback rounds)\b",
}


def _system_prompt(state: _State, config: HsaConfig, rng: random.Random) -> None:
    dim = "system_prompt"
    candidates: list[tuple[str, str, float]] = []
    if _movable_tiers(state.prompt, config.pin_first_block):
        candidates.append(("reorder_blocks", "prompt", config.reorder_blocks_p))
    for block in state.prompt:
        if can_reorder(block.template):
            candidates.append(("reorder_items", block.name, config.reorder_items_p))
    for name in ("reply_max_chars", "max_turns", "max_hook_retries"):
        if _limit_choices(state, config, name):
            candidates.append(("perturb", name, config.perturb_settings_p))
    for op, target in _select(rng, candidates):
        if op == "reorder_blocks":
            _reorder_blocks(state, config, rng)
        elif op == "reorder_items":
            index = next(i for i, b in enumerate(state.prompt) if b.name == target)
            block = state.prompt[index]
            template = reorder_lists(block.template, rng)
            if template != block.template:
                state.prompt[index] = dataclasses.replace(block, template=template)
                state.record(dim, "reorder_items", target)
        else:
            _perturb(state, config, rng, target)


def _movable_tiers(prompt: list[PromptBlock], pin_first: bool) -> dict[str, list[int]]:
    """Tier → indices of blocks that may trade places (2+ per tier)."""
    tiers: dict[str, list[int]] = {}
    for index, block in enumerate(prompt):
        if pin_first and index == 0:
            continue
        tiers.setdefault(block.cache_tier, []).append(index)
    return {tier: indices for tier, indices in tiers.items() if len(indices) >= 2}


def _reorder_blocks(state: _State, config: HsaConfig, rng: random.Random) -> None:
    blocks = state.prompt
    new = blocks[:]
    for _tier, indices in sorted(_movable_tiers(blocks, config.pin_first_block).items()):
        order = indices[:]
        for _ in range(8):
            rng.shuffle(order)
            if order != indices:
                break
        for slot, source in zip(indices, order, strict=True):  # block `source` takes slot's NN
            new[slot] = dataclasses.replace(blocks[source], order=blocks[slot].order)
    new.sort(key=lambda b: (b.order, b.name))
    tiers = [CACHE_TIERS.index(b.cache_tier) for b in new]
    if tiers != sorted(tiers) or [b.name for b in new] == [b.name for b in blocks]:
        return  # duplicate NNs could break tier order: leave the prompt as it is
    state.prompt = new
    state.record("system_prompt", "reorder_blocks", "prompt", " ".join(f"{b.order:02d}-{b.name}" for b in new))


def _limit_choices(state: _State, config: HsaConfig, name: str) -> list[int]:
    old = getattr(state.settings, name)
    low, high = SETTINGS_RANGES[name]
    if name == "reply_max_chars":
        floor = max(int(low), len(state.settings.fallback_reply))
        lo, hi = old * config.reply_max_chars_scale[0], old * config.reply_max_chars_scale[1]
        values = list(range(math.ceil(lo / 10) * 10, math.floor(hi / 10) * 10 + 1, 10)) or [round(lo)]
        choices = [v for v in values if floor <= v <= high]
    elif name == "max_turns":
        floor = max(int(low), min(config.max_turns_floor, old))
        lo, hi = config.max_turns_delta
        choices = [old + d for d in range(lo, hi + 1) if floor <= old + d <= high]
    else:
        lo, hi = config.max_hook_retries_range
        choices = [v for v in range(lo, hi + 1) if low <= v <= high]
    return [v for v in choices if v != old and _length_hooks_ok(state, name, old, v)]


def _length_hooks_ok(state: _State, name: str, old: int, new: int) -> bool:
    """No length hook ends up with min > max once `name` is `new`."""
    values = {**dataclasses.asdict(state.settings), **state.source.variables, name: new}
    for hook in state.hooks.values():
        c = hook.condition
        if c.kind != "length":
            continue
        bound = [values.get(b) if isinstance(b, str) else b for b in (c.min, c.max)]
        if name == "reply_max_chars" and _is_reply_length(hook) and c.max == old:
            bound[1] = new
        if None not in bound and bound[0] > bound[1]:
            return False
    return True


def _is_reply_length(hook: Hook) -> bool:
    return hook.event == "reply" and hook.condition.kind == "length" and hook.condition.field == "reply"


def _perturb(state: _State, config: HsaConfig, rng: random.Random, name: str) -> None:
    old = getattr(state.settings, name)
    new = rng.choice(_limit_choices(state, config, name))
    state.settings = dataclasses.replace(state.settings, **{name: new})
    state.settings_changed[name] = (old, new)
    # Literal mentions of the old limit ("at most 150 characters", a `length` hook's max: 150) follow it.
    pattern = re.compile(rf"(?<![\d.]){old}(?={_LIMIT_UNITS[name]})")
    state.prompt = [dataclasses.replace(b, template=pattern.sub(str(new), b.template)) for b in state.prompt]
    state.skills = {n: dataclasses.replace(s, body=pattern.sub(str(new), s.body)) for n, s in state.skills.items()}
    for hook_name, hook in list(state.hooks.items()):
        updated = dataclasses.replace(hook, message=pattern.sub(str(new), hook.message))
        if name == "reply_max_chars" and _is_reply_length(hook) and hook.condition.max == old:
            updated = dataclasses.replace(updated, condition=dataclasses.replace(hook.condition, max=new))
        state.hooks[hook_name] = updated
    state.record("system_prompt", "perturb", name, f"{old} -> {new}")


# (5) hooks ----------------------------------------------------------------------------------------

_FEEDBACK_PREFIXES = ("Check failed: ", "Harness check: ", "Please fix this: ", "Correction needed: ")
_DENY_PREFIXES = ("Denied: ", "Not allowed: ", "Call rejected: ")
_LENGTH_FEEDBACK = (
    "Your reply is longer than {bound} characters. Shorten it to one or two sentences and keep the key facts.",
    "Too long: keep the reply within {bound} characters without dropping the facts the viewer asked for.",
    "Rewrite the reply in at most {bound} characters; keep every fact it states.",
)
MODEL_FACING = ("retry_with_feedback", "deny")


def _hooks(state: _State, config: HsaConfig, rng: random.Random) -> None:
    dim = "hooks"
    retry_range = [v for v in range(config.hook_retries_range[0], config.hook_retries_range[1] + 1) if 1 <= v <= 5]
    candidates: list[tuple[str, str, float]] = []
    for name in sorted(state.hooks):
        hook = state.hooks[name]
        if hook.action == "retry_with_feedback" and [v for v in retry_range if v != hook.max_retries]:
            candidates.append(("retries", name, config.hook_retries_p))
        if hook.message and hook.action in MODEL_FACING:
            candidates.append(("message", name, config.hook_message_p))
        if _switchable(hook):
            candidates.append(("switch_action", name, config.switch_length_action_p))
    chosen = _select(rng, candidates)
    switched = {target for op, target in chosen if op == "switch_action"}
    for op, target in chosen:
        hook = state.hooks[target]
        if target in switched and op != "switch_action":
            continue
        if op == "retries":
            value = rng.choice([v for v in retry_range if v != hook.max_retries])
            state.hooks[target] = dataclasses.replace(hook, max_retries=value)
            state.record(dim, "retries", target, f"{hook.max_retries} -> {value}")
        elif op == "message":
            message = restructure_message(hook.message, hook.action, rng, config.paraphrase_rate)
            if message != hook.message:
                state.hooks[target] = dataclasses.replace(hook, message=message)
                state.record(dim, "message", target, message)
        else:
            state.hooks[target] = switched_hook = _switch(hook, rng, retry_range)
            state.record(dim, "switch_action", target, f"{hook.action} -> {switched_hook.action}")


def _switchable(hook: Hook) -> bool:
    c = hook.condition
    return (_is_reply_length(hook) and hook.rewrite is None and c.max is not None and not c.min
            and hook.action in ("rewrite", "retry_with_feedback"))


def _switch(hook: Hook, rng: random.Random, retry_range: list[int]) -> Hook:
    if hook.action == "retry_with_feedback":
        return dataclasses.replace(hook, action="rewrite", message="", max_retries=0)
    bound = hook.condition.max
    bound_text = f"{{{{ {bound} }}}}" if isinstance(bound, str) else str(bound)
    return dataclasses.replace(hook, action="retry_with_feedback", max_retries=rng.choice(retry_range or [1]),
                               message=rng.choice(_LENGTH_FEEDBACK).format(bound=bound_text))


def restructure_message(message: str, action: str, rng: random.Random, rate: float) -> str:
    """A model-facing hook message, paraphrased and put in one of a few structures; tags and numbers kept."""
    text = paraphrase(message, rng, rate)
    sentences = split_sentences(text)
    forms = ["plain", "prefix"] + (["issue_fix", "numbered"] if len(sentences) >= 2 else [])
    form = rng.choice(forms)
    if form == "prefix":
        prefixes = _FEEDBACK_PREFIXES if action == "retry_with_feedback" else _DENY_PREFIXES
        text = rng.choice(prefixes) + text
    elif form == "issue_fix":
        text = f"Issue: {sentences[0]} Fix: {' '.join(sentences[1:])}"
    elif form == "numbered":
        text = " ".join(f"({i}) {s}" for i, s in enumerate(sentences, start=1))
    if text == message:
        prefixes = _FEEDBACK_PREFIXES if action == "retry_with_feedback" else _DENY_PREFIXES
        text = rng.choice(prefixes) + message
    return text


_APPLY = {
    "skill_identifiers": _skill_identifiers,
    "skill_content": _skill_content,
    "tool_definitions": _tool_definitions,
    "system_prompt": _system_prompt,
    "hooks": _hooks,
}

__all__ = ["Augmentation", "AugmentationError", "augment", "mask_description", "restructure_message",
           "rewrite_description"]
