"""Seeded, deterministic live rooms in the shape of `harness/demo/room.json`.

`generate_room(seed)` builds a shopping room (apparel, beauty, home) from small
vocabularies: products with link ids `L001…`, sizes, colours, stock, specs; a
store FAQ whose numbers are drawn per room; promotions whose promo prices are
consistent with the products (`promo_price == round(price * (1 - pct / 100), 2)`
for percentage promotions); and viewers' orders `O123456`. The same seed always
gives the same room (string seeds into `random.Random`, never set iteration).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

__all__ = ["generate_room", "as_rng", "fmt_number", "price_now", "product_by_link_id", "viewer_handle", "ORDER_STATUSES",
           "KINDS"]

Rng = random.Random

ORDER_STATUSES = ("processing", "shipped", "in_transit_delayed", "delivered", "return_requested", "refunded",
                  "cancelled")


def as_rng(rng_or_seed: int | str | random.Random, salt: str = "") -> random.Random:
    """A `random.Random` from a seed (int or str), or the given one when it already is one."""
    if isinstance(rng_or_seed, random.Random):
        return rng_or_seed
    return random.Random(f"{salt}:{rng_or_seed}")


def fmt_number(value: Any) -> str:
    """A number as a reply would say it and the runtime normalises it: 89.0 → "89", 71.20 → "71.2"."""
    number = float(value)
    if number.is_integer():
        return str(int(number))
    return f"{number:.2f}".rstrip("0").rstrip(".")


def price_now(product: dict[str, Any]) -> float:
    promo = product.get("promo_price")
    return float(promo if promo is not None else product["price"])


def product_by_link_id(room: dict[str, Any], link_id: str) -> dict[str, Any] | None:
    return next((p for p in room.get("products") or () if p.get("link_id") == link_id), None)


# --- vocabularies ------------------------------------------------------------------------------------

LETTER = ["XS", "S", "M", "L", "XL", "XXL"]
WAIST = [str(n) for n in range(24, 35)]
EU = [f"EU{n}" for n in range(35, 47)]
BEDDING = ["single", "double", "queen", "king"]

FITS = ["regular", "relaxed", "slim", "oversized"]
FIT_HINTS = ["true to size", "runs slightly large", "runs slightly small", "size down if between sizes",
             "size up if between sizes", "model is 175 cm and wears M"]

KNIT_COLOURS = ["oatmeal", "navy", "sage", "cream", "charcoal", "camel", "rust", "forest green", "black", "burgundy"]
BASIC_COLOURS = ["white", "black", "navy", "grey", "olive", "sky blue", "stone", "terracotta", "khaki", "ecru"]
DENIM_COLOURS = ["mid blue", "light wash", "washed black", "indigo", "ecru"]
HOME_COLOURS = ["natural", "sage", "white", "stone", "blush", "slate blue", "mustard", "ivory", "charcoal"]
LIP_SHADES = ["rosewood", "brick red", "nude pink", "berry", "coral", "mauve", "classic red"]
SKIN_SHADES = ["fair", "light", "light medium", "medium", "tan", "deep"]


@dataclass(frozen=True)
class Kind:
    """One kind of product: how to name it, size it, colour it and describe it."""

    category: str
    nouns: tuple[str, ...]
    mods: tuple[str, ...]
    price: tuple[int, int]
    build: Callable[[Rng, str], tuple[str, list[str], list[str], dict[str, Any], str]]
    weight: float = 1.0


def _span(rng: Rng, scale: Sequence[str], lo: int, hi: int) -> list[str]:
    """A contiguous run of `lo..hi` labels of a size scale."""
    n = rng.randint(lo, min(hi, len(scale)))
    start = rng.randint(0, len(scale) - n)
    return list(scale[start:start + n])


def _pick(rng: Rng, pool: Sequence[str], lo: int, hi: int) -> list[str]:
    return rng.sample(list(pool), rng.randint(lo, min(hi, len(pool))))


def _knit(rng: Rng, noun: str):
    fibre, material = rng.choice([("Merino", "100% extra-fine merino wool"), ("Cashmere", "100% cashmere"),
                                  ("Lambswool", "100% lambswool"), ("Cotton", "100% organic cotton"),
                                  ("Alpaca-Blend", "60% alpaca, 40% wool"), ("Wool-Blend", "70% wool, 30% polyamide")])
    specs = {"material": material, "fit": rng.choice(FITS),
             "care": rng.choice(["hand wash cold", "wool cycle 30C", "dry clean only"]),
             "weight_g": rng.randrange(240, 480, 10)}
    desc = f"Soft {fibre.lower()} {noun.lower()}; {rng.choice(FIT_HINTS)}."
    return fibre, _span(rng, LETTER, 3, 6), _pick(rng, KNIT_COLOURS, 2, 4), specs, desc


def _denim(rng: Rng, noun: str):
    specs = {"material": rng.choice(["98% cotton, 2% elastane", "100% cotton", "92% cotton, 6% polyester, 2% elastane"]),
             "rise_cm": rng.randint(24, 31), "inseam_cm": rng.choice([72, 74, 76, 78, 80, 82]),
             "stretch": rng.choice(["none", "light", "medium"])}
    desc = f"{rng.choice(['Our best-selling', 'A new', 'Classic'])} {noun.lower()}; true to waist size."
    return "", _span(rng, WAIST, 6, 10), _pick(rng, DENIM_COLOURS, 1, 3), specs, desc


def _top(rng: Rng, noun: str):
    fabric, material = rng.choice([("Linen", "100% European linen"), ("Organic Cotton", "100% GOTS organic cotton"),
                                   ("Silk", "100% mulberry silk"), ("Jersey", "95% cotton, 5% elastane"),
                                   ("Poplin", "100% cotton poplin")])
    specs = {"material": material, "fit": rng.choice(FITS),
             "care": rng.choice(["machine wash 30C", "machine wash 40C", "hand wash cold"]),
             "length_cm_size_M": rng.randint(62, 78)}
    desc = f"Breathable {fabric.lower()} {noun.lower()}; {rng.choice(FIT_HINTS)}."
    return fabric, _span(rng, LETTER, 4, 6), _pick(rng, BASIC_COLOURS, 1, 4), specs, desc


def _dress(rng: Rng, noun: str):
    fabric, material = rng.choice([("Satin", "100% recycled satin"), ("Crepe", "100% viscose crepe"),
                                   ("Linen", "100% linen"), ("Jersey", "95% viscose, 5% elastane")])
    specs = {"material": material, "length_cm": rng.randint(95, 135),
             "lining": rng.choice(["none", "half", "full"]), "closure": rng.choice(["tie waist", "zip", "buttons"])}
    desc = f"Flattering {fabric.lower()} {noun.lower()}; {rng.choice(FIT_HINTS)}."
    return fabric, _span(rng, LETTER, 3, 5), _pick(rng, BASIC_COLOURS + ["floral green", "polka dot"], 1, 3), specs, desc


def _outer(rng: Rng, noun: str):
    fabric, material = rng.choice([("Wool-Blend", "60% wool, 40% polyamide"), ("Quilted", "100% recycled polyester"),
                                   ("Waxed Cotton", "100% waxed cotton"), ("Technical", "nylon with PU coating")])
    specs = {"material": material, "water_repellent": rng.random() < 0.6, "pockets": rng.randint(2, 5),
             "length_cm_size_M": rng.randint(60, 110)}
    desc = f"{fabric} {noun.lower()} that layers over knits; {rng.choice(FIT_HINTS)}."
    return fabric, _span(rng, LETTER, 4, 5), _pick(rng, KNIT_COLOURS, 2, 3), specs, desc


def _shoes(rng: Rng, noun: str):
    upper = rng.choice(["organic cotton canvas", "full-grain leather", "suede", "recycled knit"])
    specs = {"upper": upper, "sole": rng.choice(["natural rubber", "recycled EVA", "leather"]),
             "insole": rng.choice(["removable cork", "memory foam", "leather-lined"]),
             "fit": rng.choice(["true to size", "runs small", "runs large"])}
    desc = f"{noun} in {upper}; half sizes should size up."
    return "", _span(rng, EU, 6, 10), _pick(rng, BASIC_COLOURS, 1, 3), specs, desc


def _accessory(rng: Rng, noun: str):
    fibre, material = rng.choice([("Cashmere", "100% cashmere"), ("Leather", "full-grain cow leather"),
                                  ("Wool", "100% wool"), ("Canvas", "heavy cotton canvas")])
    specs = {"material": material, "care": rng.choice(["hand wash cold", "wipe clean", "spot clean only"])}
    if noun in ("Crossbody Bag", "Tote Bag"):
        specs["dimensions_cm"] = f"{rng.randint(20, 42)} x {rng.randint(14, 36)} x {rng.randint(6, 14)}"
    desc = f"Everyday {fibre.lower()} {noun.lower()}; one size fits most."
    return fibre, ["one size"], _pick(rng, KNIT_COLOURS, 2, 4), specs, desc


def _skincare(rng: Rng, noun: str):
    active, ingredients = rng.choice([("Hyaluronic", "hyaluronic acid 2%, panthenol"),
                                      ("Vitamin C", "ascorbic acid 15%, vitamin E, ferulic acid"),
                                      ("Niacinamide", "niacinamide 10%, zinc 1%"),
                                      ("Ceramide", "ceramides, cholesterol, squalane"),
                                      ("Green Tea", "green tea extract, glycerin")])
    volume = {"Serum": "30ml", "Gel Cleanser": "150ml", "Moisturiser": "50ml", "Toner": "200ml",
              "Eye Cream": "15ml"}.get(noun, "50ml")
    specs: dict[str, Any] = {"key_ingredients": ingredients,
                             "skin_type": rng.choice(["all", "all, incl. sensitive", "dry", "normal to oily", "oily"]),
                             "fragrance_free": rng.random() < 0.7, "pao_months": rng.choice([6, 12, 18])}
    if noun.startswith("Sunscreen"):
        specs = {"filter": f"zinc oxide {rng.choice([15, 18, 20, 22])}%", "spf": 50, "broad_spectrum": True,
                 "water_resistant_min": rng.choice([40, 80]), "skin_type": specs["skin_type"]}
        return "Mineral|", [volume], [], specs, "Mineral SPF 50 that layers well under makeup."
    desc = f"Lightweight {noun.lower()} with {ingredients.split(',')[0]}."
    return f"{active}|{volume}", [volume], [], specs, desc


def _makeup(rng: Rng, noun: str):
    shades = {"Satin Lipstick": LIP_SHADES, "Skin Tint SPF 20": SKIN_SHADES, "Cream Blush": LIP_SHADES,
              "Volumizing Mascara": ["black", "brown-black"], "Brow Pencil": ["taupe", "soft brown", "dark brown"]}
    size = {"Satin Lipstick": "3.5g", "Skin Tint SPF 20": "30ml", "Cream Blush": "5g", "Volumizing Mascara": "10ml",
            "Brow Pencil": "0.1g"}[noun]
    specs = {"finish": rng.choice(["satin", "matte", "natural dewy", "sheer"]), "vegan": rng.random() < 0.6,
             "cruelty_free": True, "wear_hours": rng.choice([4, 6, 8, 12])}
    desc = f"Buildable {noun.lower()} for everyday wear."
    return f"|{size}", [size], _pick(rng, shades[noun], 2, 5), specs, desc


def _hair(rng: Rng, noun: str):
    ingredients = rng.choice(["argan oil, keratin amino acids", "rice protein, biotin", "coconut oil, shea butter"])
    volume = {"Repair Hair Mask": "200ml", "Shampoo": "250ml", "Conditioner": "250ml", "Hair Oil": "50ml"}[noun]
    specs = {"key_ingredients": ingredients, "hair_type": rng.choice(["all", "dry, damaged", "fine", "curly"]),
             "silicone_free": rng.random() < 0.5}
    return f"|{volume}", [volume], [], specs, f"Salon-style {noun.lower()} with {ingredients.split(',')[0]}."


def _bedding(rng: Rng, noun: str):
    fabric, material = rng.choice([("Linen", "100% French linen, stonewashed"), ("Percale", "100% cotton percale"),
                                   ("Sateen", "100% cotton sateen"), ("Bamboo", "100% bamboo lyocell")])
    specs = {"material": material, "thread_count": rng.choice([200, 300, 400]) if fabric != "Linen" else None,
             "closure": rng.choice(["coconut buttons", "hidden zip", "ties"]), "care": "machine wash 40C"}
    specs = {k: v for k, v in specs.items() if v is not None}
    return fabric, list(BEDDING[rng.randint(0, 1):]), _pick(rng, HOME_COLOURS, 2, 3), specs, \
        f"{fabric} {noun.lower()} that softens with every wash."


def _bath(rng: Rng, noun: str):
    specs = {"material": rng.choice(["100% Turkish cotton", "100% organic cotton", "cotton-bamboo blend"]),
             "weight_gsm": rng.choice([400, 450, 500, 600]), "care": "machine wash 60C"}
    sizes = {"Towel Set": ["set of 4"], "Bath Mat": ["50 x 80 cm"], "Bathrobe": ["S/M", "L/XL"]}[noun]
    return rng.choice(["Waffle", "Plush", "Ribbed"]), sizes, _pick(rng, HOME_COLOURS, 2, 3), specs, \
        f"Quick-drying {noun.lower()} for everyday use."


def _kitchen(rng: Rng, noun: str):
    if noun == "Dutch Oven":
        capacity = rng.choice([3.5, 4.5, 5.5])
        specs = {"capacity_l": capacity, "material": "enamelled cast iron", "oven_safe_c": rng.choice([230, 250, 260]),
                 "induction": True, "weight_kg": round(capacity + 0.7, 1), "warranty_years": rng.choice([5, 10, 25])}
        return f"Cast Iron|{fmt_number(capacity)}L", [f"{fmt_number(capacity)}L"], _pick(rng, HOME_COLOURS, 2, 3), \
            specs, "Heirloom enamelled pot for braises, soups and bread."
    if noun == "Frying Pan":
        diameter = rng.choice([24, 26, 28])
        specs = {"diameter_cm": diameter, "material": rng.choice(["carbon steel", "tri-ply stainless steel"]),
                 "induction": True, "oven_safe_c": 260, "warranty_years": rng.choice([2, 5, 10])}
        return f"|{diameter}cm", [f"{diameter} cm"], [], specs, "Heats evenly and builds a natural non-stick patina."
    specs = {"includes": "dripper, 600ml carafe, 2 cups", "material": "stoneware",
             "dishwasher_safe": rng.random() < 0.7, "filter_size": "02"}
    return "Ceramic", ["one size"], _pick(rng, ["matte white", "speckled sand", "charcoal", "sage"], 2, 2), specs, \
        "Hand-glazed stoneware set for slow mornings."


def _decor(rng: Rng, noun: str):
    if noun == "Candle Trio":
        specs = {"wax": "100% soy", "wick": "cotton", "burn_time_h_each": rng.choice([30, 40, 50]),
                 "vessel": "amber glass"}
        return "Soy Wax", ["3 x 180g"], ["cedar & fig / sea salt / amber"], specs, "Three calming scents in reusable jars."
    specs = {"material": rng.choice(["100% acrylic chenille", "100% cotton", "wool-blend bouclé"]),
             "dimensions_cm": rng.choice(["130 x 170", "45 x 45", "150 x 200"]), "care": "machine wash 30C gentle"}
    return rng.choice(["Chunky Knit", "Bouclé", "Waffle"]), [specs["dimensions_cm"] + " cm"], \
        _pick(rng, HOME_COLOURS, 2, 3), specs, f"Super-soft {noun.lower()} for cosy evenings."


def _appliance(rng: Rng, noun: str):
    warranty = rng.choice([1, 2, 3])
    if noun == "Handheld Vacuum":
        specs = {"suction_pa": rng.choice([9000, 12000, 15000]), "runtime_min": rng.choice([25, 30, 40]),
                 "charge_time_h": rng.choice([2.5, 3.5, 4]), "weight_kg": rng.choice([0.9, 1.1, 1.3])}
    elif noun == "Aroma Diffuser":
        specs = {"capacity_ml": rng.choice([200, 300, 500]), "runtime_h": rng.choice([8, 10, 12]),
                 "auto_shutoff": True, "light_modes": rng.choice([3, 7])}
    else:
        specs = {"capacity_l": 1.7, "power_w": rng.choice([2200, 3000]), "keep_warm_min": rng.choice([30, 60]),
                 "auto_shutoff": True}
    specs["warranty_years"] = warranty
    return rng.choice(["Cordless", "Compact", "Quiet"]), ["one size"], _pick(rng, ["white", "light wood", "black"], 1, 2), \
        specs, f"Easy-to-use {noun.lower()} with a {warranty}-year warranty."


KINDS: tuple[Kind, ...] = (
    Kind("apparel/knitwear", ("Crew-Neck Sweater", "Cardigan", "Turtleneck", "V-Neck Jumper", "Knit Vest"),
         ("Chunky", "Ribbed", "Cable-Knit", "Relaxed", ""), (59, 169), _knit, 2.0),
    Kind("apparel/denim", ("Straight Jeans", "Wide-Leg Jeans", "Slim Jeans", "Barrel Jeans"),
         ("High-Rise", "Mid-Rise", "Vintage-Wash", "Stretch"), (59, 119), _denim),
    Kind("apparel/tops", ("Button-Down Shirt", "Tee 3-Pack", "Blouse", "Polo Shirt", "Tank Top"),
         ("Classic", "Relaxed", "Cropped", ""), (29, 89), _top, 1.5),
    Kind("apparel/dresses", ("Midi Dress", "Slip Dress", "Shirt Dress", "Maxi Dress"),
         ("Wrap", "Tiered", "Pleated", "Bias-Cut"), (69, 159), _dress),
    Kind("apparel/outerwear", ("Puffer Vest", "Overcoat", "Trench Coat", "Rain Jacket", "Field Jacket"),
         ("Longline", "Cropped", "Classic", "Hooded"), (79, 259), _outer),
    Kind("apparel/footwear", ("Canvas Sneakers", "Ankle Boots", "Loafers", "Chelsea Boots"),
         ("Everyday", "Low-Top", "Lug-Sole", "Classic"), (59, 189), _shoes),
    Kind("apparel/accessories", ("Beanie", "Scarf", "Crossbody Bag", "Tote Bag", "Gloves"),
         ("Ribbed", "Oversized", "Compact", "Classic"), (29, 149), _accessory),
    Kind("beauty/skincare", ("Serum", "Gel Cleanser", "Moisturiser", "Toner", "Eye Cream", "Sunscreen SPF 50"),
         ("Hydrating", "Brightening", "Calming", "Daily", "Barrier Repair"), (18, 58), _skincare, 1.5),
    Kind("beauty/makeup", ("Satin Lipstick", "Skin Tint SPF 20", "Cream Blush", "Volumizing Mascara", "Brow Pencil"),
         ("Long-Wear", "Soft-Focus", "Everyday", "Velvet"), (16, 42), _makeup),
    Kind("beauty/haircare", ("Repair Hair Mask", "Shampoo", "Conditioner", "Hair Oil"),
         ("Nourishing", "Volumising", "Smoothing", "Repair"), (14, 39), _hair, 0.6),
    Kind("home/bedding", ("Duvet Cover", "Sheet Set", "Pillowcase Pair"),
         ("Stonewashed", "Crisp", "Washed", "Classic"), (49, 199), _bedding),
    Kind("home/bath", ("Towel Set", "Bath Mat", "Bathrobe"), ("Cotton", "Spa", "Hotel"), (29, 99), _bath, 0.7),
    Kind("home/kitchen", ("Dutch Oven", "Frying Pan", "Pour-Over Coffee Set"), ("Classic", "Pro", "Heritage"),
         (39, 199), _kitchen),
    Kind("home/decor", ("Candle Trio", "Throw Blanket", "Cushion Cover"), ("Cosy", "Nordic", "Heritage"),
         (25, 109), _decor, 0.8),
    Kind("home/appliances", ("Handheld Vacuum", "Aroma Diffuser", "Electric Kettle"), ("Smart", "Mini", "Pro"),
         (35, 179), _appliance, 0.8),
)

STORES = ("Maple & Co.", "Juniper Lane", "Northbound Goods", "Willow & Wren", "Harbour House", "Saltwater Studio",
          "Fern & Finch", "Copper Kettle", "Linden Street", "Blue Heron Supply")
THEMES = ("Cosy Winter Edit", "Weekend Wardrobe Reset", "Self-Care Sunday", "Home Refresh Live",
          "Holiday Gift Guide", "New Season Drop", "Layering Masterclass", "Glow-Up Night")
CARRIERS = ("UPS", "FedEx", "USPS", "DHL")
VIEWER_NAMES = ("anna", "jmiller", "sky_lee", "marco_b", "priya_k", "tom", "lena", "chris_w", "maya", "noah",
                "zoe_t", "ben", "olivia", "sam_r", "ivy", "leo", "grace", "diego", "hana", "felix", "ruby", "omar",
                "nina", "jack_p", "emma_l", "kai", "sofia", "liam", "aria", "max")


def viewer_handle(rng: Rng) -> str:
    return f"v_{rng.choice(VIEWER_NAMES)}{rng.randint(1, 99)}"


# --- products ------------------------------------------------------------------------------------------

def _nice_price(rng: Rng, lo: int, hi: int) -> float:
    price = rng.randint(lo, hi)
    # Whole numbers, mostly ending in 9 / 5 / 8 as shops price them.
    return float(max(lo, price - price % 10 + rng.choice([5, 8, 9, 9])))


def _stock(rng: Rng, labels: Sequence[str]) -> dict[str, int]:
    return {label: (0 if rng.random() < 0.12 else rng.choice([1, 2, 3, *range(4, 41)])) for label in labels}


def _product(rng: Rng, kind: Kind, link_id: str, used: set[str]) -> dict[str, Any]:
    for attempt in range(40):
        noun = rng.choice(kind.nouns)
        word, sizes, colours, specs, desc = kind.build(rng, noun)
        mod = rng.choice(kind.mods)
        prefix, _, suffix = word.partition("|")
        name = " ".join(part for part in (mod, prefix, noun, suffix) if part)
        if attempt >= 30:
            name = f"{name} No. {attempt - 29}"
        if name not in used:
            break
    used.add(name)
    if len(sizes) > 1:
        stock: dict[str, int] | int = _stock(rng, sizes)
    elif len(colours) > 1:
        stock = _stock(rng, colours)
    else:
        stock = rng.randint(0, 90) if rng.random() < 0.05 else rng.randint(8, 90)
    return {"link_id": link_id, "name": name, "category": kind.category, "price": _nice_price(rng, *kind.price),
            "promo_price": None, "sizes": sizes, "colours": colours, "stock": stock, "specs": specs,
            "description": desc}


def _products(rng: Rng, n: int) -> list[dict[str, Any]]:
    """`n` products drawn by kind weight; rooms of 6+ products carry all three departments."""
    weights = [k.weight for k in KINDS]
    kinds: list[Kind] = []
    if n >= 6:
        for dept in ("apparel", "beauty", "home"):
            pool = [k for k in KINDS if k.category.startswith(dept + "/")]
            kinds.append(rng.choices(pool, [k.weight for k in pool])[0])
    while len(kinds) < n:
        kinds.append(rng.choices(KINDS, weights)[0])
    # Like a stream's running order: apparel, then beauty, then home.
    kinds.sort(key=KINDS.index)
    used: set[str] = set()
    return [_product(rng, kind, f"L{i + 1:03d}", used) for i, kind in enumerate(kinds)]


# --- promotions ------------------------------------------------------------------------------------------

PROMO_TITLES = {
    "apparel": ("Knit & Layer Week", "Wardrobe Refresh", "Style Week"),
    "beauty": ("Beauty Week", "Glow Sale", "Skin Care Days"),
    "home": ("Home Cosy Sale", "Nest Week", "Home Refresh"),
}


def _promotions(rng: Rng, products: list[dict[str, Any]], start: datetime, max_discount: int
                ) -> list[dict[str, Any]]:
    promos: list[dict[str, Any]] = []
    starts, ends = start.strftime("%Y-%m-%dT00:00:00Z"), (start + timedelta(days=6)).strftime("%Y-%m-%dT23:59:59Z")
    for dept in ("apparel", "beauty", "home"):
        items = [p for p in products if p["category"].startswith(dept + "/")]
        if not items or rng.random() < 0.25:
            continue
        categories = sorted({p["category"] for p in items})
        chosen = set(rng.sample(categories, rng.randint(1, min(2, len(categories)))))
        covered = [p for p in items if p["category"] in chosen and rng.random() < 0.85]
        if not covered:
            continue
        pct = rng.choice([p for p in (10, 15, 20, 25, 30) if p <= max_discount])
        for p in covered:
            p["promo_price"] = round(p["price"] * (100 - pct) / 100, 2)
        names = ", ".join(sorted(c.split("/")[1] for c in chosen))
        promos.append({"id": "", "title": f"{rng.choice(PROMO_TITLES[dept])}: {pct}% off {names}",
                       "link_ids": [p["link_id"] for p in covered],
                       "rule": f"{pct}% off the listed price, already shown as the promo price. No code needed.",
                       "discount_pct": pct, "starts": starts, "ends": ends, "stackable": False,
                       "coupon_allowed": False})
    plain = [p for p in products if p["promo_price"] is None]
    if plain and rng.random() < 0.6:
        flash = sorted(rng.sample(plain, min(len(plain), rng.randint(1, 3))), key=lambda p: p["link_id"])
        for p in flash:
            # A fixed flash price: a round number 15-25% under the listed price.
            p["promo_price"] = float(int(p["price"] * rng.uniform(0.75, 0.85)))
        day = start + timedelta(days=rng.randint(0, 5))
        promos.append({"id": "", "title": "Live-only flash price", "link_ids": [p["link_id"] for p in flash],
                       "rule": "Fixed flash price while the stream is live; shown as the promo price.",
                       "discount_pct": None, "starts": day.strftime("%Y-%m-%dT18:00:00Z"),
                       "ends": day.strftime("%Y-%m-%dT21:00:00Z"), "stackable": False, "coupon_allowed": False})
    threshold, amount = rng.choice([(100, 10), (120, 15), (150, 20), (200, 30)])
    promos.append({"id": "", "title": f"Spend ${threshold}, save ${amount}", "link_ids": [],
                   "rule": f"Applies to the whole cart at checkout once the cart total after promo prices reaches "
                           f"${threshold}. Stacks with product promo prices.",
                   "threshold": threshold, "amount_off": amount, "stackable": True, "coupon_allowed": False})
    plain = [p for p in products if p["promo_price"] is None]
    if plain:
        pct = rng.choice([p for p in (5, 10, 15) if p <= max_discount])
        eligible = sorted(rng.sample(plain, max(1, int(len(plain) * rng.uniform(0.5, 1.0)))),
                          key=lambda p: p["link_id"])
        promos.append({"id": "", "title": f"Viewer coupon: extra {pct}% off",
                       "link_ids": [p["link_id"] for p in eligible],
                       "rule": f"The avatar may issue one {pct}% coupon per viewer per stream on request for items "
                               f"without a promo price. Not valid on items already on promo.",
                       "discount_pct": pct, "coupon": True, "coupon_allowed": True, "per_viewer_limit": 1,
                       "stackable": False})
    for i, promo in enumerate(promos, 1):
        promo["id"] = f"PR{i:02d}"
    return promos


# --- FAQ -----------------------------------------------------------------------------------------------------

def _faq(rng: Rng, products: list[dict[str, Any]], promos: list[dict[str, Any]]) -> list[dict[str, Any]]:
    dispatch = rng.choice(["1-2", "1-3", "2-3"])
    standard, express = rng.choice(["3-5", "4-6", "2-5"]), rng.choice(["1-2", "2-3"])
    threshold, fee, express_fee = rng.choice([49, 59, 69, 75]), rng.choice([4.95, 5.95, 6.95]), rng.choice([12.95, 14.95])
    country, country_days = rng.choice(["Canada", "the UK", "Mexico"]), rng.choice(["5-8", "6-10", "7-12"])
    window, drop_off, refund_days = rng.choice([14, 30, 60]), rng.choice([7, 14]), rng.choice(["3-5", "5-7", "5-10"])
    methods = ["Visa", "Mastercard", "American Express", "PayPal", "Apple Pay", "Google Pay"]
    methods = [m for m in methods if m in ("Visa", "Mastercard") or rng.random() < 0.75]
    bnpl = rng.choice([50, 75, 100])
    cancel_h, wrap, damaged_days = rng.choice([1, 2, 12]), rng.choice([3.5, 4.5, 5.0]), rng.choice([7, 14])
    country_name = country.removeprefix("the ")
    entries = [
        ("How long does shipping take?",
         f"Orders ship within {dispatch} business days. Standard delivery takes {standard} business days in the "
         f"contiguous US; express takes {express} business days."),
        ("Is shipping free?",
         f"Standard shipping is free on orders of ${threshold} or more after discounts. Below that it costs "
         f"${fee:.2f}. Express shipping is ${express_fee:.2f}."),
        ("Do you ship internationally?",
         f"We ship to the US and {country} only. {country_name} orders take {country_days} business days and may "
         f"incur import duties."),
        ("What is the return policy?",
         f"Unworn, unwashed items with tags can be returned within {window} days of delivery for a full refund. "
         f"Returns are free with the prepaid label."),
        ("Can I return beauty products?",
         f"Unopened beauty products can be returned within {window} days. Opened beauty products can only be "
         f"returned if you had a reaction; contact support with your order number."),
        ("How do I start a return or exchange?",
         f"Go to My Orders, pick the order and tap Return or Exchange. Print the prepaid label and drop the parcel "
         f"at any carrier point within {drop_off} days."),
        ("When will I get my refund?",
         f"Refunds go to the original payment method {refund_days} business days after the warehouse receives the "
         f"return."),
        ("Can I exchange for a different size?",
         f"Yes. Size and colour exchanges are free within {window} days if the new size is in stock; otherwise we "
         f"refund you."),
        ("How do I choose my size?",
         "Each product page has a size chart in cm. If you are between sizes, pick the larger size for knits and "
         "the smaller size for coats. Jeans follow your waist size."),
        ("Which payment methods do you accept?",
         f"{', '.join(methods[:-1])} and {methods[-1]}. Buy now, pay later with 4 interest-free instalments is "
         f"available on orders of ${bnpl} or more."),
    ]
    appliances = [p for p in products if "warranty_years" in p["specs"] and p["category"] == "home/appliances"]
    if appliances:
        p = appliances[0]
        entries.append(("What warranty do home appliances have?",
                        f"Appliances come with the manufacturer's warranty shown on the product page (for example "
                        f"{p['specs']['warranty_years']} years for the {p['name']}). Contact support with your order "
                        f"number to claim."))
    kitchen = [p for p in products if "warranty_years" in p["specs"] and p["category"] == "home/kitchen"]
    if kitchen:
        p = kitchen[0]
        entries.append((f"Is the {p['name']} covered by a warranty?",
                        f"Yes, the {p['name']} has a {p['specs']['warranty_years']}-year warranty against defects "
                        f"under normal use."))
    entries.append(("Can I change or cancel my order?",
                    f"You can cancel or change an order within {cancel_h} hour{'s' if cancel_h > 1 else ''} of "
                    f"placing it from My Orders. After it is packed, wait for delivery and return it instead."))
    cart = next((p for p in promos if p.get("threshold")), None)
    if cart:
        entries.append(("Can I combine coupons and promotions?",
                        f"One product promotion or one coupon applies per item. The spend-${cart['threshold']}-save-"
                        f"${cart['amount_off']} cart offer stacks with product promo prices."))
    entries.append(("Do you offer gift wrapping?",
                    f"Yes, gift wrapping with a handwritten note is ${wrap:.2f} per order; choose it at checkout."))
    entries.append(("My item arrived damaged or wrong. What do I do?",
                    f"Contact support within {damaged_days} days of delivery with your order number and a photo. We "
                    f"send a free replacement or a full refund."))
    return [{"q": q, "a": a} for q, a in entries]


# --- orders ----------------------------------------------------------------------------------------------

def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:00Z")


def _orders(rng: Rng, products: list[dict[str, Any]], start: datetime, n: int) -> list[dict[str, Any]]:
    viewers: list[str] = []
    while len(viewers) < max(2, n * 2 // 3):
        handle = viewer_handle(rng)
        if handle not in viewers:
            viewers.append(handle)
    base_id = rng.randint(100, 899) * 1000
    ids = sorted(rng.sample(range(base_id, base_id + 1000), n))
    statuses = list(ORDER_STATUSES)
    orders = []
    for i, number in enumerate(ids):
        product = rng.choice(products)
        status = statuses[i] if i < len(statuses) else rng.choices(statuses, [2, 4, 1, 4, 1, 1, 1])[0]
        parts = [rng.choice(product["sizes"])] if len(product["sizes"]) > 1 else []
        if product["colours"]:
            parts.append(rng.choice(product["colours"]))
        quantity = rng.choice([1, 1, 1, 2])
        placed = start - timedelta(days=rng.randint(0, 20), hours=rng.randint(0, 23), minutes=rng.randint(0, 59))
        shipped = placed + timedelta(hours=rng.randint(10, 40))
        eta = shipped + timedelta(days=rng.randint(3, 6))
        delivered = eta - timedelta(days=rng.randint(0, 1), hours=rng.randint(1, 10))
        order: dict[str, Any] = {
            "order_id": f"O{number:06d}", "viewer_id": viewers[i % len(viewers)] if i < len(viewers) else rng.choice(viewers),
            "link_id": product["link_id"], "variant": " / ".join(parts) or product["sizes"][0], "quantity": quantity,
            "status": status, "placed_at": _iso(placed), "shipped_at": _iso(shipped),
            "carrier": rng.choice(CARRIERS), "tracking_no": f"1Z{rng.randint(10**13, 10**14 - 1)}",
            "eta": eta.strftime("%Y-%m-%d"), "delivered_at": _iso(delivered),
        }
        if status == "processing":
            order.update(shipped_at=None, carrier=None, tracking_no=None, delivered_at=None,
                         eta=(placed + timedelta(days=6)).strftime("%Y-%m-%d"))
        elif status in ("shipped", "in_transit_delayed"):
            order["delivered_at"] = None
            if status == "in_transit_delayed":
                order["eta"] = (eta + timedelta(days=rng.randint(2, 4))).strftime("%Y-%m-%d")
                order["note"] = rng.choice(["Carrier weather delay; new ETA set by carrier.",
                                            "Held at a carrier hub; new ETA set by carrier."])
        elif status == "return_requested":
            order["return"] = {"reason": rng.choice(["too small", "too large", "changed my mind", "colour differs"]),
                               "requested_at": _iso(delivered + timedelta(days=rng.randint(1, 6))), "label_sent": True}
        elif status == "refunded":
            order["refund"] = {"amount": round(price_now(product) * quantity, 2),
                               "refunded_at": _iso(delivered + timedelta(days=rng.randint(8, 14))),
                               "method": "original payment"}
        elif status == "cancelled":
            order.update(shipped_at=None, carrier=None, tracking_no=None, eta=None, delivered_at=None,
                         cancelled_at=_iso(placed + timedelta(minutes=rng.randint(5, 50))))
        orders.append(order)
    return orders


# --- the room ----------------------------------------------------------------------------------------------

def generate_room(rng_or_seed: int | str | random.Random, *, n_products: int = 24, room_id: str | None = None,
                  n_orders: int | None = None, max_discount_pct: int = 30) -> dict[str, Any]:
    """A live room (same shape as `harness/demo/room.json`), fully determined by the seed.

    `rng_or_seed` is an int/str seed or a `random.Random` (then the room depends on its state).
    """
    if not 1 <= n_products <= 999:
        raise ValueError("n_products must be 1..999 (link ids are L001..L999)")
    seed_label = rng_or_seed if not isinstance(rng_or_seed, random.Random) else None
    rng = as_rng(rng_or_seed, "room")
    if room_id is None:
        room_id = f"sim-{seed_label}" if seed_label is not None else f"sim-{rng.getrandbits(32):08x}"
    start = datetime(2026, 11, 1, tzinfo=UTC) + timedelta(days=rng.randint(0, 60))
    store = rng.choice(STORES)
    products = _products(rng, n_products)
    promotions = _promotions(rng, products, start, max_discount_pct)
    faq = _faq(rng, products, promotions)
    orders = _orders(rng, products, start, n_orders if n_orders is not None else rng.randint(8, 12))
    departments = sorted({p["category"].split("/")[0] for p in products}, key=["apparel", "beauty", "home"].index)
    return {
        "room_id": room_id,
        "title": f"{store} Live: {rng.choice(THEMES)} ({', '.join(departments)})",
        "host": f"{store} studio",
        "currency": "USD",
        "on_screen": rng.choice(products)["link_id"],
        "products": products,
        "faq": faq,
        "promotions": promotions,
        "orders": orders,
    }
