"""A large general vocabulary for HSA names, so that a model must choose a skill or tool by its description.

Names drawn from synonyms and affixes of the original words (`names.SYNONYMS`) let a model keep choosing by
name: the held-out ablation (docs/heldout-ablation.md) found renames to unseen words cost 23 points. Here
names come from words that say nothing about the module:

- `pseudo_words()`: pronounceable non-words built from syllables (onset + vowel + optional coda, then an
  open syllable): tens of thousands, generated, never downloaded;
- `GENERAL_WORDS`: real English words from outside shopping (nature, music, tools, weather …);
- `code()`: opaque codes of letters and digits with no kind prefix (`kx-41`, `r7t`), unlike the
  `opaque` style's `skill-417`.

`RESERVED` holds words HSA never draws: the held-out evaluation edits (training.hat.heldout) draw their
names from it, and the test proves every HSA name token stays outside it.
"""

from __future__ import annotations

import random
from functools import lru_cache

ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr", "gl", "kr", "pl",
          "st", "tr", "sk")
VOWELS = ("a", "e", "i", "o", "u")
CODAS = ("", "n", "r", "l", "s", "k", "m")

# Held-out words: never an HSA name token (see the module docstring). A superset of the banks of
# training.hat.heldout, so the evaluation can grow its banks without touching HSA.
RESERVED = frozenset({
    "amber", "cobalt", "juniper", "saffron", "tundra", "quartz", "harbor", "willow", "ember", "cedar",
    "desk", "lane", "bureau", "counter", "corner", "studio", "atelier", "booth", "window", "parlor",
    "retrieve", "obtain", "consult", "inspect", "pull", "examine",
    "listing", "ledger", "record", "parcel", "bulletin", "register",
    "birch", "maple", "onyx", "garnet", "kiosk", "gallery", "survey", "dossier", "archive", "manifest",
})

GENERAL_WORDS = tuple(word for word in (
    "acorn", "anchor", "anvil", "apricot", "arch", "aspen", "atlas", "aurora", "badger", "banjo", "barley",
    "basalt", "beacon", "bison", "bramble", "breeze", "brook", "bugle", "cactus", "canoe", "canyon", "cello",
    "chalk", "cinder", "clover", "comet", "compass", "coral", "cricket", "crystal", "cypress", "dahlia",
    "delta", "dune", "eagle", "echo", "falcon", "fern", "fjord", "flint", "fossil", "galaxy", "geyser",
    "glacier", "granite", "gravel", "harp", "hazel", "heron", "hickory", "horizon", "iris", "island", "ivory",
    "jackal", "jasmine", "kayak", "kestrel", "kettle", "lagoon", "lantern", "lark", "lava", "lichen", "lily",
    "lotus", "lynx", "magnet", "mango", "marble", "meadow", "meteor", "mint", "mistral", "monsoon", "moss",
    "nebula", "nectar", "nomad", "oak", "oasis", "ocelot", "olive", "orbit", "orchid", "otter", "owl",
    "paddle", "panda", "pebble", "pelican", "pepper", "piano", "pigeon", "pine", "planet", "plum", "pollen",
    "poppy", "prairie", "prism", "puffin", "quill", "raven", "reef", "ripple", "river", "robin", "rocket",
    "sable", "sage", "salmon", "sequoia", "shale", "sierra", "slate", "sparrow", "spruce", "squall", "summit",
    "swallow", "talon", "thistle", "thunder", "tide", "timber", "topaz", "trumpet", "tulip", "turtle",
    "valley", "velvet", "violet", "violin", "vortex", "walnut", "walrus", "wasp", "whistle", "wren", "yak",
    "zephyr", "zinnia", "basil", "bellow", "cobble", "drizzle", "fiddle", "glimmer", "hammock", "igloo",
    "jigsaw", "kite", "ladder", "mitten", "noodle", "oyster", "pinwheel", "quiver", "rudder", "saddle",
    "tambourine", "umbrella", "vessel", "wagon", "yarrow", "zither",
) if word not in RESERVED)

_CODE_LETTERS = "bcdfghjkmnpqrstvwxz"
# Generated strings that are words of the harness's own domain: a name made of them would say what it does.
_MEANINGFUL = frozenset({"sale", "sales", "deal", "code", "item", "info", "data", "fact", "help", "care", "cost",
                         "tone", "rule", "rate", "note", "size", "take", "make", "give", "sure", "mode", "tala",
                         "stock", "skill", "tool", "kit", "call", "sole", "dime", "pane", "menu", "tale"})


@lru_cache(maxsize=1)
def pseudo_words() -> tuple[str, ...]:
    """Every generated non-word (onset vowel coda + onset vowel), less the reserved ones, once each (ba+sta and
    bas+ta are one word), in a fixed order."""
    first = [o + v + c for o in ONSETS for v in VOWELS for c in CODAS]
    second = [o + v for o in ONSETS for v in VOWELS]
    words = dict.fromkeys(a + b for a in first for b in second)
    return tuple(word for word in words if word not in RESERVED and word not in _MEANINGFUL)


def vocabulary_size() -> int:
    return len(pseudo_words()) + len(GENERAL_WORDS)


def word(rng: random.Random) -> str:
    """One vocabulary word: a real general word a quarter of the time, else a pseudo-word."""
    if rng.random() < 0.25:
        return rng.choice(GENERAL_WORDS)
    return rng.choice(pseudo_words())


def code(rng: random.Random) -> str:
    """An opaque code: 1-3 consonants and 1-3 digits in one of a few layouts (kx41, kx-41, k7t)."""
    letters = "".join(rng.choice(_CODE_LETTERS) for _ in range(rng.randint(1, 3)))
    digits = str(rng.randrange(1, 1000))
    layout = rng.randrange(3)
    if layout == 0:
        return letters + digits
    if layout == 1:
        return f"{letters}-{digits}"
    return f"{letters[0]}{digits}{rng.choice(_CODE_LETTERS)}"


def code_tokens() -> frozenset[str]:
    """Every run of letters a code can contain (what `training.hat.heldout.hsa_tokens` must count)."""
    singles = set(_CODE_LETTERS)
    pairs = {a + b for a in _CODE_LETTERS for b in _CODE_LETTERS}
    triples = {a + b + c for a in _CODE_LETTERS for b in _CODE_LETTERS for c in _CODE_LETTERS}
    return frozenset(singles | pairs | triples)
