"""The HAT experiment's IFEval splits: big enough, disjoint by the lineage guard, every prompt one the
checkers grade with the arguments it states (hand-written replies pass and fail as they should), the files
exactly what their generator writes, and the OPD prompt pool checked against both and unchanged by them."""

import importlib.util
import re
import sys
from pathlib import Path

import pytest

from evaluation.metrics.ifeval import INSTRUCTION_DICT, check_record, mini_records, read_records
from evaluation.metrics.ifeval.checkers import instructions_util
from training import prompt_pool
from training.hat.ifeval_sets import EXTRA, TEST, VALIDATION, ifeval_records
from training.lineage import IFEVAL_PROMPT_FILES, PromptGuard, check_prompts_disjoint, ifeval_prompts

ROOT = Path(__file__).resolve().parents[2]
GENERATOR = ROOT / "benchmarks" / "data" / "hat" / "make_ifeval_sets.py"


@pytest.fixture(scope="module")
def generator():
    spec = importlib.util.spec_from_file_location("make_ifeval_sets", GENERATOR)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


@pytest.fixture(scope="module")
def splits():
    return {split: ifeval_records(split) for split in ("validation", "test")}


def earlier():
    return [*mini_records(), *read_records(EXTRA)]


def test_the_splits_are_big_enough_and_test_keeps_the_earlier_prompts(splits):
    validation, test = splits["validation"], splits["test"]
    assert len(test) >= 110 and len(validation) >= 60
    old = earlier()
    assert len(old) == 55 and test[:55] == old  # the earlier figures' prompts stay in the test split
    assert test[55:] == read_records(TEST) and validation == read_records(VALIDATION)
    keys = [r["key"] for r in validation + test]
    assert all(isinstance(k, int) for k in keys) and len(set(keys)) == len(keys)


def test_an_unknown_split_is_refused_by_name():
    with pytest.raises(ValueError, match="'train'"):
        ifeval_records("train")


def test_no_new_prompt_nears_any_other_prompt_of_either_split(splits):
    validation, test = splits["validation"], splits["test"]
    guard = PromptGuard({f"test:{r['key']}": r["prompt"] for r in test})
    assert guard.matches([r["prompt"] for r in validation]) == []
    new, old = validation + test[55:], earlier()
    for index, record in enumerate(new):
        others = {f"{r['key']}": r["prompt"] for r in [*old, *new[:index], *new[index + 1:]]}
        assert PromptGuard(others).closest(record["prompt"]) is None, record["key"]


def _normalised(args):
    return {name: sorted(value) if isinstance(value, list) else value for name, value in args.items()}


def test_every_instruction_is_the_checkers_and_builds_from_the_records_kwargs_alone(splits):
    # A missing or misspelt argument would let the checker draw one at random: get_instruction_args shows it.
    for record in splits["validation"] + splits["test"]:
        assert len(record["instruction_id_list"]) == len(record["kwargs"]) >= 1
        for name, args in zip(record["instruction_id_list"], record["kwargs"], strict=True):
            assert name in INSTRUCTION_DICT, (record["key"], name)
            instruction = INSTRUCTION_DICT[name](name)
            instruction.build_description(**args)
            assert _normalised(instruction.get_instruction_args() or {}) == _normalised(args), record["key"]


LESS = ("less than", "fewer than", "below", "shorter than")
AT_LEAST = ("at least", "or more")
ORDINALS = {1: "first", 2: "second", 3: "third", 4: "fourth", 5: "fifth"}


def test_every_kwarg_is_stated_in_the_prompt(splits):
    for record in splits["validation"] + splits["test"]:
        prompt = record["prompt"].lower()
        for args in record["kwargs"]:
            for name, value in args.items():
                if name == "prompt_to_repeat":
                    assert record["prompt"].startswith(value), record["key"]
                elif name == "language":
                    assert instructions_util.LANGUAGE_CODES[value].lower() in prompt, record["key"]
                elif name.endswith("relation"):
                    assert any(word in prompt for word in (LESS if value == "less than" else AT_LEAST)), record["key"]
                elif name == "nth_paragraph":
                    assert re.search(rf"\b({value}|{ORDINALS[value]})\b", prompt), record["key"]
                elif isinstance(value, int):
                    assert re.search(rf"\b{value}\b", prompt), (record["key"], name)
                else:
                    for word in value if isinstance(value, list) else [value]:
                        assert word.lower() in prompt, (record["key"], name, word)


