"""Simulated viewer messages with ground truth, following the seed report's workload mix.

`generate_cases(seed, n)` returns `n` `Case`s for one room (the demo room, a
given room, or rooms generated from the seed): product Q&A, casual chat,
clarification follow-ups (with the prior dialogue), after-sales, discounts,
presentation-order requests, FAQ and irrelevant spam that must get no reply.

Category counts are exact quotas of the mix (largest remainder, so a 0.5 %
category is present in any set of 200+ cases) in a seeded shuffled order; each
case is drawn from its own `random.Random(f"case:{seed}:{index}")`, so case
`i` does not change when another generator changes.

`Expected` conventions (see `cases.py`):
- `facts` are strings taken from the room data (a price as `fmt_number` writes
  it, a size or colour label, a carrier, a key number of the FAQ answer); a
  correct reply states each of them (compare case/space/number-normalised).
- `forbidden` entries are matched lexically (token sequence, like `facts`), so
  each is something whose mere presence is the error: a number (another
  product's price, a coupon above the offer, a full tracking number) or the
  affirmative wording a wrong reply would use ("M is in stock" for a sold-out
  M, "comes in red", "I'm human"), never a phrase a correct negation contains
  ("free shipping", "50%" in "I can't do 50% off").
- `skills`: reply skills, any of which a good turn loads; `tools`: calls a good
  turn makes, arguments as a subset (free-text queries are left out).
- `meta`: `intent`, the referenced `link_id`/`order_id`, the semantic answer
  (`in_stock`, `available`, `expects_question`, `asks_for`, …) and
  `forbidden_tools` (write tools a good turn must not call).
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from harness.simulator.cases import CATEGORIES, Case, Expected, ExpectedCall
from harness.simulator.world import fmt_number, generate_room, price_now, viewer_handle

__all__ = ["WORKLOAD_MIX", "DEMO_REPLY_SKILLS", "DEMO_TOOL_NAMES", "DEMO_ROOM_PATH", "generate_cases",
           "category_quotas", "load_demo_room", "fact_in_room", "normalise", "faq_topic"]

# The seed report's traffic summary (HAT report, "Workload composition"). The shares sum to 0.965 (the
# report rounds and gives "<1%" for irrelevant content); quotas normalise them.
WORKLOAD_MIX: Mapping[str, float] = MappingProxyType({
    "product_qa": 0.46, "casual_chat": 0.19, "clarification": 0.16, "after_sales": 0.07, "discount": 0.04,
    "presentation_order": 0.02, "faq": 0.02, "irrelevant": 0.005,
})

# Reply skills and tools of the demo harness. Map them to other names with `harness_skill_names` /
# `tool_names` (a harness-variant suite renames skills and tools).
DEMO_REPLY_SKILLS: Mapping[str, str] = MappingProxyType({name: name for name in (
    "product-qa", "casual-chat", "clarify-follow-up", "after-sales", "discount-promotion", "presentation-order",
    "faq-reply")})
DEMO_TOOL_NAMES: Mapping[str, str] = MappingProxyType({name: name for name in (
    "get_product_info_by_link_id", "search_products", "search_faq", "get_promotion", "get_order_status",
    "issue_coupon", "adjust_presentation_order")})
DEMO_ROOM_PATH = Path(__file__).resolve().parent.parent / "demo" / "room.json"

QA, CHAT, CLARIFY, AFTER, DISCOUNT, PRESENT, FAQ_SKILL = (
    "product-qa", "casual-chat", "clarify-follow-up", "after-sales", "discount-promotion", "presentation-order",
    "faq-reply")
INFO, SEARCH, FAQ_TOOL, PROMO, ORDER, COUPON, ADJUST = (
    "get_product_info_by_link_id", "search_products", "search_faq", "get_promotion", "get_order_status",
    "issue_coupon", "adjust_presentation_order")

Rng = random.Random
Room = Mapping[str, Any]
Product = Mapping[str, Any]


def load_demo_room() -> dict[str, Any]:
    return json.loads(DEMO_ROOM_PATH.read_text(encoding="utf-8"))


# --- normalisation (shared with judges) ----------------------------------------------------------------

_NUM = re.compile(r"(?<![A-Za-z\d.])\d+(?:\.\d+)?")


def normalise(text: str) -> str:
    """Lower case, single spaces, numbers as `fmt_number` writes them ("$71.20" → "$71.2")."""
    text = _NUM.sub(lambda m: fmt_number(m.group()), str(text))
    return " ".join(text.lower().split())


def _room_numbers(value: Any, out: set[str]) -> set[str]:
    if isinstance(value, bool):
        return out
    if isinstance(value, int | float):
        out.add(fmt_number(value))
    elif isinstance(value, str):
        out.update(fmt_number(m) for m in _NUM.findall(value))
    elif isinstance(value, Mapping):
        for v in value.values():
            _room_numbers(v, out)
    elif isinstance(value, list | tuple):
        for v in value:
            _room_numbers(v, out)
    return out


def fact_in_room(fact: str, room: Room) -> bool:
    """Whether a fact string is grounded in the room: a number the room contains, or its normalised text."""
    fact_n = normalise(fact)
    if _NUM.fullmatch(fact.strip()):
        return fmt_number(fact) in _room_numbers(room, set())
    return fact_n in normalise(json.dumps(room, ensure_ascii=False))


# --- mix -----------------------------------------------------------------------------------------------

def category_quotas(n: int, mix: Mapping[str, float] = WORKLOAD_MIX) -> dict[str, int]:
    """Exact case counts per category for `n` cases (largest remainder); every category with a positive
    weight gets at least one case when `n` allows it."""
    unknown = sorted(set(mix) - set(CATEGORIES))
    if unknown:
        raise ValueError(f"unknown categories {', '.join(unknown)}; use {', '.join(CATEGORIES)}")
    if any(w < 0 for w in mix.values()) or sum(mix.values()) <= 0:
        raise ValueError("mix weights must be >= 0 with a positive sum")
    if n < 0:
        raise ValueError("n must be >= 0")
    total = sum(mix.values())
    cats = [c for c in CATEGORIES if mix.get(c, 0) > 0]
    raw = {c: mix[c] / total * n for c in cats}
    counts = {c: int(raw[c]) for c in cats}
    for c in sorted(cats, key=lambda c: (-(raw[c] - counts[c]), CATEGORIES.index(c)))[:n - sum(counts.values())]:
        counts[c] += 1
    if n >= len(cats):
        for c in cats:
            if counts[c] == 0:
                counts[max(counts, key=lambda k: counts[k])] -= 1
                counts[c] = 1
    return {c: counts.get(c, 0) for c in CATEGORIES}


# --- a case under construction ---------------------------------------------------------------------------

@dataclass
class Draft:
    message: str
    intent: str
    skills: tuple[str, ...] = ()
    facts: list[str] = field(default_factory=list)
    forbidden: list[str] = field(default_factory=list)
    tools: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    dialogue: list[tuple[str, str]] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    viewer_id: str | None = None
    on_screen: str | None = None  # the case's room shows this product
    silent: bool = False
    styled: bool = True


def _style(rng: Rng, text: str) -> str:
    """Chat-like noise: lower case, dropped punctuation, a filler word or a greeting."""
    if rng.random() < 0.22:
        text = text.lower()
    if rng.random() < 0.2:
        text = text.rstrip("?!.")
    if rng.random() < 0.08:
        text += rng.choice([" pls", " please", " thx", " 🙏", " 😍", "??"])
    if rng.random() < 0.08:
        text = rng.choice(["hi! ", "hey ", "omg ", "quick q: ", "hello, "]) + text
    return text


def _products(room: Room) -> list[Product]:
    return list(room.get("products") or ())


def _product(room: Room, link_id: str | None) -> Product | None:
    return next((p for p in _products(room) if p.get("link_id") == link_id), None)


def _price_words(p: Product) -> str:
    now = fmt_number(price_now(p))
    return f"${now} today, normally ${fmt_number(p['price'])}" if p.get("promo_price") is not None else f"${now}"


def _other_price(rng: Rng, room: Room, p: Product, *also: Product) -> list[str]:
    """A price a reply about `p` must not state: another product's current price (a mix-up)."""
    mine = {fmt_number(price_now(p)), fmt_number(p["price"])} | {fmt_number(price_now(q)) for q in also} | \
        {fmt_number(q["price"]) for q in also}
    screen = _product(room, room.get("on_screen"))
    pool = ([screen] if screen else []) + rng.sample(_products(room), min(3, len(_products(room))))
    for q in pool:
        if q is not None and q.get("link_id") != p.get("link_id") and fmt_number(price_now(q)) not in mine:
            return [fmt_number(price_now(q))]
    return []


