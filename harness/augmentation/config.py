"""Knobs of Harness-State Augmentation (HSA): how often each dimension fires and how hard it pushes.

A dimension fires with its own probability; inside a firing dimension every
candidate sub-operation (one skill to rename, one block to reorder, …) is
rolled with its sub-operation probability, and when none is rolled one
candidate is forced, so a fired dimension always changes the spec when it can.
Every field is plain data (frozen, hashable), so a config can be logged next
to the seed and replayed exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

DIMENSIONS = ("skill_identifiers", "skill_content", "tool_definitions", "system_prompt", "hooks")
RENAME_STYLES = ("synonym", "affix", "opaque", "separator", "vocabulary", "code", "mixed", "collide")
# Styles whose names say nothing of the module (names.py): the held-out ablation found that names kept
# close to the originals let a model choose by name, so they are most of the default draw.
MEANINGLESS_STYLES = ("opaque", "vocabulary", "code", "mixed", "collide")


def _knob(default: Any, help: str) -> Any:
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class HsaConfig:
    """How to augment a HarnessSpec. See docs in `help()` for each field."""

    seed: int = _knob(0, "Base seed, combined with the seed passed to augment(); change it to draw a new family.")

    # Per-dimension probabilities ----------------------------------------------------------------
    skill_identifiers: float = _knob(0.5, "P(dimension 1): noise skills, renames, description rewrites and masks.")
    skill_content: float = _knob(0.5, "P(dimension 2): skill bodies paraphrased, masked (low-importance lines "
                                       "dropped) or their rules reordered.")
    tool_definitions: float = _knob(0.5, "P(dimension 3): tools renamed (every reference follows) and "
                                          "descriptions rewritten.")
    system_prompt: float = _knob(0.5, "P(dimension 4): blocks reordered within their cache tier, bullet items "
                                       "reordered, numeric limits perturbed.")
    hooks: float = _knob(0.5, "P(dimension 5): retry budgets, feedback-message structure, length hooks switched "
                               "between rewrite and retry_with_feedback.")
    at_least_one: bool = _knob(True, "When no dimension fires by chance, force one (weighted by the probabilities "
                                     "above), so an augmentation is never the identity unless all are 0.")

    # (1) skill identifiers -----------------------------------------------------------------------
    noise_skills_p: float = _knob(0.5, "P(add noise skills): plausible but irrelevant reply/strategy skills.")
    max_noise_skills: int = _knob(3, "At most this many noise skills (1..max drawn uniformly).")
    opaque_noise_names_p: float = _knob(0.0, "P(meaningless name) per noise skill: named in one of the meaningless "
                                             "styles, as renamed skills are, instead of a name of its own topic. "
                                             "Otherwise an unfamiliar name only ever marks a real skill, and a "
                                             "model learns to load a skill it has never seen (the late-skill "
                                             "ablation, docs/harness-reading-notes.md). Off by default: the shipped "
                                             "default and the harness-reading study were trained without it.")
    rename_skill_p: float = _knob(0.6, "P(rename) per skill; hooks, prompts, bodies and cases follow the mapping. "
                                       "The catalogue lists skills by name, so renames also reorder it.")
    rewrite_skill_description_p: float = _knob(0.6, "P(rewrite description) per skill: deterministic paraphrase "
                                                     "plus a sentence template.")
    mask_skill_description_p: float = _knob(0.2, "P(mask description) per skill: keep only what the skill does, "
                                                  "drop its 'Use when …' trigger examples. Never deletes a skill.")
    drop_skill_p: float = _knob(0.0, "P(drop) per strategy skill that nothing references and that is not protected. "
                                     "Off by default: deletion is only safe when no ground truth needs the skill.")
    protected_skills: tuple[str, ...] = _knob((), "Skills never dropped (e.g. every skill an eval set expects).")
    skill_rename_styles: tuple[str, ...] = _knob(("synonym", "affix", *MEANINGLESS_STYLES),
                                                 "Styles new skill names are drawn from (uniformly): synonym tokens, "
                                                 "a prefix/suffix, an opaque code such as skill-417, words of a large "
                                                 "general vocabulary, a bare code, a word with a code, or words of "
                                                 "the harness's other names (harness/augmentation/names.py).")

    # (2) skill content ---------------------------------------------------------------------------
    paraphrase_p: float = _knob(0.5, "P(paraphrase body) per skill: synonym substitutions, heading and list-marker "
                                     "templates. Numbers, quotes, names and negations are never touched.")
    paraphrase_rate: float = _knob(0.6, "P(substitute) per paraphrasable phrase occurrence (all text paraphrases).")
    mask_lines_p: float = _knob(0.3, "P(mask) per skill: drop low-importance list items (examples, style notes).")
    max_masked_lines: int = _knob(2, "At most this many items dropped per skill (never more than a third of a list).")
    reorder_rules_p: float = _knob(0.4, "P(reorder) per skill: shuffle top-level rules; sequencing rules stay put.")

    # (3) tool definitions ------------------------------------------------------------------------
    rename_tool_p: float = _knob(0.6, "P(rename) per tool; hook matchers, allowed-tools, CEL literals and every "
                                      "mention follow. Tools are listed by name, so renames also reorder them.")
    rewrite_tool_description_p: float = _knob(0.6, "P(rewrite) per tool: paraphrase of the description and of "
                                                    "parameter descriptions, later sentences reordered.")
    tool_rename_styles: tuple[str, ...] = _knob(("synonym", "affix", "separator", *MEANINGLESS_STYLES),
                                                "Styles new tool names are drawn from; 'separator' writes "
                                                "snake_case as kebab-case; the others as for skills.")

    # (4) system prompt ---------------------------------------------------------------------------
    reorder_blocks_p: float = _knob(0.5, "P(reorder blocks within each cache tier); tier order stays valid.")
    pin_first_block: bool = _knob(True, "Keep the first block (the persona, usually) first.")
    reorder_items_p: float = _knob(0.4, "P(reorder bullet items) per prompt block.")
    perturb_settings_p: float = _knob(0.5, "P(perturb) per numeric limit: reply_max_chars, max_turns, "
                                           "max_hook_retries. The mapping records old → new.")
    reply_max_chars_scale: tuple[float, float] = _knob((0.7, 1.5), "reply_max_chars × U(lo, hi), rounded to 10, "
                                                                   "kept ≥ the fallback reply and in 10..2000.")
    max_turns_delta: tuple[int, int] = _knob((-1, 3), "max_turns + d, d in [lo, hi] (≠ 0), kept in 1..16.")
    max_turns_floor: int = _knob(3, "max_turns never drops below min(this, original): tool, skill, reply.")
    max_hook_retries_range: tuple[int, int] = _knob((1, 3), "settings.max_hook_retries drawn from [lo, hi] ⊂ 0..5.")

    # (5) hooks -----------------------------------------------------------------------------------
    hook_retries_p: float = _knob(0.5, "P(new max_retries) per retry_with_feedback hook.")
    hook_retries_range: tuple[int, int] = _knob((1, 3), "Hook max_retries drawn from [lo, hi] ⊂ 1..5.")
    hook_message_p: float = _knob(0.5, "P(rephrase/restructure) per model-facing message (retry_with_feedback, "
                                       "deny). Viewer-facing fallback messages are never touched.")
    switch_length_action_p: float = _knob(0.3, "P(switch) per reply length hook: rewrite (truncate) ↔ "
                                               "retry_with_feedback (ask the model to shorten).")

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type == "float" and not (isinstance(value, (int, float)) and 0.0 <= value <= 1.0):
                raise ValueError(f"HsaConfig.{f.name} must be a probability in [0, 1], not {value!r}")
        for name in ("skill_rename_styles", "tool_rename_styles", "protected_skills", "reply_max_chars_scale",
                     "max_turns_delta", "max_hook_retries_range", "hook_retries_range"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        for name in ("skill_rename_styles", "tool_rename_styles"):
            styles = getattr(self, name)
            if not styles or set(styles) - set(RENAME_STYLES):
                raise ValueError(f"HsaConfig.{name} must be a non-empty subset of {RENAME_STYLES}")
        if self.max_noise_skills < 1:
            raise ValueError("HsaConfig.max_noise_skills must be at least 1")
        if self.max_masked_lines < 1:
            raise ValueError("HsaConfig.max_masked_lines must be at least 1")
        _check_range("reply_max_chars_scale", self.reply_max_chars_scale, 0.05, 20.0)
        _check_range("max_turns_delta", self.max_turns_delta, -15, 15)
        _check_range("max_hook_retries_range", self.max_hook_retries_range, 0, 5)
        _check_range("hook_retries_range", self.hook_retries_range, 1, 5)
        if not 1 <= self.max_turns_floor <= 16:
            raise ValueError("HsaConfig.max_turns_floor must be in 1..16")

    def probability(self, dimension: str) -> float:
        return getattr(self, dimension)

    @classmethod
    def help(cls) -> dict[str, str]:
        """Field name → help text, for the console and CLI."""
        return {f.name: f.metadata["help"] for f in fields(cls)}

    @classmethod
    def only(cls, *dimensions: str, **overrides: Any) -> HsaConfig:
        """A config where exactly `dimensions` fire (probability 1) and the others never do."""
        unknown = set(dimensions) - set(DIMENSIONS)
        if unknown:
            raise ValueError(f"unknown dimensions {', '.join(sorted(unknown))}; use {', '.join(DIMENSIONS)}")
        chosen = {d: 1.0 if d in dimensions else 0.0 for d in DIMENSIONS}
        return cls(**(chosen | overrides))


def _check_range(name: str, value: tuple[Any, Any], low: float, high: float) -> None:
    if (not isinstance(value, tuple) or len(value) != 2 or not low <= value[0] <= value[1] <= high):
        raise ValueError(f"HsaConfig.{name} must be a (lo, hi) pair with {low} <= lo <= hi <= {high}, not {value!r}")
