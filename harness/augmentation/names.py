"""New names for skills and tools: valid, fresh (never an existing or already-issued name), seeded.

Styles that keep the name's meaning: `synonym` swaps tokens for synonyms (product-qa → item-questions),
`affix` adds a neutral prefix or suffix (product-qa → product-qa-playbook), `separator` writes snake_case
as kebab-case (tools only). Styles that carry none, so a model must read descriptions, not names
(`vocabulary.py`): `opaque` issues a kind-prefixed code (skill-417); `vocabulary` one or two words of a
large general vocabulary (product-qa → lantern-kovira); `code` a bare code (kx-41); `mixed` a word with a
code or digits, in either order (r7t-pebble, tisela-3); `collide` words of the harness's *other* names,
so the name points at the wrong module (product-qa → faq-order) and only the description tells them apart.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence

from harness.augmentation import vocabulary
from harness.spec.validate import name_problem

# Token (or hyphen/underscore-joined token pair) → synonyms. Ambiguous tokens (order, return, sales
# on its own) are left out on purpose: "presentation order" is not a purchase.
SYNONYMS: dict[tuple[str, ...], tuple[str, ...]] = {
    ("after", "sales"): ("post-purchase", "aftercare", "post-sale"),
    ("follow", "up"): ("followup", "next-step"),
    ("product",): ("item", "goods", "merch"),
    ("products",): ("items", "goods", "catalogue"),
    ("qa",): ("questions", "answers", "info"),
    ("info",): ("details", "data", "facts"),
    ("casual",): ("small", "light", "social"),
    ("chat",): ("talk", "banter", "chitchat"),
    ("clarify",): ("clarifying", "disambiguate"),
    ("discount",): ("deal", "price-cut", "markdown"),
    ("discounts",): ("deals", "savings"),
    ("promotion",): ("promo", "offers", "deals"),
    ("promotions",): ("promos", "offers"),
    ("faq",): ("policy", "help", "helpdesk"),
    ("reply",): ("answer", "response"),
    ("answer",): ("reply", "response"),
    ("ground",): ("verify", "source", "anchor"),
    ("numbers",): ("figures", "facts"),
    ("multi",): ("mixed", "many"),
    ("intent",): ("request", "need"),
    ("triage",): ("routing", "split", "sorting"),
    ("presentation",): ("showcase", "display", "show"),
    ("get",): ("fetch", "lookup", "read", "query"),
    ("search",): ("find", "lookup", "query"),
    ("issue",): ("grant", "give", "create"),
    ("coupon",): ("voucher", "code"),
    ("adjust",): ("change", "update", "move"),
    ("status",): ("state", "progress", "tracking"),
    ("customer",): ("buyer", "shopper"),
    ("support",): ("help", "care"),
    ("shipping",): ("delivery",),
    ("delivery",): ("shipping",),
    ("price",): ("cost",),
    ("stock",): ("inventory",),
    ("check",): ("verify",),
    ("guide",): ("playbook",),
    ("rules",): ("policy",),
    ("lookup",): ("search", "find"),
}
_AFFIXES = {
    "skill": (("live", "room", "shop"), ("rules", "guide", "playbook", "kit", "v2", "skill")),
    "tool": (("room", "shop", "svc", "api", "tool"), ("v2", "tool", "fn", "call")),
}
_OPAQUE = {"skill": ("skill", "module", "sk", "routine"), "tool": ("tool", "fn", "op", "action")}
_TOKEN = re.compile(r"[a-z0-9]+")


def fresh_name(old: str, kind: str, styles: Sequence[str], rng: random.Random, taken: set[str]) -> str:
    """A new valid name for skill/tool `old`, not in `taken` (which it is then added to)."""
    separator = "_" if kind == "tool" and "_" in old else "-"
    for _ in range(12):
        style = rng.choice(tuple(styles))
        candidate = _candidate(old, kind, style, separator, rng, taken)
        if candidate and candidate != old and candidate not in taken and _valid(candidate, kind):
            taken.add(candidate)
            return candidate
    while True:  # always terminates: opaque names are unbounded
        candidate = _opaque(kind, rng, digits=4)
        if candidate not in taken:
            taken.add(candidate)
            return candidate


def fresh_variant(preferred: Sequence[str], kind: str, rng: random.Random, taken: set[str]) -> str:
    """One of `preferred` (a noise skill's name variants) that is free, else one with a numeric suffix."""
    options = [name for name in preferred if name not in taken and _valid(name, kind)]
    if options:
        name = rng.choice(options)
    else:
        base, number = preferred[0], 2
        while f"{base}-{number}" in taken:
            number += 1
        name = f"{base}-{number}"
    taken.add(name)
    return name


def _valid(name: str, kind: str) -> bool:
    return name_problem(name, allow_underscore=kind == "tool") is None and name != "load_skill"


def _candidate(old: str, kind: str, style: str, separator: str, rng: random.Random, taken: set[str]) -> str | None:
    tokens = _TOKEN.findall(old)
    if style == "synonym":
        swapped = _swap_synonyms(tokens, rng)
        return separator.join(swapped).replace("-", separator) if swapped != tokens else None
    if style == "affix":
        prefixes, suffixes = _AFFIXES[kind]
        parts = [rng.choice(prefixes), *tokens] if rng.random() < 0.5 else [*tokens, rng.choice(suffixes)]
        return separator.join(parts)
    if style == "separator":
        return old.replace("_", "-") if kind == "tool" and "_" in old else None
    if style == "vocabulary":
        return separator.join(vocabulary.word(rng) for _ in range(rng.randint(1, 2)))
    if style == "code":
        return vocabulary.code(rng).replace("-", separator)
    if style == "mixed":
        parts = [vocabulary.word(rng), vocabulary.code(rng) if rng.random() < 0.5 else str(rng.randrange(2, 100))]
        return separator.join(parts if rng.random() < 0.5 else parts[::-1]).replace("-", separator)
    if style == "collide":
        return _colliding(old, separator, rng, taken)
    return _opaque(kind, rng, digits=3)


def _colliding(old: str, separator: str, rng: random.Random, taken: set[str]) -> str | None:
    """Tokens of the harness's other names (never one of `old`'s own or their synonyms), one or two, maybe with
    a general word."""
    own = set(_TOKEN.findall(old))
    own |= {word for key, values in SYNONYMS.items() if own & set(key) for item in values
            for word in _TOKEN.findall(item)}
    others = sorted({token for name in taken for token in _TOKEN.findall(name)
                     if token not in own and not token.isdigit() and token not in ("load", "skill")})
    if not others:
        return None
    parts = rng.sample(others, min(len(others), rng.randint(1, 2)))
    if len(parts) == 1 or rng.random() < 0.3:
        parts.append(vocabulary.word(rng))
    return separator.join(parts)


def _swap_synonyms(tokens: list[str], rng: random.Random) -> list[str]:
    out: list[str] = []
    index = 0
    while index < len(tokens):
        pair = tuple(tokens[index:index + 2])
        if len(pair) == 2 and pair in SYNONYMS and rng.random() < 0.8:
            out.append(rng.choice(SYNONYMS[pair]))
            index += 2
            continue
        single = (tokens[index],)
        if single in SYNONYMS and rng.random() < 0.7:
            out.append(rng.choice(SYNONYMS[single]))
        else:
            out.append(tokens[index])
        index += 1
    return out


def _opaque(kind: str, rng: random.Random, digits: int) -> str:
    prefix = rng.choice(_OPAQUE[kind])
    separator = "_" if kind == "tool" else "-"
    return f"{prefix}{separator}{rng.randrange(10 ** (digits - 1), 10 ** digits)}"
