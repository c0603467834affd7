"""Held-out harness edits for the HAT reproduction: changes HSA never produces in training.

`heldout_variant(spec, case, seed)` gives one eval case its own edited harness (one variant per case:
with a single shared variant, "which skill do I load under these names" would be one decision
repeated n times). Every variant applies all four edits of the issue (`HELDOUT_KINDS`):

- **names outside HSA's banks**: every skill and tool is renamed from `SKILL_WORDS` / `TOOL_WORDS`,
  whose tokens appear nowhere in HSA's synonym table, affixes, opaque-code prefixes or noise-skill
  bank (`hsa_tokens()`; `check_banks_disjoint()` proves it and the test calls it);
- **a skill added after training**: `LATE_SKILLS`, reply skills for intents the room never sees, under
  a held-out name, so the catalogue holds an option no training harness had;
- **changed numeric limits** outside HSA's ranges (HSA scales `reply_max_chars` by 0.7-1.5 and moves
  `max_turns` by -1..+3: here the reply limit is 1.6-2× and `max_turns` is +4..+6);
- **reworded tool descriptions**: hand-written wordings (`TOOL_WORDINGS`) HSA's paraphraser does not
  produce.

The ground truth follows the renames (`HsaMapping.rewrite_case`), like HSA's own variants. The edit
is built with HSA's state machinery (`harness.augmentation.augment._State`) so that every reference
(hook matchers, CEL literals, allowed-tools, prompt text) follows a rename exactly as it does for HSA.

`kinds=` keeps a subset of the four edits (the ablation in `training.hat.ablation`: which edit costs a
model most). The random draws do not depend on it, so an edit of one kind is exactly that part of the
case's full edit.
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
import re
from dataclasses import dataclass

from harness.augmentation import HsaConfig, vocabulary
from harness.augmentation.augment import _State  # HSA's rename-everywhere builder (see module docstring)
from harness.augmentation.mapping import HsaMapping
from harness.augmentation.names import _AFFIXES, _OPAQUE, SYNONYMS
from harness.augmentation.noise import BANK
from harness.simulator.cases import Case
from harness.spec import HarnessSpec, Skill

# Word banks no HSA name is drawn from (check_banks_disjoint() enforces it).
SKILL_WORDS = (("amber", "cobalt", "juniper", "saffron", "tundra", "quartz", "harbor", "willow", "ember", "cedar"),
               ("desk", "lane", "bureau", "counter", "corner", "studio", "atelier", "booth", "window", "parlor"))
TOOL_WORDS = (("retrieve", "obtain", "consult", "inspect", "pull", "examine"),
              ("listing", "ledger", "record", "parcel", "bulletin", "register"))
TOOL_WORDINGS = {
    "get_product_info_by_link_id": ("Returns the catalogue record of a single item (by its link id): what it costs, "
                                    "any markdown, sizes and how many are left."),
    "get_order_status": "Reports where the asking viewer's purchase is, given its order number.",
    "get_promotion": "Tells which offer, if any, currently applies to an item identified by its link id.",
    "search_faq": "Finds the store rule that answers a general question, given a few words.",
}
LATE_SKILLS = (
    ("Explains the store's carbon-neutral shipping programme and packaging recycling.", "reply"),
    ("Handles questions about the host's personal life or schedule outside the stream.", "reply"),
    ("Answers questions about bulk gift cards and corporate gifting accounts.", "reply"),
)
HELDOUT_KINDS = ("names", "late_skill", "limits", "wording")
REPLY_LIMIT_SCALE = (1.6, 2.0)   # HSA: 0.7..1.5
MAX_TURNS_DELTA = (4, 6)         # HSA: -1..+3


@dataclass(frozen=True)
class HeldoutVariant:
    label: str            # "heldout:<seed>"
    spec: HarnessSpec
    case: Case            # the case in the variant's names
    mapping: HsaMapping
    late_skill: str


def _tokens(name: str) -> set[str]:
    return set(re.findall(r"[a-z]+", name.lower()))


def hsa_tokens() -> set[str]:
    """Every word an HSA-generated skill or tool name can be made of."""
    words: set[str] = set()
    for key, values in SYNONYMS.items():
        for item in (*key, *values):
            words |= _tokens(item)
    for prefixes, suffixes in _AFFIXES.values():
        for item in (*prefixes, *suffixes):
            words |= _tokens(item)
    for prefixes in _OPAQUE.values():
        for item in prefixes:
            words |= _tokens(item)
    for template in BANK:
        for item in template.names:
            words |= _tokens(item)
    # The general vocabulary and the codes of the meaningless styles (harness/augmentation/vocabulary.py).
    # `collide` names are made of the harness's own name tokens, which check_banks_disjoint(spec) covers.
    words.update(vocabulary.pseudo_words(), vocabulary.GENERAL_WORDS, vocabulary.code_tokens())
    return words


def heldout_tokens() -> set[str]:
    return {word for bank in (*SKILL_WORDS, *TOOL_WORDS) for word in bank}


def check_banks_disjoint(spec: HarnessSpec | None = None) -> None:
    """Raise when a held-out word could come out of HSA (or is already a word of the harness's names), or is
    not in HSA's reserve (`vocabulary.RESERVED`, the words HSA promises never to draw)."""
    outside = heldout_tokens() - vocabulary.RESERVED
    if outside:
        raise ValueError(f"held-out name words missing from harness.augmentation.vocabulary.RESERVED: {sorted(outside)}")
    clash = heldout_tokens() & hsa_tokens()
    if spec is not None:
        for module in (*spec.skills, *spec.tools):
            clash |= heldout_tokens() & _tokens(module.name)
    if clash:
        raise ValueError(f"held-out name words that HSA or the harness also uses: {sorted(clash)}")


def variant_seed(generator_seed: int, case_id: str) -> int:
    digest = hashlib.sha256(f"heldout:{generator_seed}:{case_id}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


def _fresh(rng: random.Random, banks: tuple[tuple[str, ...], ...], separator: str, taken: set[str]) -> str:
    while True:
        name = separator.join(rng.choice(bank) for bank in banks)
        if name not in taken:
            taken.add(name)
            return name


def heldout_variant(spec: HarnessSpec, case: Case, generator_seed: int,
                    kinds: tuple[str, ...] = HELDOUT_KINDS) -> HeldoutVariant:
    """The case's own held-out harness edit (module docstring), seeded by generator seed and case id; `kinds`
    chooses which of the four edits it applies (all by default)."""
    unknown = sorted(set(kinds) - set(HELDOUT_KINDS))
    if unknown or not kinds:
        raise ValueError(f"held-out edit kinds must be a non-empty subset of {', '.join(HELDOUT_KINDS)}; "
                         f"got {list(kinds)}")
    seed = variant_seed(generator_seed, case.case_id)
    rng = random.Random(seed)
    state = _State.of(spec, HsaConfig())
    taken = set(state.taken)
    # Every name is drawn whether or not it is used, so each kind's edit is the same in every subset.
    skill_names = {name: _fresh(rng, SKILL_WORDS, "-", taken) for name in sorted(state.skills)}
    tool_names = {name: _fresh(rng, TOOL_WORDS, "_" if "_" in name else "-", taken) for name in sorted(state.tools)}
    if "names" in kinds:
        for name, new in skill_names.items():
            state.skill_renames[name] = new
            state.record("heldout", "rename_skill", name, new)
        for name, new in tool_names.items():
            state.tool_renames[name] = new
            state.record("heldout", "rename_tool", name, new)
    if "wording" in kinds:
        for name in sorted(state.tools):
            if name in TOOL_WORDINGS:
                state.tools[name] = dataclasses.replace(state.tools[name], description=TOOL_WORDINGS[name])
                state.record("heldout", "reword_tool", name, TOOL_WORDINGS[name])
    description, kind = rng.choice(LATE_SKILLS)
    late = _fresh(rng, SKILL_WORDS, "-", taken)
    if "late_skill" in kinds:
        state.noise.append(Skill(name=late, description=description, kind=kind,
                                 body="Answer in one friendly sentence; no tool is needed."))
        state.record("heldout", "add_skill", late, description)
    settings = spec.settings
    reply_max = int(round(settings.reply_max_chars * rng.uniform(*REPLY_LIMIT_SCALE), -1))
    max_turns = min(16, settings.max_turns + rng.randint(*MAX_TURNS_DELTA))
    if "limits" in kinds:
        state.settings = dataclasses.replace(settings, reply_max_chars=reply_max, max_turns=max_turns)
        state.settings_changed["reply_max_chars"] = (settings.reply_max_chars, reply_max)
        state.settings_changed["max_turns"] = (settings.max_turns, max_turns)
    edited = state.build()
    mapping = state.mapping(edited, seed)
    label = f"heldout:{seed}" if set(kinds) == set(HELDOUT_KINDS) else f"heldout[{'+'.join(kinds)}]:{seed}"
    return HeldoutVariant(label=label, spec=edited, case=mapping.rewrite_case(case), mapping=mapping,
                          late_skill=late if "late_skill" in kinds else "")
