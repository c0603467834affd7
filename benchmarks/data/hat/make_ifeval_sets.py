"""Writes the HAT experiment's IFEval validation and test splits from prompts composed here.

    .venv/bin/python benchmarks/data/hat/make_ifeval_sets.py           # (re)write both files
    .venv/bin/python benchmarks/data/hat/make_ifeval_sets.py --check   # exit 1 if the committed files differ

The experiment chooses recipes and checkpoints on one split and reports on another that it touches once:

- `ifeval_validation.jsonl`: new prompts only;
- `ifeval_test.jsonl`: new prompts that, with the 55 of the earlier figures (the shipped mini set and
  `ifeval_extra.jsonl`), make the test split (`training.hat.ifeval_sets.ifeval_records("test")`).

A prompt is a stem (`PRODUCT_STEMS`, `TOPIC_STEMS`: product descriptions, viewer welcome lines, FAQ answers,
emails, essays, lists…) filled with a subject (`PRODUCTS`, `TOPICS`, each with three words of its own for
the keyword instructions), followed by one to three instructions (`INSTRUCTIONS`): an IFEval instruction id,
the kwargs its checker reads, and a sentence in this file's own words asking for what that checker tests.
The first instruction of each prompt goes round every id, so each split covers all of them; the others are
drawn among those that suit the stem and that neither lm-eval's conflict table (`INSTRUCTION_CONFLICTS`) nor
ours (`CLASHES`) keeps apart from the ones already chosen; a draw whose arguments would fight each other (a
forbidden word in the closing phrase, a comma in a request to be repeated without commas) is drawn again.

A candidate that `training.lineage.PromptGuard` finds equal or near (character-shingle Jaccard ≥ 0.8) to
any prompt before it (the 55, or one already drawn for either split) is skipped, so no two prompts in the
splits are near-duplicates and the splits are disjoint. Every record is checked against the checkers: each
instruction builds from its kwargs alone, with nothing left for the checker to fill in at random.
Deterministic from `SEED` (`random.Random`); the test suite regenerates the files and compares bytes.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from evaluation.metrics.ifeval.checkers import (  # noqa: E402
    INSTRUCTION_CONFLICTS,
    INSTRUCTION_DICT,
    instructions_util,
)
from evaluation.metrics.ifeval.evaluate import mini_records, read_records  # noqa: E402
from training.lineage import PromptGuard  # noqa: E402

HERE = Path(__file__).resolve().parent
EXTRA = HERE / "ifeval_extra.jsonl"
VALIDATION = HERE / "ifeval_validation.jsonl"
TEST = HERE / "ifeval_test.jsonl"

SEED = 20240601
VALIDATION_SIZE = 64
TEST_NEW = 65  # with the 55 earlier prompts: a 120-prompt test split
FIRST_KEY = {"validation": 3001, "test": 4001}  # the earlier prompts use 1001–1027 and 2001–2028
INSTRUCTION_COUNTS = ((1, 0.35), (2, 0.45), (3, 0.20))  # share of prompts with 1, 2 and 3 instructions
MAX_STEM_USES = 3  # per split, so that no one task dominates a split

# --- subjects and stems -----------------------------------------------------------------------------------
# The words are lowercase letters only: the keyword checkers use them as regular expressions.

PRODUCTS = (
    ("a bamboo bath towel set", ("soft", "absorbent", "towel")),
    ("a pair of noise-cancelling headphones", ("battery", "quiet", "commute")),
    ("an enamel casserole dish", ("stew", "lid", "enamel")),
    ("a linen shirt", ("breeze", "summer", "linen")),
    ("a rechargeable reading lamp", ("brightness", "battery", "glow")),
    ("a set of beeswax food wraps", ("beeswax", "sandwich", "plastic")),
    ("a lavender pillow spray", ("lavender", "sleep", "mist")),
    ("a leather crossbody bag", ("strap", "pocket", "leather")),
    ("a stainless steel lunch box", ("leakproof", "compartments", "steel")),
    ("a chunky knit throw", ("yarn", "warmth", "sofa")),
    ("a ceramic plant pot", ("drainage", "glaze", "roots")),
    ("a pair of trail running shoes", ("grip", "cushioning", "mud")),
    ("a vitamin C face serum", ("glow", "dropper", "skin")),
    ("a digital kitchen scale", ("grams", "accuracy", "baking")),
    ("a silk scrunchie set", ("silk", "hair", "gentle")),
    ("a foldable travel kettle", ("voltage", "fold", "tea")),
    ("a wooden shape sorter for toddlers", ("pieces", "shapes", "wood")),
    ("a portable phone charger", ("charge", "cable", "battery")),
    ("a wool felt laptop sleeve", ("felt", "laptop", "padding")),
    ("a glass meal-prep container set", ("glass", "lids", "microwave")),
    ("a hand-thrown ramen bowl", ("noodles", "broth", "glaze")),
    ("a weighted blanket", ("weight", "sleep", "calm")),
    ("a cordless handheld vacuum", ("suction", "crumbs", "battery")),
    ("a recycled canvas backpack", ("canvas", "laptop", "recycled")),
    ("an olive wood salad bowl", ("olive", "grain", "salad")),
    ("a set of gel nail stickers", ("nails", "shine", "peel")),
    ("a smart plant sensor", ("moisture", "app", "sunlight")),
    ("a waffle-knit bathrobe", ("cotton", "robe", "cosy")),
    ("a pair of blue-light glasses", ("screen", "lenses", "eyes")),
    ("a collapsible silicone water bottle", ("silicone", "hike", "fold")),
)

TOPICS = (
    ("keeping houseplants alive", ("water", "light", "soil")),
    ("working from home", ("desk", "routine", "breaks")),
    ("cooking on a tight budget", ("beans", "leftovers", "budget")),
    ("learning a second language", ("vocabulary", "practice", "grammar")),
    ("getting better sleep", ("bedtime", "screens", "rest")),
    ("reducing food waste", ("leftovers", "freezer", "compost")),
    ("planning a weekend city trip", ("museum", "walking", "train")),
    ("starting a small online shop", ("customers", "shipping", "photos")),
    ("writing a cover letter", ("employer", "skills", "tone")),
    ("growing herbs on a windowsill", ("basil", "sunlight", "pots")),
    ("commuting by bicycle", ("helmet", "lanes", "rain")),
    ("hosting a dinner for friends", ("menu", "guests", "dessert")),
    ("saving for a holiday", ("budget", "savings", "goal")),
    ("packing a carry-on bag", ("liquids", "layers", "shoes")),
    ("keeping a daily journal", ("pen", "habit", "thoughts")),
    ("speaking on camera for the first time", ("nerves", "lens", "voice")),
    ("choosing a first phone for a child", ("screen", "parents", "rules")),
    ("mending clothes instead of replacing them", ("needle", "thread", "patch")),
    ("running a neighbourhood book swap", ("shelf", "neighbours", "books")),
    ("taking better photos with a phone", ("light", "angle", "focus")),
)


@dataclass(frozen=True)
class Stem:
    text: str  # with {item}
    kind: str  # line | short | long | list | question: which instructions suit it


PRODUCT_STEMS = (
    Stem("Write a one-line greeting for viewers who just joined a live stream selling {item}.", "line"),
    Stem("Write a catchy tagline the host can say while holding up {item}.", "line"),
    Stem("Write a chat reply thanking a viewer who just ordered {item}.", "line"),
    Stem("Write the banner text that announces a price drop on {item}.", "line"),
    Stem("Write a pinned chat message saying that {item} is back in stock.", "line"),
    Stem("Write a product description of {item} for tonight's live sale.", "short"),
    Stem("A viewer asks how to look after {item}. Write the host's answer.", "short"),
    Stem("A viewer asks whether {item} is worth its price. Write a friendly answer.", "short"),
    Stem("Describe {item} for a viewer who is listening to the stream without watching.", "short"),
    Stem("Write what the host says while demonstrating {item} on camera.", "short"),
    Stem("Write a gift suggestion for {item} aimed at viewers shopping for a parent.", "short"),
    Stem("Write an email to subscribers announcing next week's live stream featuring {item}.", "long"),
    Stem("Write a host script for a ten-minute live segment on {item}.", "long"),
    Stem("Write a blog post recapping last night's live sale of {item}.", "long"),
    Stem("Write a care guide to be packed in the box with {item}.", "long"),
    Stem("Write a reply to a customer who says {item} arrived damaged.", "long"),
    Stem("List the questions viewers ask most often about {item}.", "list"),
    Stem("List the selling points a host should mention when showing {item}.", "list"),
    Stem("List the first things a buyer should do after {item} arrives.", "list"),
    Stem("List what to check before buying {item} online.", "list"),
    Stem("Is {item} a sensible gift for someone moving into their first flat?", "question"),
    Stem("Would {item} be worth buying during a live flash sale?", "question"),
    Stem("Should a viewer on a tight budget buy {item}?", "question"),
)

TOPIC_STEMS = (
    Stem("Write a one-sentence motto about {item}.", "line"),
    Stem("Explain {item} in plain words for a busy reader.", "short"),
    Stem("Give a friend who is new to {item} some encouraging advice.", "short"),
    Stem("Describe the biggest mistake beginners make with {item}.", "short"),
    Stem("Write a reflective essay on {item}.", "long"),
    Stem("Write an email to a colleague sharing what you have learned about {item}.", "long"),
    Stem("Write a newsletter column about {item}.", "long"),
    Stem("Write a short talk for a community evening on {item}.", "long"),
    Stem("List practical tips for {item}.", "list"),
    Stem("List the common myths about {item}.", "list"),
    Stem("Is {item} easier than most people expect?", "question"),
    Stem("Is {item} worth the effort for a complete beginner?", "question"),
)

STEMS = tuple((stem, PRODUCTS) for stem in PRODUCT_STEMS) + tuple((stem, TOPICS) for stem in TOPIC_STEMS)

# --- what the instructions' arguments are drawn from -----------------------------------------------------
# None of these holds a comma, a capitalised word, or one of the rare letters the letter instruction
# limits, so they can stand beside those instructions.

HYPE_WORDS = ("cheap", "guaranteed", "miracle", "perfect", "amazing", "best", "cure", "flawless", "unbeatable")
PUSHY_WORDS = ("hurry", "discount", "limited")
COMMON_LETTERS = "aeinorst"
RARE_LETTERS = "zqjxk"
LANGUAGES = ("es", "fr", "de", "it", "pt")  # codes of lm-eval's language checker; the prompt names the language
END_PHRASES = ("Happy shopping!", "Thanks for tuning in.", "Stay cosy and see you soon.", "Tell us in the chat.",
               "That wraps it up for today.", "Talk soon.", "Have a lovely evening.", "See you on Friday.")
FIRST_WORDS = ("however", "finally", "today", "also", "overall", "still", "then", "because")
SECTION_WORDS = ("Part", "Section", "Segment", "Step")
PLACEHOLDERS = ("name", "order number", "date", "price", "size", "link", "time", "colour")
TITLES = ("Fresh Finds", "Host Notes", "Small Comforts", "The Weekly Pick", "Good Habits")
POSTSCRIPT_MARKERS = ("P.S.", "P.S.", "P.S.", "P.P.S")
CONSTRAINED_OPTIONS = ("My answer is yes.", "My answer is no.", "My answer is maybe.")
ORDINALS = {1: "first", 2: "second", 3: "third", 4: "fourth"}

# Numbers by stem kind (a kind missing from a table never gets that relation).
WORDS_LESS = {"line": (20, 25, 30), "short": (60, 80, 100), "question": (40, 50, 60), "list": (80, 100, 120)}
WORDS_AT_LEAST = {"short": (50, 60, 80), "long": (150, 200, 250), "list": (60, 80)}
SENTENCES_LESS = {"line": (2, 3), "short": (4, 5, 6), "question": (3, 4)}
SENTENCES_AT_LEAST = {"short": (3, 4), "long": (6, 8, 10)}
LETTERS_AT_LEAST = {"line": (3, 4, 5), "short": (6, 8, 10), "question": (6, 8), "long": (15, 20, 25),
                    "list": (8, 10, 12)}
KEYWORD_AT_LEAST = {"line": (2,), "short": (2, 3), "question": (2,), "long": (3, 4), "list": (3, 4)}
CAPITALS_AT_LEAST = {"line": (2,), "short": (2, 3), "long": (3, 4, 5), "list": (3, 4)}
PLACEHOLDER_COUNTS = {"line": (1, 2), "short": (2, 3), "long": (3, 4)}
HIGHLIGHT_COUNTS = {"short": (2, 3), "long": (3, 4), "list": (2, 3)}
BULLET_COUNTS = {"list": (3, 4, 5, 6), "long": (3, 4, 5)}
SECTION_COUNTS = {"long": (2, 3, 4), "list": (2, 3)}
RELATIONS = {"less than": "fewer than", "at least": "at least"}


@dataclass(frozen=True)
class Context:
    kind: str
    words: tuple[str, ...]  # the subject's own words


Render = Callable[[random.Random, Context], tuple[str, dict[str, Any]]]


@dataclass(frozen=True)
class Instruction:
    kinds: frozenset[str]
    render: Render  # → (the sentence the prompt adds, the checker's kwargs)


def _kinds(*names: str) -> frozenset[str]:
    return frozenset(names)


ALL = _kinds("line", "short", "long", "list", "question")


def _existence(rng: random.Random, ctx: Context) -> tuple[str, dict[str, Any]]:
    if ctx.kind == "line":
        word = rng.choice(ctx.words)
        return f'Use the word "{word}" somewhere in your reply.', {"keywords": [word]}
    a, b = rng.sample(ctx.words, 2)
    text = rng.choice(('Work the words "{a}" and "{b}" into your reply.',
                       'Your reply must contain the words "{a}" and "{b}".'))
    return text.format(a=a, b=b), {"keywords": sorted((a, b))}


def _frequency(rng: random.Random, ctx: Context) -> tuple[str, dict[str, Any]]:
    if rng.random() < 0.75:
        keyword, n = rng.choice(ctx.words), rng.choice(KEYWORD_AT_LEAST[ctx.kind])
        text = rng.choice(('The word "{k}" should come up at least {n} times.', 'Say "{k}" at least {n} times.'))
        return text.format(k=keyword, n=n), {"keyword": keyword, "frequency": n, "relation": "at least"}
    keyword, n = rng.choice(PUSHY_WORDS), rng.choice((2, 3))
    return (f'Say "{keyword}" fewer than {n} times.',
            {"keyword": keyword, "frequency": n, "relation": "less than"})


def _forbidden(rng: random.Random, ctx: Context) -> tuple[str, dict[str, Any]]:
    a, b = rng.sample(HYPE_WORDS, 2)
    text = rng.choice(('Do not write the words "{a}" or "{b}".', 'Keep the words "{a}" and "{b}" out of your reply.'))
    return text.format(a=a, b=b), {"forbidden_words": sorted((a, b))}


def _letters(rng: random.Random, ctx: Context) -> tuple[str, dict[str, Any]]:
    if rng.random() < 0.6:
        letter, n = rng.choice(COMMON_LETTERS), rng.choice(LETTERS_AT_LEAST[ctx.kind])
        return (f'The letter "{letter}" must appear at least {n} times.',
                {"letter": letter, "let_frequency": n, "let_relation": "at least"})
    letter, n = rng.choice(RARE_LETTERS), rng.choice((2, 3))
    return (f'Use the letter "{letter}" fewer than {n} times.',
            {"letter": letter, "let_frequency": n, "let_relation": "less than"})


def _language(rng: random.Random, ctx: Context) -> tuple[str, dict[str, Any]]:
    code = rng.choice(LANGUAGES)
    name = instructions_util.LANGUAGE_CODES[code]
    text = rng.choice(("Write your whole reply in {name} and in no other language.",
                       "Reply in {name} only; use no English at all."))
    return text.format(name=name), {"language": code}


def _relation(rng: random.Random, kind: str, less: Mapping[str, Sequence[int]],
              at_least: Mapping[str, Sequence[int]]) -> tuple[str, int]:
    options = [relation for relation, table in (("less than", less), ("at least", at_least)) if kind in table]
    relation = rng.choice(options)
    return relation, rng.choice((less if relation == "less than" else at_least)[kind])


def _sentences(rng: random.Random, ctx: Context) -> tuple[str, dict[str, Any]]:
    relation, n = _relation(rng, ctx.kind, SENTENCES_LESS, SENTENCES_AT_LEAST)
    text = "Use fewer than {n} sentences." if relation == "less than" else "Write at least {n} sentences."
    return text.format(n=n), {"num_sentences": n, "relation": relation}


def _paragraphs(rng: random.Random, ctx: Context) -> tuple[str, dict[str, Any]]:
    n = rng.choice((2, 3, 4))
    return (f"Write exactly {n} paragraphs and separate them with a line holding only ***.",
            {"num_paragraphs": n})


def _words(rng: random.Random, ctx: Context) -> tuple[str, dict[str, Any]]:
    relation, n = _relation(rng, ctx.kind, WORDS_LESS, WORDS_AT_LEAST)
    if relation == "less than":
        text = rng.choice(("Stay below {n} words in total.", "Your reply must be shorter than {n} words."))
    else:
        text = rng.choice(("Use {n} words or more.", "The reply needs at least {n} words."))
    return text.format(n=n), {"num_words": n, "relation": relation}


def _nth_paragraph(rng: random.Random, ctx: Context) -> tuple[str, dict[str, Any]]:
    n = rng.choice((2, 3, 4))
    nth, word = rng.randint(1, n), rng.choice(FIRST_WORDS)
    return (f"Write {n} paragraphs separated by single blank lines, and begin the {ORDINALS[nth]} paragraph "
            f'with the word "{word.capitalize()}".', {"num_paragraphs": n, "nth_paragraph": nth, "first_word": word})


def _placeholders(rng: random.Random, ctx: Context) -> tuple[str, dict[str, Any]]:
    n = rng.choice(PLACEHOLDER_COUNTS[ctx.kind])
    example = rng.choice(PLACEHOLDERS)
    return (f"Mark at least {n} details to be filled in later with square brackets, like [{example}].",
            {"num_placeholders": n})


def _postscript(rng: random.Random, ctx: Context) -> tuple[str, dict[str, Any]]:
    marker = rng.choice(POSTSCRIPT_MARKERS)
    return f'Add a postscript at the end that starts with "{marker}".', {"postscript_marker": marker}


def _bullets(rng: random.Random, ctx: Context) -> tuple[str, dict[str, Any]]:
    n = rng.choice(BULLET_COUNTS[ctx.kind])
    return (f'Include exactly {n} bullet points, each on its own line starting with "* ".', {"num_bullets": n})


def _constrained(rng: random.Random, ctx: Context) -> tuple[str, dict[str, Any]]:
    yes, no, maybe = (f'"{option}"' for option in CONSTRAINED_OPTIONS)
    return f"Answer with one of these options: {yes}, {no} or {maybe}", {}


def _highlights(rng: random.Random, ctx: Context) -> tuple[str, dict[str, Any]]:
    n = rng.choice(HIGHLIGHT_COUNTS[ctx.kind])
    return (f"Mark at least {n} important parts in markdown italics, for example *ships tomorrow*.",
            {"num_highlights": n})


def _sections(rng: random.Random, ctx: Context) -> tuple[str, dict[str, Any]]:
    word, n = rng.choice(SECTION_WORDS), rng.choice(SECTION_COUNTS[ctx.kind])
    return (f'Organise the reply into {n} sections headed "{word} 1", "{word} 2" and so on.',
            {"section_spliter": word, "num_sections": n})


def _json(rng: random.Random, ctx: Context) -> tuple[str, dict[str, Any]]:
    return rng.choice(("Return the whole reply as valid JSON (a ``` code fence around it is fine).",
                       "Format your entire output as one JSON value.")), {}


def _title(rng: random.Random, ctx: Context) -> tuple[str, dict[str, Any]]:
    return f"Give your reply a title wrapped in double angle brackets, such as <<{rng.choice(TITLES)}>>.", {}


def _two_responses(rng: random.Random, ctx: Context) -> tuple[str, dict[str, Any]]:
    return "Write two different versions and put six asterisks (******) between them and nowhere else.", {}


def _repeat(rng: random.Random, ctx: Context) -> tuple[str, dict[str, Any]]:
    # prompt_to_repeat is the text before this sentence, filled in by `compose`.
    return ("Before you answer, repeat the request above word for word with nothing in front of it "
            "(this sentence is not part of the request)."), {}


def _end(rng: random.Random, ctx: Context) -> tuple[str, dict[str, Any]]:
    phrase = rng.choice(END_PHRASES)
    return f'Make "{phrase}" the very last words of your reply.', {"end_phrase": phrase}


def _capital_words(rng: random.Random, ctx: Context) -> tuple[str, dict[str, Any]]:
    if rng.random() < 0.7:
        n = rng.choice(CAPITALS_AT_LEAST[ctx.kind])
        return f"Put at least {n} words in ALL CAPS.", {"capital_frequency": n, "capital_relation": "at least"}
    n = rng.choice((3, 4))
    return (f"Use fewer than {n} words written entirely in capital letters.",
            {"capital_frequency": n, "capital_relation": "less than"})


def _capital(rng: random.Random, ctx: Context) -> tuple[str, dict[str, Any]]:
    return "Write the whole reply in English using only capital letters.", {}


def _lowercase(rng: random.Random, ctx: Context) -> tuple[str, dict[str, Any]]:
    return "Reply in English with lowercase letters only; do not use any capital letters.", {}


def _no_comma(rng: random.Random, ctx: Context) -> tuple[str, dict[str, Any]]:
    return rng.choice(("Do not use any commas in your reply.", "Leave out commas entirely.")), {}


def _quotation(rng: random.Random, ctx: Context) -> tuple[str, dict[str, Any]]:
    return "Start and end your reply with a double quotation mark.", {}


INSTRUCTIONS: dict[str, Instruction] = {
    "keywords:existence": Instruction(ALL, _existence),
    "keywords:frequency": Instruction(ALL, _frequency),
    "keywords:forbidden_words": Instruction(ALL, _forbidden),
    "keywords:letter_frequency": Instruction(ALL, _letters),
    "language:response_language": Instruction(_kinds("line", "short", "long", "list"), _language),
    "length_constraints:number_sentences": Instruction(_kinds("line", "short", "long", "question"), _sentences),
    "length_constraints:number_paragraphs": Instruction(_kinds("long"), _paragraphs),
    "length_constraints:number_words": Instruction(_kinds("line", "short", "long", "list", "question"), _words),
    "length_constraints:nth_paragraph_first_word": Instruction(_kinds("long"), _nth_paragraph),
    "detectable_content:number_placeholders": Instruction(_kinds("line", "short", "long"), _placeholders),
    "detectable_content:postscript": Instruction(_kinds("short", "long"), _postscript),
    "detectable_format:number_bullet_lists": Instruction(_kinds("list", "long"), _bullets),
    "detectable_format:constrained_response": Instruction(_kinds("question"), _constrained),
    "detectable_format:number_highlighted_sections": Instruction(_kinds("short", "long", "list"), _highlights),
    "detectable_format:multiple_sections": Instruction(_kinds("long", "list"), _sections),
    "detectable_format:json_format": Instruction(_kinds("line", "short", "list"), _json),
    "detectable_format:title": Instruction(_kinds("short", "long", "list"), _title),
    "combination:two_responses": Instruction(_kinds("line", "short"), _two_responses),
    "combination:repeat_prompt": Instruction(_kinds("line", "short", "list"), _repeat),
    "startend:end_checker": Instruction(_kinds("line", "short", "long", "list"), _end),
    "change_case:capital_word_frequency": Instruction(_kinds("line", "short", "long", "list"), _capital_words),
    "change_case:english_capital": Instruction(_kinds("line", "short", "list"), _capital),
    "change_case:english_lowercase": Instruction(_kinds("line", "short", "long", "list"), _lowercase),
    "punctuation:no_comma": Instruction(ALL, _no_comma),
    "startend:quotation": Instruction(_kinds("line", "short"), _quotation),
}

# Pairs lm-eval's table allows but that a reader could not follow together, or that the checkers make
# unsatisfiable: a lowercase reply cannot hold "Part 1"; a postscript after the last blank-line paragraph is a
# paragraph more; a *** divider line next to bullet lines or a bullet line read as a highlight; ….
CLASHES = {
    "change_case:english_lowercase": {"startend:end_checker", "detectable_format:multiple_sections",
                                      "detectable_content:postscript", "length_constraints:nth_paragraph_first_word"},
    "change_case:english_capital": {"startend:end_checker", "detectable_format:multiple_sections"},
    "length_constraints:nth_paragraph_first_word": {"detectable_format:title", "detectable_format:number_bullet_lists",
                                                    "detectable_format:multiple_sections", "startend:quotation",
                                                    "length_constraints:number_sentences",
                                                    "detectable_content:postscript", "language:response_language"},
    "length_constraints:number_paragraphs": {"detectable_format:number_bullet_lists",
                                             "detectable_format:multiple_sections", "startend:quotation"},
    "detectable_format:number_bullet_lists": {"detectable_format:number_highlighted_sections", "startend:quotation",
                                              "detectable_format:multiple_sections"},
    "startend:quotation": {"detectable_format:multiple_sections", "detectable_content:postscript",
                           "startend:end_checker"},
    "startend:end_checker": {"detectable_content:postscript"},
    "language:response_language": {"keywords:letter_frequency"},
    "length_constraints:number_words": {"length_constraints:number_sentences"},
}


def _conflicts() -> dict[str, frozenset[str]]:
    """lm-eval's conflict table and ours, made symmetric (A beside B is refused when either lists the other)."""
    pairs: dict[str, set[str]] = {name: {name} for name in INSTRUCTIONS}
    for table in (INSTRUCTION_CONFLICTS, CLASHES):
        for name, others in table.items():
            for other in others:
                if name in pairs and other in pairs:
                    pairs[name].add(other)
                    pairs[other].add(name)
    return {name: frozenset(others) for name, others in pairs.items()}