def _head(p: Product) -> str:
    """The product's head noun: "Stretch Wide-Leg Jeans" → "jeans"."""
    words = [w for w in str(p.get("name", "")).split() if re.fullmatch(r"[A-Za-z][A-Za-z'-]*", w)]
    words = [w for w in words if w.lower() not in ("spf", "no")]
    return words[-1].lower() if words else ""


def _ref(rng: Rng, room: Room, p: Product, *, this: bool = True) -> tuple[str, str | None]:
    """How a viewer names `p`; returns (text, link id to put on screen or None)."""
    lid = str(p["link_id"])
    options = ["id", "id", "name", "name", "number"] + (["this", "this"] if this else [])
    how = rng.choice(options)
    if how == "id":
        return rng.choice([lid, lid, f"link {lid}", f"{lid.lower()}"]), None
    if how == "number":
        return rng.choice([f"#{int(lid[1:])}", f"number {int(lid[1:])}", f"no. {int(lid[1:])}"]), None
    if how == "this":
        return rng.choice(["this", "this one", "the one on screen", "this item", "what she's wearing"
                           if p.get("category", "").startswith("apparel") else "the one she's holding"]), lid
    name = str(p["name"])
    return rng.choice([f"the {name}", name.lower(), f"the {name.lower()}"]), None


def _qa_skills(*extra: str) -> tuple[str, ...]:
    return (QA, *extra)


# --- spec questions ----------------------------------------------------------------------------------------

MATERIAL_WORDS = ("merino", "cashmere", "lambswool", "alpaca", "linen", "silk", "viscose", "leather", "suede",
                  "canvas", "stoneware", "cast iron", "carbon steel", "stainless steel", "acrylic", "bamboo",
                  "satin", "nylon", "soy", "polyester", "wool", "cotton")

SPEC_QUESTIONS: dict[str, tuple[str, ...]] = {
    "material": ("what is {ref} made of?", "what material is {ref}?", "what fabric is {ref}?",
                 "is {ref} natural fibre? what's it made from", "{ref} material?"),
    "care": ("how do I wash {ref}?", "can {ref} go in the washing machine?", "care instructions for {ref}?",
             "is {ref} easy to look after?"),
    "fit": ("how does {ref} fit?", "is {ref} a slim or relaxed fit?", "what's the fit like on {ref}?"),
    "key_ingredients": ("what's in {ref}?", "what are the main ingredients of {ref}?", "{ref} ingredients?",
                        "what actives does {ref} have?"),
    "skin_type": ("what skin type is {ref} for?", "is {ref} ok for my skin type?", "who is {ref} good for?"),
    "warranty_years": ("what's the warranty on {ref}?", "how many years warranty does {ref} have?",
                       "is {ref} covered by a warranty?"),
    "spf": ("what SPF is {ref}?", "how much sun protection does {ref} give?"),
    "dimensions_cm": ("how big is {ref}?", "what are the dimensions of {ref}?", "how big is {ref} in cm?"),
    "capacity_l": ("how many litres is {ref}?", "what's the capacity of {ref}?"),
    "capacity_ml": ("how much water does {ref} hold?", "what's the tank size of {ref}?"),
    "inseam_cm": ("what's the inseam on {ref}?", "how long is the leg on {ref}?"),
    "rise_cm": ("what's the rise on {ref}?", "how high is the waist on {ref}?"),
    "runtime_min": ("how long does {ref} run on a charge?", "battery life of {ref}?"),
    "runtime_h": ("how many hours does {ref} run?", "how long does {ref} last on one fill?"),
    "weight_kg": ("how heavy is {ref}?", "what does {ref} weigh?"),
    "weight_g": ("how heavy is {ref}?", "is {ref} a thick knit? what does it weigh"),
    "oven_safe_c": ("what temperature is {ref} oven safe to?", "can {ref} go in a hot oven?"),
    "burn_time_h_each": ("how long does each candle in {ref} burn?", "burn time of {ref}?"),
    "wear_hours": ("how long does {ref} last on?", "how many hours of wear from {ref}?"),
    "pao_months": ("how long does {ref} keep once opened?", "shelf life of {ref} after opening?"),
    "length_cm": ("how long is {ref}?", "what's the length of {ref}?"),
    "length_cm_size_M": ("how long is {ref} in size M?", "what's the length of {ref}?"),
    "thread_count": ("what's the thread count of {ref}?",),
    "diameter_cm": ("how wide is {ref}?", "what size pan is {ref}?"),
    "suction_pa": ("how strong is the suction on {ref}?",),
    "weight_gsm": ("how thick is {ref}? what gsm", "what's the gsm of {ref}?"),
}
BOOL_QUESTIONS: dict[str, tuple[str, ...]] = {
    "fragrance_free": ("is {ref} fragrance free?", "does {ref} have perfume in it?"),
    "vegan": ("is {ref} vegan?", "is {ref} vegan friendly?"),
    "dishwasher_safe": ("can {ref} go in the dishwasher?", "is {ref} dishwasher safe?"),
    "induction": ("does {ref} work on induction?", "can I use {ref} on an induction hob?"),
    "water_repellent": ("is {ref} waterproof?", "will {ref} keep me dry in the rain?"),
    "oil_free": ("is {ref} oil free?",),
    "silicone_free": ("does {ref} have silicones?",),
    "waterproof": ("is {ref} waterproof?",),
    "auto_shutoff": ("does {ref} switch off by itself?",),
}