def test_each_split_covers_every_instruction_id(splits):
    for records in (splits["validation"], splits["test"][55:]):
        assert {name for r in records for name in r["instruction_id_list"]} == set(INSTRUCTION_DICT)


# key → (a reply that follows every instruction, a reply that follows none); together they cover all 25 ids.
REPLIES = {
    3003: ("Step 1\nPick one neighbourhood and stay there, so every morning starts on foot.\n"
           "Step 2\nPlan one museum and one long meal a day, and leave the rest open.\n"
           "Step 3\nCome home with fewer photos and more memories. That wraps it up for today.",
           "Part 1\nPick a neighbourhood.\nPart 2\nPlan a little.\nThanks for reading."),
    3005: ("<<Un cuenco que vale la pena>>\nSí, este cuenco de ramen hecho a mano vale cada euro. Cada pieza es "
           "ÚNICA, hecha por un alfarero local, y el esmalte aguanta el lavavajillas. Es PERFECTO para sopas "
           "calientes y dura MUCHOS años.",
           "Yes, this ramen bowl is worth the price: it is handmade and lasts for years."),
    3008: ("Yes. A weekend city trip is friendly to beginners: pick one area, take the train in and spend the "
           "days walking between a few sights. Book a room near the station and keep the plan loose.",
           "Quite frankly, a quick weekend away is quite easy for anyone. Pick a city you have always wanted to "
           "see, book a cheap room near the centre, and plan one or two things for each day. Leave time for "
           "cafes, markets and long lunches, and do not try to see everything at once. Bring comfortable shoes "
           "and a small bag."),
    3010: ("<<Saving Too Late>>\nThe biggest mistake is waiting until the month before the trip to start "
           "saving.\n******\n<<Forgetting Small Costs>>\nMany beginners budget for flights and hotels but forget "
           "meals, transport and tips.",
           "The biggest mistake is starting too late."),
    3019: ("My answer is yes. Basil and mint grow happily on a bright sill.",
           "Yes, it is easier than most people expect."),
    3024: ("Welcome back, everyone! Tonight we are looking at the collapsible silicone water bottle, on sale "
           "for [price] until [time].\n\nIt folds down flat when empty, so it slides into a jacket pocket or a "
           "small bag.\n\nStill not sure? Fill it with hot or cold water and it keeps its shape while you "
           "drink.\n\nOrder through [link] before [date] and it ships the next morning.",
           "This amazing bottle is a cure for plastic waste. Grab one at [price]."),
    3025: ("Give a friend who is new to packing a carry-on bag some encouraging advice. Leave out commas "
           "entirely. Your reply must contain the words \"layers\" and \"shoes\". Pack light and roll your "
           "clothes. Wear layers on the plane so you can add or remove them. Keep one pair of shoes on your "
           "feet and one in the bag.",
           "Sure, here is my advice: roll your clothes, pack light, and enjoy the trip."),
    3046: ('{"tagline": "Your commute, finally quiet."}',
           "The best headphones for an amazing commute!"),
    3049: ('"GOOD NEWS: THE CERAMIC PLANT POT IS BACK IN STOCK TONIGHT. GRAB ONE BEFORE THEY ARE GONE AGAIN!"',
           "The best news: our amazing ceramic plant pot is back in stock!"),
    3052: ("Last night's live sale of the digital kitchen scale went faster than we hoped. Viewers loved "
           "weighing flour to the gram while the host baked.\n***\nWe sold out in forty minutes, and a restock "
           "arrives next week. Thank you to everyone who tuned in.",
           "Just joking: the jumbo scale was a cure for baking jitters, with unbeatable joy."),
    4024: ('"this soft wool felt sleeve fits laptops up to [size] and hugs them snugly. it has a pocket for a '
           'charger, comes in [colour] and ships on [date]."',
           "This sleeve is made of wool felt. It fits most laptops."),
    4025: ("*Clean your nails first* so the stickers grip. *Peel slowly* from one corner. Press each sticker "
           "FIRMLY for TEN seconds. *File the edge* downward. To remove them, soak in WARM water and lift "
           "GENTLY. *Store spares flat*.",
           "These miracle stickers are guaranteed to last two weeks. Just peel and press."),
    4026: ("Hello and welcome to tonight's segment. Today we are cooking with an enamel casserole dish. It goes "
           "from the hob to the oven without any fuss. Here is why viewers love it:\n"
           "* It holds heat evenly for slow stews.\n* The enamel wipes clean in seconds.\n"
           "* The heavy lid keeps moisture in.\n* It looks good enough to serve from.\n"
           "We have twenty in stock tonight. Grab yours before the timer runs out.\n\n"
           "P.P.S. The first ten orders come with a free trivet.",
           "Welcome! This dish is great.\n* Heats evenly\n* Easy to clean"),
    4044: ("Yes. Blue-light glasses suit anyone who sits in front of a screen in a first flat, whether it is a "
           "laptop screen or a TV. It is a kind, useful gift.",
           "Not really. Someone who moves out needs a mop, a pan, a lamp, a kettle and some cups far more than "
           "tech eyewear. Buy the flat a good toaster or a warm rug. Save the eyewear for a later year when they "
           "ask for one, and put the money toward the rent."),
}