CONFLICTS = _conflicts()


# --- composing ------------------------------------------------------------------------------------------

def _instruction_count(rng: random.Random) -> int:
    draw, total = rng.random(), 0.0
    for count, share in INSTRUCTION_COUNTS:
        total += share
        if draw < total:
            return count
    return INSTRUCTION_COUNTS[-1][0]


def _arguments_clash(stem_text: str, ids: Sequence[str], kwargs: Sequence[Mapping[str, Any]]) -> bool:
    """Whether one instruction's arguments make another impossible (or odd) in this prompt."""
    by_id = dict(zip(ids, kwargs, strict=True))
    required = [stem_text.lower()]  # text the reply is asked to hold, or likely to repeat
    for name, args in by_id.items():
        if name == "keywords:existence":
            required.extend(args["keywords"])
        elif name == "keywords:frequency" and args["relation"] == "at least":
            required.append(args["keyword"])
        elif name == "startend:end_checker":
            required.append(args["end_phrase"].lower())
        elif name == "length_constraints:nth_paragraph_first_word":
            required.append(args["first_word"])
        elif name == "detectable_format:multiple_sections":
            required.append(args["section_spliter"].lower())
        elif name == "combination:repeat_prompt":
            required.append(args["prompt_to_repeat"].lower())
    text = " ".join(required)
    letters = by_id.get("keywords:letter_frequency")
    if letters and letters["let_relation"] == "less than" and letters["letter"] in text:
        return True
    forbidden = by_id.get("keywords:forbidden_words")
    if forbidden and any(re.search(rf"\b{word}\b", text) for word in forbidden["forbidden_words"]):
        return True
    frequency = by_id.get("keywords:frequency")
    if frequency and frequency["relation"] == "less than" and frequency["keyword"] in text:
        return True
    existence = by_id.get("keywords:existence")
    if frequency and existence and frequency["keyword"] in existence["keywords"]:  # one word asked for twice
        return True
    return "punctuation:no_comma" in by_id and "," in " ".join(required[1:])


