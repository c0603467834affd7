"""Text normalisation shared by the reference judge and the robustness rubric.

A fact "appears in" a reply when its token sequence occurs contiguously in the
reply's token sequence, both tokenised by `tokens()`:

- Unicode NFKC, then case-folded ("ＭＥＲＩＮＯ" == "merino").
- Numbers are one token in canonical decimal form, so they compare numerically:
  "71.20" == "71.2", "1,299.00" == "1299", "007" == "7". Thousands separators
  count only as groups of exactly three digits ("8,10" is the two numbers 8 and 10).
- Currency symbols and all other punctuation are dropped ("$71.2" matches
  "71.2"; "hand-wash" matches "hand wash"), except "%", which is a token of its
  own; the words "percent"/"pct" become "%" ("20 percent" == "20%").
- A letter-led alphanumeric run stays one token ("L001", "mp3"); a number
  followed by letters splits ("5kg" == "5 kg").
- A clitic after a word is a token of its own WITH its apostrophe ("it's" →
  "it", "'s"; "I'm" → "i", "'m"), so the size "S" or "M" never matches inside a
  contraction, while "Mia's" still contains "Mia".
- Each CJK character is a token of its own, so Chinese/Japanese facts match
  without word boundaries.
- Whitespace only separates tokens, so runs of whitespace are irrelevant.

Token boundaries mean "1.2" never matches inside "71.2" or "1.25", and "M" never
matches inside "Merino". The match is lexical: it cannot see negation ("no free
shipping" contains "free shipping"), so forbidden claims should be written as the
specific affirmative wording a wrong reply would use.
"""

from __future__ import annotations

import re
import unicodedata
from decimal import Decimal, InvalidOperation

_CJK = r"\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_TOKEN = re.compile(
    r"(?P<num>\d{1,3}(?:,\d{3})+(?:\.\d+)?(?!\d)|\d+(?:\.\d+)?)"
    rf"|(?P<cjk>[{_CJK}])"
    r"|(?P<clitic>(?<=[^\W_])'[^\W\d_]+)"
    rf"|(?P<word>(?:(?![{_CJK}])[^\W_])+)"
    r"|(?P<pct>%)"
)
_PERCENT_WORDS = frozenset({"percent", "pct"})


def canonical_number(text: str) -> str:
    """"71.20" -> "71.2", "1,299" -> "1299", "0.50" -> "0.5", "100" -> "100"."""
    try:
        value = Decimal(text.replace(",", ""))
    except InvalidOperation:
        return text
    canonical = format(value.normalize(), "f")
    return "0" if canonical in ("-0", "") else canonical


def tokens(text: str) -> list[str]:
    """The normalised token sequence of `text` (see the module docstring)."""
    text = unicodedata.normalize("NFKC", text or "").casefold().replace("\u2019", "'")
    out: list[str] = []
    for match in _TOKEN.finditer(text):
        kind = match.lastgroup
        value = match.group()
        if kind == "num":
            out.append(canonical_number(value))
        elif kind == "word" and value in _PERCENT_WORDS:
            out.append("%")
        else:
            out.append(value)
    return out


def normalise(text: str) -> str:
    """The normalised form as one string (tokens joined by single spaces); for display and keys."""
    return " ".join(tokens(text))


def contains(haystack: str | list[str], needle: str) -> bool:
    """Whether `needle`'s tokens occur contiguously in `haystack` (a text or its `tokens()`).

    A needle with no tokens at all (only punctuation) is vacuously contained.
    """
    hay = tokens(haystack) if isinstance(haystack, str) else haystack
    want = tokens(needle)
    if not want:
        return True
    width = len(want)
    first = want[0]
    return any(hay[i] == first and hay[i:i + width] == want for i in range(len(hay) - width + 1))


def numbers(text: str) -> list[str]:
    """The canonical numbers in `text`, in order of appearance (duplicates kept)."""
    return [t for t in tokens(text) if t[0].isdigit()]