def test_the_sample_covers_every_instruction_id(splits):
    by_key = {r["key"]: r for r in splits["validation"] + splits["test"]}
    assert {name for key in REPLIES for name in by_key[key]["instruction_id_list"]} == set(INSTRUCTION_DICT)


@pytest.mark.parametrize("key", sorted(REPLIES))
def test_the_checker_grades_a_following_reply_followed_and_a_breaking_one_not(splits, key):
    record = next(r for r in splits["validation"] + splits["test"] if r["key"] == key)
    following, breaking = REPLIES[key]
    assert all(check_record(record, following).strict), record["prompt"]
    assert not any(check_record(record, breaking).strict), record["prompt"]


def test_the_generator_writes_the_committed_files_byte_for_byte(generator):
    written = generator.files()
    assert set(written) == {VALIDATION, TEST}
    for path, text in written.items():
        assert path.read_bytes() == text.encode("utf-8"), path.name


def test_the_generator_keeps_incompatible_instructions_apart(generator, splits):
    for record in splits["validation"] + splits["test"][55:]:
        ids = record["instruction_id_list"]
        assert 1 <= len(ids) <= 3 and len(set(ids)) == len(ids)
        for a in ids:
            assert not (set(ids) - {a}) & generator.CONFLICTS[a], (record["key"], ids)
        assert not {"change_case:english_lowercase", "change_case:capital_word_frequency"} <= set(ids)


def test_the_opd_pool_is_checked_against_both_splits_and_unchanged_by_them(monkeypatch):
    assert {VALIDATION, TEST} <= set(IFEVAL_PROMPT_FILES)
    pool = prompt_pool.default_prompts()
    check_prompts_disjoint(pool)  # against every file in IFEVAL_PROMPT_FILES
    # Built guarding only the earlier prompts, the pool is the same: no pool prompt was skipped for nearing
    # a prompt of the new splits, so what OPD trained on before is what it trains on now.
    earlier_files = tuple(path for path in IFEVAL_PROMPT_FILES if path not in (VALIDATION, TEST))
    monkeypatch.setattr(prompt_pool, "ifeval_prompts", lambda: ifeval_prompts(earlier_files))
    assert prompt_pool.build_pool() == pool