def compose(rng: random.Random, first: str, spent: frozenset[str] = frozenset()
            ) -> tuple[str, list[str], list[dict[str, Any]], tuple[str, str]] | None:
    """One candidate: (prompt, instruction ids, kwargs, (stem, subject)) whose first instruction is `first`
    and whose stem is not one of `spent`, or None when the draw's arguments clash."""
    stem, subjects = rng.choice([(s, subjects) for s, subjects in STEMS
                                 if s.kind in INSTRUCTIONS[first].kinds and s.text not in spent])
    subject, words = rng.choice(subjects)
    ctx = Context(stem.kind, words)
    ids = [first]
    for _ in range(_instruction_count(rng) - 1):
        fitting = [name for name in INSTRUCTIONS if stem.kind in INSTRUCTIONS[name].kinds
                   and not any(name in CONFLICTS[chosen] for chosen in ids)]
        if not fitting:
            break
        ids.append(rng.choice(fitting))
    ids.sort(key=lambda name: name == "combination:repeat_prompt")  # the repeat sentence comes last
    stem_text = stem.text.format(item=subject)
    sentences, kwargs = [stem_text], []
    for name in ids:
        sentence, args = INSTRUCTIONS[name].render(rng, ctx)
        if name == "combination:repeat_prompt":
            args = {"prompt_to_repeat": " ".join(sentences)}
        sentences.append(sentence)
        kwargs.append(args)
    if _arguments_clash(stem_text, ids, kwargs):
        return None
    return " ".join(sentences), ids, kwargs, (stem.text, subject)


