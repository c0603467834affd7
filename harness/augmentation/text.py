"""Deterministic text transforms behind HSA: identifier renaming, rule-preserving paraphrase, list surgery.

No model calls: every choice comes from the `random.Random` the caller passes,
so the same seed gives the same text. The paraphrases are conservative by
construction: numbers, quoted examples, `{{ tags }}`, code, identifiers (any
snake_case or kebab-case token) and negations/modals are never rewritten.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

# Identifiers --------------------------------------------------------------------------------------

_TAG = re.compile(r"(\{\{.*?\}\})", re.DOTALL)
_CEL_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'')


@lru_cache(maxsize=256)
def _identifier_pattern(names: tuple[str, ...]) -> re.Pattern[str]:
    alternatives = "|".join(re.escape(name) for name in sorted(names, key=lambda n: (-len(n), n)))
    # A name counts only as a whole token: not inside a longer snake/kebab identifier.
    return re.compile(rf"(?<![A-Za-z0-9_-])(?:{alternatives})(?![A-Za-z0-9_]|-[A-Za-z0-9])")


def rename_identifiers(text: str, names: Mapping[str, str]) -> str:
    """Replace every whole-token occurrence of an old name by its new name, in one pass.

    `{{ template tags }}` are left alone (they name settings and variables,
    not modules). One pass means swaps (a→b, b→a) cannot cascade.
    """
    if not names or not text:
        return text
    pattern = _identifier_pattern(tuple(names))
    parts = _TAG.split(text)
    for index in range(0, len(parts), 2):
        parts[index] = pattern.sub(lambda match: names[match.group(0)], parts[index])
    return "".join(parts)


def mentions(text: str, name: str) -> bool:
    """Whether `name` occurs in `text` as a whole token (outside template tags)."""
    pattern = _identifier_pattern((name,))
    return any(pattern.search(part) for part in _TAG.split(text or "")[::2])


def rename_in_cel(expr: str, names: Mapping[str, str]) -> str:
    """Rename module names inside the string literals of a CEL expression (`tool == "issue_coupon"`)."""
    if not names:
        return expr
    return _CEL_STRING.sub(lambda match: rename_identifiers(match.group(0), names), expr)


def rename_in_json(value: Any, names: Mapping[str, str]) -> Any:
    """A copy of a JSON value with names renamed in every string value (keys are argument names: kept)."""
    if isinstance(value, dict):
        return {key: rename_in_json(item, names) for key, item in value.items()}
    if isinstance(value, list):
        return [rename_in_json(item, names) for item in value]
    if isinstance(value, str):
        return rename_identifiers(value, names)
    return value


def map_json_strings(value: Any, fn: Callable[[str, str], str], key: str = "") -> Any:
    """A copy of a JSON value with `fn(key, text)` applied to every string value."""
    if isinstance(value, dict):
        return {k: map_json_strings(item, fn, k) for k, item in value.items()}
    if isinstance(value, list):
        return [map_json_strings(item, fn, key) for item in value]
    if isinstance(value, str):
        return fn(key, value)
    return value


def json_escaped(text: str) -> str:
    """`text` as it appears inside a JSON string written with ensure_ascii=False."""
    return json.dumps(text, ensure_ascii=False)[1:-1]


# Paraphrase ---------------------------------------------------------------------------------------

# Case-sensitive phrase → meaning-preserving alternatives. Nothing here adds, drops or flips a
# negation, a modal (must/never/only/always) or a number; contractions only expand or contract.
PHRASES: Mapping[str, tuple[str, ...]] = {
    "Use when": ("Use it when", "Pick it when", "Choose it when", "Apply it when"),
    "don't": ("do not",), "Don't": ("Do not",), "do not": ("don't",), "Do not": ("Don't",),
    "doesn't": ("does not",), "does not": ("doesn't",), "isn't": ("is not",), "can't": ("cannot",),
    "cannot": ("can't",), "won't": ("will not",), "didn't": ("did not",), "hasn't": ("has not",),
    "at most": ("no more than",),
    "instead of": ("rather than",),
    "whenever": ("every time",),
    "exactly": ("precisely",),
    "helpful": ("useful",),
    "short": ("brief",), "Short": ("Brief",),
    "kindly": ("politely", "gently"), "politely": ("courteously",),
    "warm": ("friendly",), "upbeat": ("cheerful",), "cheerful": ("upbeat",),
    "questions": ("queries", "enquiries"),
    "a product": ("an item",), "A product": ("An item",),
    "product": ("item",), "products": ("items",), "Product": ("Item",), "Products": ("Items",),
    "e.g.": ("for example",),
    "Handles": ("Covers", "Deals with", "Takes care of", "Looks after", "Is for"),
    "Answers": ("Responds to", "Covers", "Replies to", "Deals with", "Takes"),
    "Replies to": ("Responds to", "Answers", "Handles"),
    "Asks": ("Puts", "Poses"),
    "ambiguous": ("unclear", "vague"),
    "small talk": ("chit-chat", "chitchat"),
    "greetings": ("hellos", "salutations", "hellos and goodbyes"),
    "product fact": ("product detail", "fact about a product", "product information"),
    "store policy": ("shop policy", "store rules", "the store's policy", "shop rules"),
    "in a few words": ("briefly", "in a few keywords"),
    "as shown in the room": ("as the room shows it", "shown in the room"),
    "asking viewer's": ("viewer's",),
    "viewer's own": ("viewer's",),
    "one product": ("a single product", "one item", "a product"),
    "by link id": ("by its link id", "from its link id", "using the link id", "given its link id"),
    "by order number": ("by its order number", "from the order number", "given the order number"),
    "the promotion on": ("the current promotion on", "the offer on", "the deal on", "any promotion on"),
    "one short question": ("a single short question", "one brief question", "one quick question"),
    "answers a follow-up": ("replies to a follow-up", "handles a follow-up", "takes a follow-up"),
    "in this room": ("in this stream", "on this stream", "shown in this room"),
    "about a product": ("about an item", "on a product", "regarding a product"),
    "ask for no": ("need no", "call for no"),
    "entries": ("items", "notes", "pages", "articles"),
    "questions about": ("questions on", "queries about", "questions regarding", "questions concerning"),
    "by keywords": ("by key words", "using keywords", "from a few keywords", "matching keywords"),
    "the message": ("the viewer's message", "a message"),
    " - ": (": ", " — ", ", namely "),
    "Strategy for": ("Approach for", "Playbook for", "Method for"),
    "Look up": ("Fetch", "Retrieve", "Find", "Get", "Read"),
    "Search": ("Query", "Look through"),
    "Returns": ("Gives back", "Provides"),
    "Call": ("Invoke", "Use"),
    "Keep it": ("Keep the reply",),
    "mention": ("bring up",),
    "suggest": ("recommend",), "Suggest": ("Recommend",),
    "Tone:": ("Voice:", "Style:"),
    "Example:": ("For example:", "Sample:"),
    "If": ("When",),
    "Identify": ("Work out", "Determine"),
    "Pick": ("Choose", "Select"),
    "need": ("require",), "needs": ("requires",),
    "Before replying": ("Before you reply",),
    "Your reply": ("The reply",),
    "Rewrite the reply": ("Rewrite your answer", "Redo the reply"),
    "That tool call failed.": ("The tool call did not succeed.", "That call returned an error."),
    "Fix the arguments": ("Correct the arguments",),
}

_PROTECTED = re.compile(
    r"\{\{.*?\}\}"                              # template tags
    r'|"[^"\n]*"|“[^”\n]*”|`[^`\n]*`'           # quoted examples and code
    r"|(?<![A-Za-z])'[^'\n]+'(?![A-Za-z])"      # 'single-quoted' examples (not apostrophes)
    r"|https?://\S+"
    r"|[A-Za-z0-9]+(?:[-_/][A-Za-z0-9]+)+",     # identifiers: snake_case, kebab-case, a/b
    re.DOTALL,
)
_PHRASE = re.compile(
    r"(?<![A-Za-z0-9'])(?:" + "|".join(re.escape(k) for k in sorted(PHRASES, key=lambda k: (-len(k), k)))
    + r")(?![A-Za-z0-9'])"
)


def paraphrase(text: str, rng: random.Random, rate: float) -> str:
    """Substitute paraphrasable phrases (outside protected spans): each distinct phrase is swapped with
    probability `rate`, for the same alternative at every occurrence, so terms stay consistent in a text."""
    chosen: dict[str, str] = {}

    def substitute(match: re.Match[str]) -> str:
        phrase = match.group(0)
        if phrase not in chosen:
            chosen[phrase] = rng.choice(PHRASES[phrase]) if rng.random() < rate else phrase
        return chosen[phrase]

    out, last = [], 0
    for protected in _PROTECTED.finditer(text):
        out.append(_PHRASE.sub(substitute, text[last:protected.start()]))
        out.append(protected.group(0))
        last = protected.end()
    out.append(_PHRASE.sub(substitute, text[last:]))
    return "".join(out)


# Enumerations in a description ("status, tracking, returns, refunds.", "price, stock, size and spec
# questions"): one-word items after ": ", "- ", "about " or a leading verb, ending at punctuation or before
# "questions"; after ": " or "- " and up to a full stop, items of up to three words ("price, promo price,
# stock."). Shuffling them keeps the meaning; a list that runs into other words ("greetings, thanks and
# small talk that …") is left alone, since its last item's extent is unknown.
_ENUMERATION = re.compile(
    r"(?:(?<=: )|(?<=- )|(?<=about )|(?<=Answers )|(?<=Covers ))"
    r"([A-Za-z]+(?:, [A-Za-z]+)+)(?:(,? )(and|or) ([A-Za-z]+))?(?=[.;]|$| questions)"
    r"|(?:(?<=: )|(?<=- ))([A-Za-z]+(?: [A-Za-z]+){0,2}(?:, [A-Za-z]+(?: [A-Za-z]+){0,2})+)"
    r"(?:(,? )(and|or) ([A-Za-z]+(?: [A-Za-z]+){0,2}))?(?=\.(?:\s|$)|$)"
)


def shuffle_enumerations(text: str, rng: random.Random) -> str:
    """`text` with the items of each enumeration of three or more one-word items in a new random order."""

    def shuffle(match: re.Match[str]) -> str:
        offset = 0 if match.group(1) else 4  # the one-word form, or the short-phrase form
        head, comma, conjunction, last = (match.group(offset + i) for i in range(1, 5))
        items = head.split(", ") + ([last] if last else [])
        if len(items) < 3:
            return match.group(0)
        rng.shuffle(items)
        if not last:
            return ", ".join(items)
        return ", ".join(items[:-1]) + f"{comma}{conjunction} {items[-1]}"

    return _ENUMERATION.sub(shuffle, text)


# Sentences ----------------------------------------------------------------------------------------

_ABBREVIATIONS = ("e.g.", "i.e.", "vs.", "approx.", "etc.", "No.")


def split_sentences(text: str) -> list[str]:
    """Sentences of a one-paragraph text; never splits inside quotes, parentheses or after e.g."""
    sentences, start, depth, quoted = [], 0, 0, False
    index = 0
    while index < len(text):
        char = text[index]
        if char == '"':
            quoted = not quoted
        elif char in "([":
            depth += 1
        elif char in ")]":
            depth = max(depth - 1, 0)
        elif char in ".!?" and not quoted and depth == 0:
            gap = re.match(r"\s+(?=[A-Z])", text[index + 1:])
            if gap and not text[start:index + 1].endswith(_ABBREVIATIONS):
                sentences.append(text[start:index + 1].strip())
                start = index + 1 + gap.end()
                index = start
                continue
        index += 1
    if text[start:].strip():
        sentences.append(text[start:].strip())
    return sentences


# Markdown lists -----------------------------------------------------------------------------------

_NUMBERED = re.compile(r"^(\d+)([.)])(\s+)")
_PAREN_NUMBERED = re.compile(r"^\((\d+)\)(\s+)")
_BULLET = re.compile(r"^([-*+])(\s+)")
_HEADING = re.compile(r"^(#{1,6})\s+(.+)$")
# Rules that only make sense in their place: they refer to the rule before or open a sequence.
_SEQUENTIAL = re.compile(r"^(first|then|next|otherwise|finally|after that|afterwards|also|else)\b|"
                         r"\b(in this order|the above|as above|previous rule|rule \d+|see below)\b", re.I)
# Never dropped: numbers, negations, modals and obligations (the brief's "rules"), and routing.
_IMPORTANT = re.compile(
    r"\d|\{\{|n't\b|\b(?:ALL|NO|NOT)\b|^(?i:no)\b"
    r"|\b(?i:never|must|only|not|cannot|always|unless|required?|exactly|each|every|at most|at least"
    r"|one|two|three|four|five|six|seven|eight|nine|ten|once|twice|first|second|third|single)\b")
_EXAMPLE = re.compile(r"^(example|examples|e\.g\.|for example|for instance)\b", re.I)


@dataclass
class _Item:
    lines: list[str]

    @property
    def text(self) -> str:
        head = self.lines[0]
        for pattern in (_NUMBERED, _PAREN_NUMBERED, _BULLET):
            if match := pattern.match(head):
                head = head[match.end():]
                break
        return " ".join([head, *(line.strip() for line in self.lines[1:])])


@dataclass
class _List:
    kind: str  # "numbered" | "bullet"
    items: list[_Item]


def _item_kind(line: str) -> str | None:
    if _NUMBERED.match(line) or _PAREN_NUMBERED.match(line):
        return "numbered"
    if _BULLET.match(line):
        return "bullet"
    return None


def parse_blocks(text: str) -> list[str | _List]:
    """Lines of `text`, with each run of top-level list items (plus their indented continuation lines) grouped."""
    segments: list[str | _List] = []
    for line in text.split("\n"):
        kind = _item_kind(line)
        current = segments[-1] if segments and isinstance(segments[-1], _List) else None
        if kind is not None:
            if current is not None and current.kind == kind:
                current.items.append(_Item([line]))
            else:
                segments.append(_List(kind, [_Item([line])]))
        elif current is not None and line[:1].isspace() and line.strip():
            current.items[-1].lines.append(line)
        else:
            segments.append(line)
    return segments


def render_blocks(segments: list[str | _List], marker: str | None = None) -> str:
    """Text again, numbered lists renumbered 1..n (in `marker` style: '.', ')' or '()' when given)."""
    lines: list[str] = []
    for segment in segments:
        if isinstance(segment, str):
            lines.append(segment)
            continue
        for number, item in enumerate(segment.items, start=1):
            head = item.lines[0]
            if segment.kind == "numbered":
                head = _renumber(head, number, marker)
            lines.extend([head, *item.lines[1:]])
    return "\n".join(lines)


def _renumber(line: str, number: int, marker: str | None) -> str:
    if match := _NUMBERED.match(line):
        style, space, rest = match.group(2), match.group(3), line[match.end():]
    else:
        match = _PAREN_NUMBERED.match(line)
        style, space, rest = "()", match.group(2), line[match.end():]
    style = marker or style
    return (f"({number})" if style == "()" else f"{number}{style}") + space + rest


def reorder_lists(text: str, rng: random.Random) -> str:
    """Shuffle the movable items of every list with 2+ movable items; sequencing items keep their place."""
    segments = parse_blocks(text)
    for segment in segments:
        if not isinstance(segment, _List):
            continue
        movable = [i for i, item in enumerate(segment.items) if not _SEQUENTIAL.search(item.text)]
        if len(movable) < 2:
            continue
        order = movable[:]
        for _ in range(8):
            rng.shuffle(order)
            if order != movable:
                break
        items = segment.items[:]
        for slot, source in zip(movable, order, strict=True):
            items[slot] = segment.items[source]
        segment.items = items
    return render_blocks(segments)


def can_reorder(text: str) -> bool:
    return any(isinstance(s, _List) and sum(not _SEQUENTIAL.search(i.text) for i in s.items) >= 2
               for s in parse_blocks(text))


def is_droppable(item_text: str, names: frozenset[str]) -> bool:
    """Low importance: an example that states no obligation, or a note with no number, negation,
    modal, capitalised emphasis, template tag or module name."""
    if any(mentions(item_text, name) for name in names):
        return bool(_EXAMPLE.match(item_text)) and not re.search(r"\b(never|must)\b", item_text, re.I)
    if _EXAMPLE.match(item_text):
        return not re.search(r"\b(never|must)\b", item_text, re.I)
    return not _IMPORTANT.search(item_text)


def droppable_count(text: str, names: frozenset[str]) -> int:
    return sum(is_droppable(item.text, names) for s in parse_blocks(text) if isinstance(s, _List)
               for item in s.items if len(s.items) >= 3)


def mask_items(text: str, rng: random.Random, limit: int, names: frozenset[str]) -> tuple[str, list[str]]:
    """Drop up to `limit` droppable items (at most a third of any list); returns the text and the dropped items."""
    segments = parse_blocks(text)
    candidates = [(si, ii) for si, s in enumerate(segments) if isinstance(s, _List) and len(s.items) >= 3
                  for ii, item in enumerate(s.items) if is_droppable(item.text, names)]
    rng.shuffle(candidates)
    dropped: dict[int, set[int]] = {}
    for si, ii in candidates:
        if sum(map(len, dropped.values())) >= limit:
            break
        segment = segments[si]
        assert isinstance(segment, _List)
        if len(dropped.get(si, ())) + 1 > len(segment.items) // 3:
            continue
        dropped.setdefault(si, set()).add(ii)
    removed: list[str] = []
    for si, indices in dropped.items():
        segment = segments[si]
        assert isinstance(segment, _List)
        removed.extend("\n".join(segment.items[i].lines) for i in sorted(indices))
        segment.items = [item for i, item in enumerate(segment.items) if i not in indices]
    return render_blocks(segments), removed


_HEADING_FORMS = ("{title}", "{title} rules", "Rules: {title}", "{title} - rules", "{title} playbook")


def restyle_markdown(text: str, rng: random.Random) -> str:
    """A sentence-template change of structure: the first heading's wording/level and the list-marker style."""
    lines = text.split("\n")
    for index, line in enumerate(lines):
        if match := _HEADING.match(line):
            level = rng.choice((match.group(1), "#" if len(match.group(1)) > 1 else "##"))
            title = rng.choice(_HEADING_FORMS).format(title=match.group(2).strip())
            lines[index] = f"{level} {title}"
            break
    marker = rng.choice((".", ")"))
    return render_blocks(parse_blocks("\n".join(lines)), marker=marker)