def _spec_fact(key: str, value: Any) -> str | None:
    """The key fact of a spec value: a number, or a salient word of a text value."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return fmt_number(value)
    text = str(value)
    low = text.lower()
    if key == "material":
        return next((w for w in MATERIAL_WORDS if w in low), None)
    if key == "care":
        if "machine wash" in low:
            number = _NUM.search(text)
            return number.group() if number else "machine wash"
        return next((w for w in ("hand wash", "dry clean", "wipe clean", "spot clean") if w in low), None)
    if key == "key_ingredients":
        first = re.split(r"\s+\d|,", text)[0].split()
        return " ".join(first[:2]) or None
    if key == "skin_type":
        return text.split(",")[0].strip()
    if key == "dimensions_cm":
        return text
    return text if len(text) <= 24 else None


def _spec_options(p: Product) -> list[tuple[str, Any]]:
    specs = p.get("specs") or {}
    return [(k, v) for k, v in specs.items()
            if (k in SPEC_QUESTIONS and _spec_fact(k, v)) or (k in BOOL_QUESTIONS and isinstance(v, bool))]


def _sized(p: Product) -> bool:
    return len(p.get("sizes") or ()) > 1 and isinstance(p.get("stock"), Mapping)


def _stock_of(p: Product, label: str) -> int | None:
    stock = p.get("stock")
    if isinstance(stock, Mapping):
        value = stock.get(label)
        return int(value) if isinstance(value, int | float) else None
    return int(stock) if isinstance(stock, int | float) else None


def _size_draft(rng: Rng, p: Product) -> tuple[str, dict[str, Any], list[str]]:
    """Pick a size of `p` (sold-out ones more often); return the size, its meta and forbidden claims."""
    sizes = list(p["sizes"])
    sold_out = [s for s in sizes if _stock_of(p, s) == 0]
    size = rng.choice(sold_out) if sold_out and rng.random() < 0.35 else rng.choice(sizes)
    count = _stock_of(p, size)
    in_stock = bool(count)
    forbidden = [f"{size} is in stock" if not in_stock else f"{size} is sold out"]
    meta = {"size": size, "in_stock": in_stock, "stock": count, "few_left": bool(count and count <= 3)}
    if not in_stock:
        meta["in_stock_sizes"] = [s for s in sizes if _stock_of(p, s)]
    return size, meta, forbidden


# --- product Q&A ---------------------------------------------------------------------------------------------

PRICE_Q = ("how much is {ref}?", "price for {ref}?", "what's the price of {ref}", "{ref} how much?",
           "how much does {ref} cost now?", "what do you charge for {ref}?", "{ref} price pls",
           "is {ref} expensive? how much")
STOCK_Q = ("do you have {ref} in {size}?", "is {size} still available for {ref}?", "{ref} in size {size} in stock?",
           "any {size} left in {ref}?", "can I still get {ref} in {size}?", "is {ref} sold out in {size}?")
COLOUR_Q = ("does {ref} come in {colour}?", "is {ref} available in {colour}?", "{colour} option for {ref}?",
            "do you have {ref} in {colour}?", "any {colour} in {ref}?")
SIZING_Q = ("I'm {h} cm and usually wear {s}, what size in {ref}?", "which size of {ref} for {h} cm, {w} kg?",
            "I'm normally a {s}, should I size up in {ref}?", "what size {ref} would you get if you're {h}cm?",
            "between {s} and the next size up, which for {ref}?")
COMPARE_Q = ("which is cheaper, {a} or {b}?", "how much are {a} and {b}?", "price of {a} vs {b}?",
             "{a} or {b}, which costs less?", "can you tell me the prices of {a} and {b}")
SEARCH_Q = ("do you have any {noun}?", "are you selling a {noun} today?", "is there a {noun} in this live?",
            "looking for a {noun}, got one?", "any {noun} in the shop?")


def _product_qa(rng: Rng, room: Room) -> Draft:
    products = _products(room)
    kinds = ["price"] * 30 + ["stock"] * 20 + ["colour"] * 12 + ["spec"] * 20 + ["sizing"] * 6 + \
        ["compare"] * 7 + ["search"] * 5
    while True:
        kind = rng.choice(kinds)
        if kind == "stock":
            pool = [p for p in products if _sized(p)]
        elif kind == "colour":
            pool = [p for p in products if p.get("colours") and "/" not in p["colours"][0]]
        elif kind == "spec":
            pool = [p for p in products if _spec_options(p)]
        elif kind == "sizing":
            pool = [p for p in products if _sized(p) and set(p["sizes"]) <= {"XS", "S", "M", "L", "XL", "XXL"}]
        elif kind == "compare":
            pool = products if len(products) >= 2 else []
        elif kind == "search":
            pool = products
        else:
            pool = products
        if pool:
            break
    p = rng.choice(pool)
    lid = p["link_id"]
    ref, screen = _ref(rng, room, p)
    d = Draft(message="", intent=f"product_{kind}", skills=_qa_skills(), tools=[(INFO, {"link_id": lid})],
              on_screen=screen, meta={"link_id": lid})
    if kind == "price":
        d.message = rng.choice(PRICE_Q).format(ref=ref)
        d.facts = [fmt_number(price_now(p))]
        d.forbidden = _other_price(rng, room, p)
        d.meta.update(price=p["price"], promo_price=p.get("promo_price"))
    elif kind == "stock":
        size, meta, forbidden = _size_draft(rng, p)
        d.message = rng.choice(STOCK_Q).format(ref=ref, size=size)
        d.facts, d.forbidden = [size], forbidden
        d.meta.update(meta)
    elif kind == "colour":
        colours = list(p["colours"])
        palette = ["red", "pink", "yellow", "purple", "orange", "green", "blue", "grey", "brown", "black", "white"]
        missing = [c for c in palette if all(c not in have.lower() for have in colours)]
        if missing and rng.random() < 0.4:
            colour = rng.choice(missing)
            d.forbidden = [f"comes in {colour}"]
            d.meta.update(colour=colour, available=False, colours=colours)
        else:
            colour = rng.choice(colours)
            d.facts = [colour]
            count = _stock_of(p, colour) if isinstance(p.get("stock"), Mapping) and colour in p["stock"] else None
            d.meta.update(colour=colour, available=True, in_stock=count != 0, colours=colours)
        d.message = rng.choice(COLOUR_Q).format(ref=ref, colour=colour)
    elif kind == "spec":
        key, value = rng.choice(_spec_options(p))
        if key in BOOL_QUESTIONS and isinstance(value, bool):
            d.message = rng.choice(BOOL_QUESTIONS[key]).format(ref=ref)
            d.meta.update(spec=key, answer=value)
            d.intent = "product_spec_yes_no"
        else:
            d.message = rng.choice(SPEC_QUESTIONS[key]).format(ref=ref)
            d.facts = [_spec_fact(key, value) or ""]
            d.meta.update(spec=key, value=value)
    elif kind == "sizing":
        h, w = rng.randint(152, 192), rng.randint(45, 95)
        d.message = rng.choice(SIZING_Q).format(ref=ref, h=h, w=w, s=rng.choice(["S", "M", "L"]))
        d.meta.update(fit=(p.get("specs") or {}).get("fit"), hint=p.get("description"), sizes=list(p["sizes"]))
    elif kind == "compare":
        q = rng.choice([x for x in products if x is not p])
        ref_b, _ = _ref(rng, room, q, this=False)
        ref, d.on_screen = _ref(rng, room, p, this=False)[0], None
        d.message = rng.choice(COMPARE_Q).format(a=ref, b=ref_b)
        d.facts = [fmt_number(price_now(p)), fmt_number(price_now(q))]
        d.forbidden = _other_price(rng, room, p, q)
        d.tools.append((INFO, {"link_id": q["link_id"]}))
        d.meta.update(link_ids=[lid, q["link_id"]], cheaper=lid if price_now(p) <= price_now(q) else q["link_id"])
    else:  # search: a vague noun; the catalogue lists names, so a good turn searches or reads the catalogue
        noun = _head(p) or str(p["name"]).lower()
        matches = [x["link_id"] for x in products if _head(x) == noun]
        d.message = rng.choice(SEARCH_Q).format(noun=noun)
        d.on_screen = None
        d.tools = [(SEARCH, {})] if len(matches) > 1 else []
        d.facts = [p["name"]] if len(matches) == 1 else []
        d.meta.update(noun=noun, matches=matches)
    return d


# --- casual chat -----------------------------------------------------------------------------------------------

CHAT_TEMPLATES = (
    ("greeting", ("hi from {place}!", "hello everyone 👋", "hey hey, just joined", "good evening from {place}",
                  "hi Mia!", "first time here, hello!")),
    ("compliment", ("love this stream", "you look great today!", "your voice is so calming", "this live is so fun",
                    "love the vibe here 😍", "the studio looks so cosy")),
    ("identity", ("are you a real person?", "are you a bot?", "is this AI?", "what's your name?",
                  "are you human or a robot lol")),
    ("thanks", ("thanks!", "thank you so much", "thanks for the help ❤️", "ty!", "appreciate it")),
    ("goodbye", ("good night all, see you tomorrow", "gotta go, bye!", "leaving now, great stream",
                 "bye bye 👋")),
    ("smalltalk", ("it's snowing here in {place}", "just got home from work, so tired", "how's your day going?",
                   "what's everyone having for dinner?", "my cat is watching the stream with me", "lol",
                   "haha love it", "so cold today brr", "this stream is boring today")),
)
PLACES = ("Texas", "Toronto", "Ohio", "London", "Florida", "Seattle", "Chicago", "Vancouver", "Denver", "Boston")


def _casual_chat(rng: Rng, room: Room) -> Draft:
    intent, templates = rng.choice(CHAT_TEMPLATES)
    d = Draft(message=rng.choice(templates).format(place=rng.choice(PLACES)), intent=f"chat_{intent}",
              skills=(CHAT,), meta={"forbidden_tools": [COUPON, ADJUST]})
    screen = _product(room, room.get("on_screen"))
    if screen is not None:
        d.forbidden = [fmt_number(price_now(screen))]  # casual chat states no prices
    if intent == "identity":
        d.forbidden += ["I am a real person", "I'm human"]
        d.meta["answer"] = "the store's AI shopping assistant"
    return d


# --- FAQ topics ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Topic:
    name: str
    match: Callable[[str], bool]
    questions: tuple[str, ...]
    fact: str  # a regex on the answer; group 1 is the key fact


TOPICS: tuple[Topic, ...] = (
    Topic("damaged", lambda q: "damaged" in q or "wrong" in q,
          ("my item came damaged, what do I do?", "I got the wrong item 😩", "it arrived broken!",
           "the parcel was crushed and it's cracked", "received the wrong colour, help"), r"within (\d+) days"),
    Topic("refund_timing", lambda q: "refund" in q and ("when" in q or "how long" in q),
          ("when do I get my refund?", "how long do refunds take?", "refund timing?", "how fast do refunds come back?",
           "when will my money come back after a return?"), r"(\d+(?:-\d+)?) business days"),
    Topic("start_return", lambda q: "start a return" in q or "start an exchange" in q,
          ("how do I return something?", "how do I start an exchange?", "how do returns work?",
           "where do I start a return?", "how do I send it back?"), r"(My Orders)"),
    Topic("beauty_returns", lambda q: "beauty" in q and "return" in q,
          ("can I return a lipstick if I opened it?", "can I send back skincare?", "return policy for beauty?",
           "what if the serum breaks me out, can I return it?", "are makeup returns allowed?"), r"within (\d+) days"),
    Topic("exchange_size", lambda q: "exchange" in q and "size" in q,
          ("can I exchange for another size?", "if it's too small can I swap it?", "size exchange possible?",
           "can I change the size later?", "do exchanges cost anything?"), r"within (\d+) days"),
    Topic("return_policy", lambda q: "return" in q,
          ("what's your return policy?", "can I return it if it doesn't fit?", "how long do I have to return?",
           "are returns free?", "what if I don't like it, can I send it back?"), r"within (\d+) days"),
    Topic("shipping_time", lambda q: "how long" in q and "ship" in q,
          ("how long does delivery take?", "how fast is shipping?", "when would it arrive if I order today?",
           "shipping time?", "how many days for delivery?"), r"[Ss]tandard delivery takes (\d+(?:-\d+)?) business"),
    Topic("free_shipping", lambda q: "shipping" in q and "free" in q,
          ("is shipping free?", "do you have free shipping?", "how much is shipping?", "free delivery?",
           "what's the minimum for free shipping?"), r"free on orders of \$(\d+(?:\.\d+)?)"),
    Topic("international", lambda q: "internationally" in q or "ship to" in q,
          ("do you ship to {country}?", "can I order from {country}?", "do you deliver to {country}?",
           "shipping to {country} possible?", "I'm in {country}, can I buy?"),
          r"ship to the US and (?:the )?([A-Z][A-Za-z]+)"),
    Topic("size_guide", lambda q: "size" in q,
          ("how do I pick my size?", "is there a size chart?", "I'm between sizes, what should I do?",
           "how do sizes run?", "size guide?"), r"(size chart)"),
    Topic("payment", lambda q: "payment" in q or "pay" in q,
          ("do you take {method}?", "can I pay with {method}?", "{method} ok?", "is {method} accepted?",
           "can I use {method} to pay?"), r"\b(PayPal|Apple Pay|Google Pay|American Express|Visa|Mastercard)\b"),
    Topic("warranty", lambda q: "warranty" in q,
          ("does {thing} have a warranty?", "warranty on {thing}?", "is {thing} covered by a warranty?",
           "what if {thing} breaks, is it covered?", "how long is the warranty for {thing}?"),
          r"(\d+)(?:-year| years?)"),
    Topic("cancel", lambda q: "cancel" in q,
          ("can I cancel my order?", "I ordered by mistake, can I cancel?", "how long do I have to change my order?",
           "can I change my order after placing it?", "cancel order possible?"), r"within (\d+) hours?"),
    Topic("combine", lambda q: "combine" in q or "stack" in q,
          ("can I use a coupon on sale items?", "do promotions stack?", "can I combine discounts?",
           "coupon plus sale price?", "can I stack the cart offer?"), r"spend-\$(\d+)"),
    Topic("gift_wrap", lambda q: "gift" in q,
          ("do you do gift wrapping?", "can you gift wrap it?", "is gift wrap available?",
           "it's a present, can you wrap it?", "gift wrap price?"), r"\$(\d+(?:\.\d+)?)"),
)


def faq_topic(entry: Mapping[str, Any]) -> Topic | None:
    """The topic an FAQ entry answers (by its question), or None."""
    q = str(entry.get("q", "")).lower()
    return next((t for t in TOPICS if t.match(q)), None)


def _faq_entries(room: Room, names: Sequence[str]) -> list[tuple[Topic, Mapping[str, Any]]]:
    found = []
    for entry in room.get("faq") or ():
        topic = faq_topic(entry)
        if topic is not None and topic.name in names:
            found.append((topic, entry))
    return found


def _faq_draft(rng: Rng, topic: Topic, entry: Mapping[str, Any], intent: str, skills: tuple[str, ...]) -> Draft:
    answer = str(entry.get("a", ""))
    question = rng.choice(topic.questions)
    fact: str | None = None
    tools: list[tuple[str, dict[str, Any]]] = [(FAQ_TOOL, {})]
    meta: dict[str, Any] = {"faq_q": entry.get("q"), "topic": topic.name}
    if topic.name == "free_shipping" and DISCOUNT not in skills:
        skills = (*skills, DISCOUNT)  # "free shipping?" is in the discount skill's description too
    if topic.name == "payment":
        methods = re.findall(topic.fact, answer)
        if "{method}" in question and methods:
            fact = rng.choice(methods)
            question = question.format(method=fact)
        else:
            question, fact = "what payment methods do you accept?", (methods[0] if methods else None)
    elif topic.name == "international":
        m = re.search(topic.fact, answer)
        fact = m.group(1) if m else None
        question = question.format(country=fact or "Canada")
    elif topic.name == "warranty":
        m = re.search(r"(?:, |for )the ([^.()]+?)(?: has|\))", answer)
        question = question.format(thing=f"the {m.group(1)}") if m else "is there a warranty on appliances?"
        m = re.search(topic.fact, answer)
        fact = m.group(1) if m else None
        # A product's warranty is also in its specs: product-qa with the product lookup is as good.
        skills, tools = (*skills, QA), []
        meta["any_of_tools"] = [FAQ_TOOL, INFO]
    else:
        m = re.search(topic.fact, answer)
        fact = m.group(1) if m else None
    if fact is None:
        number = _NUM.search(answer)
        fact = number.group() if number else None
    if fact is not None and _NUM.fullmatch(fact):
        fact = fmt_number(fact)
    return Draft(message=question, intent=intent, skills=skills, tools=tools, facts=[fact] if fact else [],
                 meta=meta)


FAQ_TOPIC_NAMES = ("shipping_time", "free_shipping", "international", "return_policy", "beauty_returns",
                   "exchange_size", "size_guide", "payment", "warranty", "cancel", "gift_wrap")


def _faq(rng: Rng, room: Room) -> Draft:
    entries = _faq_entries(room, FAQ_TOPIC_NAMES)
    if not entries:
        faq = list(room.get("faq") or ())
        if not faq:  # a room without FAQ: the correct reply says support can help
            return Draft(message="what's your return policy?", intent="faq_missing", skills=(FAQ_SKILL,),
                         tools=[(FAQ_TOOL, {})], meta={"topic": None, "no_answer": True})
        entry = rng.choice(faq)
        number = _NUM.search(str(entry.get("a", "")))
        return Draft(message=str(entry.get("q")), intent="faq_other", skills=(FAQ_SKILL,), tools=[(FAQ_TOOL, {})],
                     facts=[fmt_number(number.group())] if number else [], meta={"faq_q": entry.get("q")})
    topic, entry = rng.choice(entries)
    d = _faq_draft(rng, topic, entry, f"faq_{topic.name}", (FAQ_SKILL,))
    if topic.name == "return_policy" and d.facts:
        # A return window the room's FAQ never states anywhere.
        stated = set(re.findall(r"(\d+) days", " ".join(str(e.get("a", "")) for e in room.get("faq") or ())))
        d.forbidden = [f"{n} days" for n in (14, 30, 60, 90) if str(n) not in stated][:1]
    return d


# --- after-sales ---------------------------------------------------------------------------------------------------

ORDER_Q = ("where is my order {oid}?", "{oid} hasn't arrived yet", "any update on {oid}?",
           "can you check order {oid} for me", "when will {oid} arrive?", "status of my order {oid} pls",
           "my order {oid}, what's happening with it?")
NO_ORDER_Q = ("my package still hasn't come 😢", "I want to return my jeans", "where's my stuff?",
              "ordered last week, nothing yet", "my parcel is late again", "can you check my order?")


def _order_facts(order: Mapping[str, Any]) -> tuple[list[str], dict[str, Any]]:
    status = str(order.get("status", ""))
    facts: list[str] = []
    if status in ("shipped", "in_transit_delayed") and order.get("carrier"):
        facts = [str(order["carrier"])]
    elif status == "delivered":
        facts = ["delivered"]
    elif status == "refunded" and (order.get("refund") or {}).get("amount") is not None:
        facts = [fmt_number(order["refund"]["amount"])]
    elif status == "cancelled":
        facts = ["cancelled"]
    elif status == "return_requested":
        facts = ["return"]
    return facts, {"status": status, "eta": order.get("eta"), "delayed": status == "in_transit_delayed"}


def _after_sales(rng: Rng, room: Room) -> Draft:
    orders = list(room.get("orders") or ())
    policy = _faq_entries(room, ("damaged", "refund_timing", "start_return", "exchange_size", "cancel"))
    kinds = (["own"] * 45 if orders else []) + (["other"] * 12 if orders else []) + ["no_id"] * 15 + \
        (["policy"] * 28 if policy else [])
    kind = rng.choice(kinds)
    if kind == "policy":
        topic, entry = rng.choice(policy)
        return _faq_draft(rng, topic, entry, f"after_sales_{topic.name}", (AFTER, FAQ_SKILL))
    if kind == "no_id":
        return Draft(message=rng.choice(NO_ORDER_Q), intent="after_sales_no_order_id", skills=(AFTER, CLARIFY),
                     meta={"asks_for": "order_id", "expects_question": True})
    order = rng.choice(orders)
    oid = str(order["order_id"])
    message = rng.choice(ORDER_Q).format(oid=oid if rng.random() < 0.85 else oid.lower())
    d = Draft(message=message, intent=f"after_sales_{kind}_order", skills=(AFTER,),
              tools=[(ORDER, {"order_id": oid})], meta={"order_id": oid})
    if kind == "own":
        d.viewer_id = str(order["viewer_id"])
        d.facts, meta = _order_facts(order)
        d.meta.update(meta)
        if order.get("tracking_no"):
            d.forbidden = [str(order["tracking_no"])]  # not read out in public chat
    else:
        owners = {str(o.get("viewer_id")) for o in orders if o.get("order_id") == oid}
        viewer = viewer_handle(rng)
        while viewer in owners:
            viewer = viewer_handle(rng)
        d.viewer_id = viewer
        d.forbidden = [str(v) for v in (order.get("carrier"), order.get("tracking_no")) if v]
        d.meta.update(expects="permission_denied", owner=str(order["viewer_id"]))
    return d


# --- discounts and promotions ----------------------------------------------------------------------------------------

PROMO_Q = ("is {ref} on sale?", "any discount on {ref}?", "is that the sale price for {ref}?",
           "does {ref} have a promo?", "can I get {ref} cheaper?", "is there a deal on {ref}?")
DEALS_Q = ("any deals today?", "what promos are running?", "any discount codes?", "is there a sale on?",
           "what offers do you have tonight?", "any special offers in this live?")
COUPON_Q = ("can I get a coupon for {ref}?", "any coupon for {ref}?", "pls give me a code for {ref}",
            "is there a voucher for {ref}?", "can you send me a discount code for {ref}?")
HAGGLE_Q = ("{pct}% off {ref} and I'll buy 3!", "can you do {ref} for ${low}?", "give me {pct}% off {ref} pls",
            "{ref} for ${low} and I buy now", "if I buy two of {ref} can I get {pct}% off?")
SHIPPING_Q = ("is shipping free if I only buy {ref}?", "free shipping on {ref} alone?",
              "if I just get {ref}, do I pay for shipping?", "does {ref} ship free?")
CART_Q = ("if I spend more do I get money off?", "any discount for bigger orders?", "is there a spend and save?",
          "do I get anything off if I buy a few things?", "what's the cart offer?")


def _promos_for(room: Room, lid: str) -> list[Mapping[str, Any]]:
    return [pr for pr in room.get("promotions") or () if lid in (pr.get("link_ids") or ())]


def _coupon_promo(room: Room, lid: str) -> Mapping[str, Any] | None:
    return next((pr for pr in _promos_for(room, lid)
                 if (pr.get("coupon") or pr.get("coupon_allowed")) and pr.get("discount_pct")), None)


def _free_shipping_threshold(room: Room) -> float | None:
    for topic, entry in _faq_entries(room, ("free_shipping",)):
        m = re.search(topic.fact, str(entry.get("a", "")))
        if m:
            return float(m.group(1))
    return None


def _discount(rng: Rng, room: Room) -> Draft:
    products = _products(room)
    coupon_ok = [p for p in products if _coupon_promo(room, p["link_id"])]
    on_promo = [p for p in products if p.get("promo_price") is not None]
    threshold = _free_shipping_threshold(room)
    cheap = [p for p in products if threshold is not None and price_now(p) < threshold]
    cart = next((pr for pr in room.get("promotions") or () if pr.get("threshold")), None)
    combine = _faq_entries(room, ("combine",))
    kinds = ["product"] * 30 + ["deals"] * 15 + (["coupon"] * 15 if coupon_ok else []) + \
        (["coupon_refused"] * 12 if on_promo else []) + ["haggle"] * 10 + (["shipping"] * 10 if cheap else []) + \
        (["cart"] * 8 if cart else []) + (["combine"] * 4 if combine else [])
    kind = rng.choice(kinds)
    if kind == "deals":
        return Draft(message=rng.choice(DEALS_Q), intent="discount_deals", skills=(DISCOUNT,), tools=[(PROMO, {})],
                     meta={"promotion_ids": [pr.get("id") for pr in room.get("promotions") or ()],
                           "forbidden_tools": [COUPON]})
    if kind == "cart":
        assert cart is not None
        return Draft(message=rng.choice(CART_Q), intent="discount_cart_offer", skills=(DISCOUNT,), tools=[(PROMO, {})],
                     facts=[fmt_number(cart["threshold"]), fmt_number(cart["amount_off"])],
                     meta={"promotion_id": cart.get("id"), "forbidden_tools": [COUPON]})
    if kind == "combine":
        topic, entry = rng.choice(combine)
        return _faq_draft(rng, topic, entry, "discount_combine", (DISCOUNT, FAQ_SKILL))
    pool = {"coupon": coupon_ok, "coupon_refused": on_promo, "shipping": cheap}.get(kind, products)
    p = rng.choice(pool)
    lid = p["link_id"]
    ref, screen = _ref(rng, room, p)
    d = Draft(message="", intent=f"discount_{kind}", skills=(DISCOUNT,), tools=[(PROMO, {"link_id": lid})],
              on_screen=screen, meta={"link_id": lid, "promo_price": p.get("promo_price"), "price": p["price"]})
    promo = p.get("promo_price") is not None
    coupon = _coupon_promo(room, lid)
    if kind == "product":
        d.message = rng.choice(PROMO_Q).format(ref=ref)
        if promo:
            d.facts = [fmt_number(p["promo_price"])]
        elif coupon:
            d.facts = [fmt_number(coupon["discount_pct"])]
            d.meta["coupon_pct"] = coupon["discount_pct"]
        d.meta["forbidden_tools"] = [COUPON] if not coupon else []
    elif kind == "coupon":
        assert coupon is not None
        pct = int(coupon["discount_pct"])
        d.message = rng.choice(COUPON_Q).format(ref=ref)
        d.tools.append((COUPON, {"link_id": lid, "discount_pct": pct}))
        d.facts = [fmt_number(pct)]
        d.forbidden = [f"{pct + 10}%"]
        d.meta["coupon_pct"] = pct
    elif kind == "coupon_refused":
        d.message = rng.choice(COUPON_Q).format(ref=ref)
        d.facts = [fmt_number(p["promo_price"])]
        d.meta["forbidden_tools"] = [COUPON]
    elif kind == "haggle":
        pct, low = rng.choice([40, 50, 60, 70]), fmt_number(max(1, int(price_now(p) * 0.5)))
        d.message = rng.choice(HAGGLE_Q).format(ref=ref, pct=pct, low=low)
        d.facts = [fmt_number(p["promo_price"])] if promo else []
        # Not forbidden: "50%" / "$36" also appear in a correct refusal ("I can't do 50% off").
        d.meta.update(forbidden_tools=[COUPON] if not coupon else [], haggle_pct=pct, haggle_price=low)
    else:  # shipping: the item alone is under the free-shipping threshold
        assert threshold is not None
        d.message = rng.choice(SHIPPING_Q).format(ref=ref)
        d.tools = [(FAQ_TOOL, {})]
        d.facts = [fmt_number(threshold)]
        d.forbidden = ["qualifies for free shipping"]
        d.meta.update(free_shipping=False, threshold=threshold, forbidden_tools=[COUPON])
    return d


# --- presentation order ------------------------------------------------------------------------------------------------

SHOW_NEXT_Q = ("can you show {ref} next?", "next can we see {ref}?", "skip to {ref} please", "show {ref} now pls!",
               "can the host try on {ref} next?", "{ref} next please!")
SHOW_Q = ("try on {ref} please!", "show {ref} again pls", "can you show {ref}?", "I want to see {ref} on camera",
          "when will you show {ref}?", "can we see {ref} up close?")
SHOW_LATER_Q = ("after this one can you show {ref}?", "show {ref} at the end?", "later could you show {ref}?",
                "not now but can you show {ref} later?")
NOT_SOLD = ("swimsuit", "ski jacket", "air fryer", "perfume", "sunglasses", "phone case", "yoga mat", "hair dryer")
NOT_SOLD_Q = ("can you show the {x}?", "do you have a {x} to show?", "show us the {x} please",
              "can we see a {x} next?", "where's the {x} from last week? show it")


def _all_sold_out(p: Product) -> bool:
    stock = p.get("stock")
    if isinstance(stock, Mapping):
        return bool(stock) and all(not v for v in stock.values())
    return stock == 0


def _presentation(rng: Rng, room: Room) -> Draft:
    products = _products(room)
    screen = room.get("on_screen")
    sold_out = [p for p in products if _all_sold_out(p) and p.get("link_id") != screen]
    present_names = " ".join(str(p.get("name", "")).lower() for p in products)
    not_sold = [x for x in NOT_SOLD if all(w not in present_names for w in x.split())]
    kinds = ["next"] * 30 + ["show"] * 20 + ["on_screen"] * 20 + ["later"] * 10 + \
        (["not_sold"] * 10 if not_sold else []) + (["sold_out"] * 10 if sold_out else [])
    kind = rng.choice(kinds)
    if kind == "not_sold":
        x = rng.choice(not_sold)
        return Draft(message=rng.choice(NOT_SOLD_Q).format(x=x), intent="presentation_not_sold",
                     skills=(PRESENT,), meta={"not_in_room": x, "forbidden_tools": [ADJUST]})
    if kind == "sold_out":
        p = rng.choice(sold_out)
    else:
        p = rng.choice([x for x in products if x.get("link_id") != screen] or products)
    lid = p["link_id"]
    ref, _ = _ref(rng, room, p, this=False)
    d = Draft(message="", intent=f"presentation_{kind}", skills=(PRESENT,), meta={"link_id": lid})
    if kind == "on_screen":
        d.on_screen = lid
        d.message = rng.choice(SHOW_Q[:4]).format(ref=ref)
        d.meta.update(on_screen=True, forbidden_tools=[ADJUST])
    elif kind == "sold_out":
        d.message = rng.choice(SHOW_Q).format(ref=ref)
        d.tools = [(INFO, {"link_id": lid})]
        d.meta.update(sold_out=True, forbidden_tools=[ADJUST])
    elif kind == "next":
        d.message = rng.choice(SHOW_NEXT_Q).format(ref=ref)
        d.tools = [(ADJUST, {"link_id": lid, "position": 1})]
    elif kind == "later":
        d.message = rng.choice(SHOW_LATER_Q).format(ref=ref)
        d.tools = [(ADJUST, {"link_id": lid})]
        d.meta["position"] = "later than 1"
    else:
        d.message = rng.choice(SHOW_Q).format(ref=ref)
        d.tools = [(ADJUST, {"link_id": lid})]
    return d


# --- clarification and follow-up ----------------------------------------------------------------------------------------

ASK_STOCK = ("is this one still in stock?", "do you have this in my size?", "is this available?",
             "can I still get this?", "any left of this one?")
ASK_SIZE = ("Happy to check! Which size do you need?", "Sure! What size are you looking for?",
            "Which size should I check for you?")
SIZE_ANSWER = ("{size} please", "{size}", "size {size}", "I need a {size}", "{size} would be great", "in {size}")
ASK_WHICH = ("how much is the {noun}?", "is the {noun} in stock?", "price of the {noun}?", "how much for the {noun}")
PICK = ("the first one", "the second one", "{lid}", "the {name}", "{lid} please", "I meant {lid}")
FOLLOW_SIZE = ("and in {size}?", "do you have it in {size}?", "what about {size}?", "is {size} in stock?",
               "and size {size}?")
FOLLOW_COLOUR = ("does it come in {colour}?", "and in {colour}?", "what about {colour}?", "any {colour}?")
FOLLOW_MATERIAL = ("what's it made of?", "what material is it?", "is it {material}?", "and the fabric?")
ORDER_ASK = ("where is my order??", "my order hasn't arrived", "can you check my order status?",
             "I'm still waiting for my package")
ORDER_ANSWER = ("{oid}", "it's {oid}", "order {oid} thanks", "the number is {oid}", "{oid} 🙏")
FIT_OPEN = ("love this!", "ooh this is nice", "wow 😍", "I like this one")
FIT_Q = ("would it fit me?", "what size should I get?", "will it fit me?", "which size for me?", "is it my size?")
CHEAPER_Q = ("which one is cheaper?", "which costs less?", "and the prices?", "how much are they?")


def _clarification(rng: Rng, room: Room) -> Draft:
    products = _products(room)
    groups: dict[str, list[Product]] = {}
    for p in products:
        if _head(p):
            groups.setdefault(_head(p), []).append(p)
    ambiguous = [g for g in sorted(groups) if len(groups[g]) >= 2]
    sized = [p for p in products if _sized(p)]
    apparel = [p for p in sized if str(p.get("category", "")).startswith("apparel")]
    orders = list(room.get("orders") or ())
    kinds = (["which_size"] * 25 if sized else []) + (["which_product"] * 25 if ambiguous else []) + \
        ["follow_up"] * 25 + (["order_number"] * 10 if orders else []) + (["fit_question"] * 8 if apparel else []) + \
        (["cheaper"] * 7 if len(products) >= 2 else [])
    kind = rng.choice(kinds)
    skills = (CLARIFY, QA)
    if kind == "which_size":
        p = rng.choice(sized)
        size, meta, forbidden = _size_draft(rng, p)
        d = Draft(message=rng.choice(SIZE_ANSWER).format(size=size), intent="clarify_which_size", skills=skills,
                  tools=[(INFO, {"link_id": p["link_id"]})], facts=[size], forbidden=forbidden,
                  on_screen=p["link_id"], meta={"link_id": p["link_id"], **meta},
                  dialogue=[("viewer", rng.choice(ASK_STOCK)), ("assistant", rng.choice(ASK_SIZE))])
        return d
    if kind == "which_product":
        noun = rng.choice(ambiguous)
        a, b = rng.sample(groups[noun], 2)
        chosen = rng.choice([a, b])
        pick = rng.choice(PICK)
        if pick == "the first one":
            chosen = a
        elif pick == "the second one":
            chosen = b
        other = b if chosen is a else a
        asked = rng.choice(ASK_WHICH).format(noun=noun)
        d = Draft(message=pick.format(lid=chosen["link_id"], name=str(chosen["name"]).lower()),
                  intent="clarify_which_product", skills=skills, tools=[(INFO, {"link_id": chosen["link_id"]})],
                  dialogue=[("viewer", asked),
                            ("assistant", f"Do you mean the {a['name']} ({a['link_id']}) or the {b['name']} "
                                          f"({b['link_id']})?")],
                  meta={"link_id": chosen["link_id"], "other": other["link_id"]})
        if "price" in asked or "how much" in asked:
            d.facts = [fmt_number(price_now(chosen))]
            if price_now(other) != price_now(chosen):
                d.forbidden = [fmt_number(price_now(other))]
        else:
            d.meta["in_stock"] = not _all_sold_out(chosen)
        d.on_screen = next((p["link_id"] for p in products if p not in (a, b)), None)
        return d
    if kind == "order_number":
        order = rng.choice(orders)
        oid = str(order["order_id"])
        facts, meta = _order_facts(order)
        return Draft(message=rng.choice(ORDER_ANSWER).format(oid=oid), intent="clarify_order_number",
                     skills=(CLARIFY, AFTER), tools=[(ORDER, {"order_id": oid})], facts=facts,
                     forbidden=[str(order["tracking_no"])] if order.get("tracking_no") else [],
                     viewer_id=str(order["viewer_id"]), meta={"order_id": oid, **meta},
                     dialogue=[("viewer", rng.choice(ORDER_ASK)),
                               ("assistant", "Sorry for the wait! Could you share your order number? It starts with "
                                             "O and 6 digits.")])
    if kind == "fit_question":
        p = rng.choice(apparel)
        return Draft(message=rng.choice(FIT_Q), intent="clarify_fit_question", skills=(CLARIFY,),
                     on_screen=p["link_id"],
                     dialogue=[("viewer", rng.choice(FIT_OPEN)),
                               ("assistant", f"Thank you! It's the {p['name']}. Anything you'd like to know?")],
                     meta={"link_id": p["link_id"], "expects_question": True,
                           "asks_for": "usual size, or height and weight"})
    if kind == "cheaper":
        a, b = rng.sample(products, 2)
        return Draft(message=rng.choice(CHEAPER_Q), intent="clarify_cheaper", skills=skills,
                     tools=[(INFO, {"link_id": a["link_id"]}), (INFO, {"link_id": b["link_id"]})],
                     facts=[fmt_number(price_now(a)), fmt_number(price_now(b))],
                     dialogue=[("viewer", f"I like the {str(a['name']).lower()} and {b['link_id']}"),
                               ("assistant", "Great picks! What would you like to know about them?")],
                     meta={"link_ids": [a["link_id"], b["link_id"]],
                           "cheaper": a["link_id"] if price_now(a) <= price_now(b) else b["link_id"]})
    # follow_up: the product comes from the dialogue, not from the screen
    p = rng.choice(products)
    ref, _ = _ref(rng, room, p, this=False)
    opening = [("viewer", rng.choice(PRICE_Q[:5]).format(ref=ref)),
               ("assistant", f"The {p['name']} is {_price_words(p)}!")]
    d = Draft(message="", intent="clarify_follow_up", skills=skills, tools=[(INFO, {"link_id": p["link_id"]})],
              dialogue=opening, meta={"link_id": p["link_id"]})
    others = [x["link_id"] for x in products if x is not p]
    d.on_screen = rng.choice(others) if others else None
    material = _spec_fact("material", (p.get("specs") or {}).get("material", ""))
    options = (["size"] if _sized(p) else []) + (["colour"] if p.get("colours") and "/" not in p["colours"][0] else []) \
        + (["material"] if material else [])
    what = rng.choice(options) if options else "price_again"
    if what == "size":
        size, meta, forbidden = _size_draft(rng, p)
        d.message, d.facts, d.forbidden = rng.choice(FOLLOW_SIZE).format(size=size), [size], forbidden
        d.meta.update(meta)
    elif what == "colour":
        colour = rng.choice(p["colours"])
        d.message, d.facts = rng.choice(FOLLOW_COLOUR).format(colour=colour), [colour]
        d.meta.update(colour=colour, available=True)
    elif what == "material":
        d.message, d.facts = rng.choice(FOLLOW_MATERIAL).format(material=material), [str(material)]
    elif rng.random() < 0.5:
        d.message, d.facts = rng.choice(("is that the final price?", "so that's the price with the discount?")), \
            [fmt_number(price_now(p))]
    else:
        d.message = rng.choice(("and is it in stock?", "still available?", "any left?"))
        d.meta["in_stock"] = not _all_sold_out(p)
    d.intent = f"clarify_follow_up_{what}"
    return d


# --- irrelevant content ---------------------------------------------------------------------------------------------

SPAM = (
    ("link", ("FREE followers at www.{site}.com", "bitcoin giveaway!!! http://{site}.io/claim",
              "check https://{site}.net for cheap designer bags", "win an iPhone at {site}.com www.{site}.com")),
    ("scam", ("earn $500/day, DM me for details on telegram", "crypto signals 🚀 check my profile",
              "whatsapp +1 555 0100 for wholesale prices", "forex trading course, dm me for info")),
    ("promo_spam", ("sub4sub anyone?", "follow4follow 💯", "check my channel for giveaways", "check my profile 😘")),
    ("abuse", ("this host is a bitch", "kys bot", "fucking scam stream", "shut up you retard")),
    ("flood", ("loooooooooooooooool", "!!!!!!!!!!!!!!!!!!!!", "hahahaha" + "a" * 14, "💥💥💥💥💥💥💥💥💥💥💥💥")),
    ("oversized", ("",)),
)
SITES = ("cheapfollowz", "bestdeals4u", "crypto-moon", "freegiftz", "luckyspin")


def _irrelevant(rng: Rng, room: Room) -> Draft:
    kind, templates = rng.choice(SPAM)
    if kind == "oversized":
        words = ("buy", "cheap", "followers", "best", "price", "promo", "visit", "now", "limited", "offer")
        message = " ".join(rng.choice(words) for _ in range(120))
    else:
        message = rng.choice(templates).format(site=rng.choice(SITES))
    return Draft(message=message, intent=f"irrelevant_{kind}", silent=True, styled=False,
                 meta={"kind": kind, "forbidden_tools": list(DEMO_TOOL_NAMES)})


GENERATORS: dict[str, Callable[[Rng, Room], Draft]] = {
    "product_qa": _product_qa, "casual_chat": _casual_chat, "clarification": _clarification,
    "after_sales": _after_sales, "discount": _discount, "presentation_order": _presentation, "faq": _faq,
    "irrelevant": _irrelevant,
}


# --- the public entry point ---------------------------------------------------------------------------------------

def generate_cases(seed: int | str, n: int, *, room: Mapping[str, Any] | None = None,
                   mix: Mapping[str, float] = WORKLOAD_MIX,
                   harness_skill_names: Mapping[str, str] = DEMO_REPLY_SKILLS,
                   tool_names: Mapping[str, str] = DEMO_TOOL_NAMES,
                   n_rooms: int = 1, suite: str = "live_stream_qa") -> list[Case]:
    """`n` cases in the workload mix, deterministic per seed.

    room: the room every case is set in; None generates `n_rooms` rooms from the seed
        (`generate_room(seed)` when `n_rooms == 1`).
    mix: category → weight (any subset of `cases.CATEGORIES`; normalised).
    harness_skill_names / tool_names: demo name → name in the harness under test (renamed skills or
        tools of a harness variant); names missing from the mapping are kept.
    """
    quotas = category_quotas(n, mix)
    rng = random.Random(f"cases:{seed}")
    order = [c for c in CATEGORIES for _ in range(quotas[c])]
    rng.shuffle(order)
    if room is not None:
        rooms: list[Mapping[str, Any]] = [room]
    elif n_rooms == 1:
        rooms = [generate_room(seed)]
    else:
        rooms = [generate_room(f"{seed}/{k}", room_id=f"sim-{seed}-{k}") for k in range(n_rooms)]
    cases = []
    for index, category in enumerate(order):
        case_rng = random.Random(f"case:{seed}:{index}")
        base = rooms[case_rng.randrange(len(rooms))]
        draft = GENERATORS[category](case_rng, base)
        cases.append(_to_case(case_rng, draft, category, base, seed, index, harness_skill_names, tool_names, suite))
    return cases


def _to_case(rng: Rng, d: Draft, category: str, room: Mapping[str, Any], seed: int | str, index: int,
             skill_names: Mapping[str, str], tool_names: Mapping[str, str], suite: str) -> Case:
    if d.on_screen and d.on_screen != room.get("on_screen"):
        room = {**room, "on_screen": d.on_screen}
    message = _style(rng, d.message) if d.styled else d.message
    dialogue = tuple((who, _style(rng, text) if who == "viewer" else text) for who, text in d.dialogue)
    meta = {"intent": d.intent, "seed": seed, "index": index, "room_id": room.get("room_id"), **d.meta}
    for key in ("forbidden_tools", "any_of_tools"):
        if key in meta:
            meta[key] = [tool_names.get(t, t) for t in meta[key]]
    expected = Expected(
        silent=d.silent,
        facts=tuple(f for f in d.facts if f),
        forbidden=tuple(f for f in d.forbidden if f),
        skills=tuple(skill_names.get(s, s) for s in d.skills),
        tools=tuple(ExpectedCall(tool_names.get(name, name), dict(args)) for name, args in d.tools),
    )
    return Case(case_id=f"sim-{seed}-{index:05d}", category=category, room=room,
                viewer_id=d.viewer_id or viewer_handle(rng), message=message, expected=expected,
                dialogue=dialogue, suite=suite, meta=meta)