def check_kwargs(record: Mapping[str, Any]) -> None:
    """Raise ValueError unless every instruction of `record` builds from its kwargs alone: a missing or
    misspelt argument would let the checker draw one at random, and the prompt would ask for something else."""
    for name, args in zip(record["instruction_id_list"], record["kwargs"], strict=True):
        instruction = INSTRUCTION_DICT[name](name)
        instruction.build_description(**args)
        built = instruction.get_instruction_args() or {}
        if built != args:
            raise ValueError(f"record {record['key']}: {name} builds with {built}, not {args}")


def _earlier_prompts() -> dict[str, str]:
    records = {"ifeval_mini.jsonl": mini_records(), EXTRA.name: read_records(EXTRA)}
    return {f"{name}:{r['key']}": r["prompt"] for name, rows in records.items() for r in rows}


def build_sets(seed: int = SEED) -> dict[str, list[dict[str, Any]]]:
    """{"validation": records, "test": the new test records}, deterministic from `seed` (module docstring)."""
    rng = random.Random(seed)
    taken = _earlier_prompts()
    guard = PromptGuard(taken)
    used_pairs: set[tuple[str, str]] = set()
    sets: dict[str, list[dict[str, Any]]] = {}
    for split, size in (("validation", VALIDATION_SIZE), ("test", TEST_NEW)):
        order = sorted(INSTRUCTIONS)
        rng.shuffle(order)
        records: list[dict[str, Any]] = []
        stem_uses: Counter[str] = Counter()
        attempts = 0
        while len(records) < size:
            attempts += 1
            if attempts > size * 200:
                raise ValueError(f"{split}: the stems make fewer than {size} distinct prompts (got {len(records)})")
            spent = frozenset(stem for stem, uses in stem_uses.items() if uses >= MAX_STEM_USES)
            candidate = compose(rng, order[len(records) % len(order)], spent)
            if candidate is None:
                continue
            prompt, ids, kwargs, pair = candidate
            if pair in used_pairs or guard.closest(prompt) is not None:
                continue
            record = {"key": FIRST_KEY[split] + len(records), "prompt": prompt, "instruction_id_list": ids,
                      "kwargs": kwargs}
            check_kwargs(record)
            records.append(record)
            used_pairs.add(pair)
            stem_uses[pair[0]] += 1
            taken[f"{split}:{record['key']}"] = prompt
            guard = PromptGuard(taken)
        sets[split] = records
    overlap = PromptGuard({str(r["key"]): r["prompt"] for r in sets["test"]}).matches(
        [r["prompt"] for r in sets["validation"]])
    if overlap:
        raise ValueError(f"validation and test overlap: {overlap[:3]}")
    return sets


def render(records: Sequence[Mapping[str, Any]]) -> str:
    """The JSONL text of a split (the layout of `ifeval_extra.jsonl`)."""
    return "".join(json.dumps(record) + "\n" for record in records)


def files(seed: int = SEED) -> dict[Path, str]:
    sets = build_sets(seed)
    return {VALIDATION: render(sets["validation"]), TEST: render(sets["test"])}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed files; write nothing")
    args = parser.parse_args(argv)
    wanted = files()
    if args.check:
        stale = [path.name for path, text in wanted.items()
                 if not path.exists() or path.read_text(encoding="utf-8") != text]
        print("stale: " + ", ".join(stale) if stale else "up to date")
        return 1 if stale else 0
    for path, text in wanted.items():
        path.write_text(text, encoding="utf-8")
        rows = [json.loads(line) for line in text.splitlines()]
        counts = Counter(name for row in rows for name in row["instruction_id_list"])
        print(f"{path.name}: {len(rows)} prompts, {sum(counts.values())} instructions, {len(counts)} ids")
    return 0


if __name__ == "__main__":
    sys.exit(main())
