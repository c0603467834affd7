"""IFEval: lm-eval's official checkers (no download), strict vs loose, the four metrics, the shipped mini set."""

import json
import math
import subprocess
import sys
from pathlib import Path

import nltk
import punkt
import pytest

from evaluation.metrics.ifeval import (
    INSTRUCTION_DICT,
    aggregate_scores,
    check_record,
    evaluate_ifeval,
    loose_variants,
    mini_records,
    read_records,
    score_response,
)
from evaluation.metrics.ifeval.checkers import instructions_util as util
from evaluation.metrics.ifeval.punkt_data import write_punkt_tab

RECORDS = {r["key"]: r for r in mini_records()}


# -- the shipped mini set ------------------------------------------------------------------------------

def test_mini_set_covers_every_registered_instruction_in_the_ifeval_row_format():
    records = mini_records()
    assert 25 <= len(records) <= 30
    assert len({r["key"] for r in records}) == len(records)
    for r in records:
        assert set(r) == {"key", "prompt", "instruction_id_list", "kwargs"}
        assert isinstance(r["key"], int) and r["prompt"].strip()
        assert len(r["kwargs"]) == len(r["instruction_id_list"])
        for instruction_id, kwargs in zip(r["instruction_id_list"], r["kwargs"], strict=True):
            # every kwarg is one the checker's build_description accepts
            INSTRUCTION_DICT[instruction_id](instruction_id).build_description(**kwargs)
    assert {i for r in records for i in r["instruction_id_list"]} == set(INSTRUCTION_DICT)


def test_read_records_reads_jsonl(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in mini_records()[:3]) + "\n\n")
    assert read_records(path) == mini_records()[:3]


# -- passing and failing responses per instruction type -------------------------------------------------

CASES = {
    # key: (instruction, a response that follows it, one that does not)
    1001: ("keywords:existence", "An itch-free, breathable knit for every day.", "A soft knit for every day."),
    1002: ("keywords:frequency", "Pour slowly, pour evenly, then pour the rest.", "Pour slowly and enjoy."),
    1003: ("keywords:forbidden_words", "You can exchange it within 30 days.", "We refund your money in 30 days."),
    1004: ("keywords:letter_frequency", "Welcome in, glow fans!", "Zesty zinc zone welcome!"),
    1005: ("language:response_language",
           "Bienvenue à notre grande vente de décoration. Profitez des remises ce soir avec toute l'équipe.",
           "Welcome to our big home decor sale. Enjoy the discounts tonight with the whole team."),
    1006: ("length_constraints:number_sentences", "Linen breathes. It wicks moisture away.",
           "Linen breathes. It wicks moisture. It dries fast. It stays cool."),
    1007: ("length_constraints:number_paragraphs", "Scarf intro.\n***\nCandle intro.\n***\nBottle intro.",
           "Scarf intro.\n***\nCandle and bottle intro."),
    1008: ("length_constraints:number_words", " ".join(["clay"] * 120), " ".join(["clay"] * 119)),
    # the official checker keeps ":" in the first word, so "Storage:" would not count
    1009: ("length_constraints:nth_paragraph_first_word", "Wash it cold by hand.\n\nStorage is simple, fold it.",
           "Wash it cold by hand.\n\nFold it flat for storage."),
    1010: ("detectable_content:number_placeholders", "Hi [name], order [order number] ships to [address].",
           "Hi [name], your order ships soon."),
    1011: ("detectable_content:postscript", "Thanks for joining!\n\nP.S. New drops on Friday.",
           "Thanks for joining! New drops on Friday."),
    1012: ("detectable_format:number_bullet_lists", "* light\n* roomy\n* waterproof\n* laptop sleeve",
           "* light\n* roomy\n* waterproof"),
    1013: ("detectable_format:constrained_response", "My answer is yes.", "Yes, definitely."),
    1014: ("detectable_format:number_highlighted_sections", "*Standard* is cheap; *express* is fast.",
           "*Standard* is cheap; express is fast."),
    1015: ("detectable_format:multiple_sections", "SECTION 1\nHook\nSECTION 2\nDemo\nSECTION 3\nOffer",
           "SECTION 1\nHook\nSECTION 2\nDemo and offer"),
    1016: ("detectable_format:json_format", '{"name": "Drizzle", "price": 79}', "name: Drizzle, price: 79"),
    1017: ("detectable_format:title", "<<Wool Dreams>>\nSoft and warm.", "Wool Dreams\nSoft and warm."),
    1018: ("combination:two_responses", "Weekend Wow\n******\nFlash Friday", "Weekend Wow\n******\nWeekend Wow"),
    1019: ("combination:repeat_prompt", "Write a one-line tagline for a bamboo toothbrush. Brush green.",
           "Tagline: brush green."),
    1020: ("startend:end_checker", "Yes, a warm LED bulb is included. Any other questions?",
           "Yes, a warm LED bulb is included."),
    1021: ("change_case:capital_word_frequency", "LAST CALL, ONLY seconds left, GO!", "Last call, go!"),
    1022: ("change_case:english_capital", "THE GIVEAWAY STARTS NOW, COMMENT TO ENTER!",
           "The giveaway starts now, comment to enter!"),
    1023: ("change_case:english_lowercase", "soft, plush and cool to the touch, like a summer night.",
           "Soft, plush and cool to the touch."),
    1024: ("punctuation:no_comma", "A wicker basket with plates and cups for two.",
           "A wicker basket, plates, and cups."),
    1025: ("startend:quotation", '"Best candles I have ever bought."', "Best candles I have ever bought."),
}


@pytest.mark.parametrize("key", sorted(CASES))
def test_following_and_not_following(key):
    instruction_id, good, bad = CASES[key]
    assert RECORDS[key]["instruction_id_list"] == [instruction_id]
    assert score_response(RECORDS[key], good)["prompt_strict"] == 1.0, good
    bad_scores = score_response(RECORDS[key], bad)
    assert bad_scores["prompt_strict"] == 0.0 and bad_scores["prompt_loose"] == 0.0, bad


def test_empty_response_follows_nothing():
    # Even instructions a blank text would technically satisfy (no commas, few sentences).
    for key in (1003, 1006, 1024):
        assert score_response(RECORDS[key], "   \n ")["prompt_loose"] == 0.0


# -- strict vs loose -----------------------------------------------------------------------------------

@pytest.mark.parametrize("key, response", [
    (1016, 'Sure! Here it is:\n```json\n{"name": "Drizzle", "price": 79}\n```'),  # first line removed
    (1025, '*"Best candles I have ever bought."*'),                            # asterisks removed
    (1020, "Yes, the bulb is included. Any other questions?\n— Mia"),          # last line removed
    (1019, "Of course!\nWrite a one-line tagline for a bamboo toothbrush. Brush green."),
    (1024, "**Picnic** set:\nplates and cups for two\n\n(Shall I add more, or keep it short?)"),  # both lines
])
def test_loose_passes_where_strict_fails(key, response):
    scores = score_response(RECORDS[key], response)
    assert (scores["prompt_strict"], scores["prompt_loose"]) == (0.0, 1.0)


def test_loose_variants_are_the_eight_reference_variants():
    assert loose_variants("a*\nb\n*c") == ["a*\nb\n*c", "a\nb\nc", "b\n*c", "a*\nb", "b", "b\nc", "a\nb", "b"]


def test_prompt_and_instruction_level_metrics_by_hand():
    records = [RECORDS[1026], RECORDS[1027], RECORDS[1016]]
    responses = {
        # 1026: <60 words ✓; a comma in the middle line: ✗ strict and loose (no variant drops it);
        # end phrase followed by a signature line: strict ✗, loose ✓ (last line removed)
        "1026": "It is 6 mm thick.\nGrippy, light and easy to clean.\nIs there anything else I can help with?\nMia",
        # 1027: title ✓, keyword "handmade" ✓ (both strict and loose)
        "1027": "<<The Wallet>>\nHandmade from full-grain leather.",
        # 1016: JSON after a preamble line: strict ✗, loose ✓
        "1016": 'Here you go:\n{"name": "Drizzle"}',
    }
    result = evaluate_ifeval(records, responses)
    assert [r.strict for r in result.records] == [(True, False, False), (True, True), (False,)]
    assert [r.loose for r in result.records] == [(True, False, True), (True, True), (True,)]
    # prompt level: strict only 1027 → 1/3; loose 1027 and 1016 → 2/3
    assert result.prompt_level_strict == pytest.approx(1 / 3)
    assert result.prompt_level_loose == pytest.approx(2 / 3)
    # instruction level, pooled over 3 + 2 + 1 = 6 instructions: strict 1+2+0 = 3; loose 2+2+1 = 5
    assert result.n_prompts == 3 and result.n_instructions == 6
    assert result.instruction_level_strict == pytest.approx(3 / 6)
    assert result.instruction_level_loose == pytest.approx(5 / 6)
    assert result.by_instruction["punctuation:no_comma"] == (0.0, 0.0, 1)
    assert result.by_instruction["detectable_format:title"] == (1.0, 1.0, 1)
    # the same numbers from stored per-record scores
    stored = [score_response(r, responses[str(r["key"])]) for r in records]
    agg = aggregate_scores(stored)
    assert agg["instruction_level_strict"] == pytest.approx(3 / 6)
    assert agg["instruction_level_loose"] == pytest.approx(5 / 6)
    assert agg["prompt_level_loose"] == pytest.approx(2 / 3)
    # per-prompt fractions are NOT the instruction-level metric: mean(1/3, 1, 0) = 4/9 ≠ 3/6
    assert sum(s["instruction_strict"] for s in stored) / 3 == pytest.approx(4 / 9)


def test_responses_by_prompt_and_missing_responses():
    record = RECORDS[1013]
    assert evaluate_ifeval([record], {record["prompt"]: "My answer is no."}).prompt_level_strict == 1.0
    with pytest.raises(KeyError, match="1013"):
        evaluate_ifeval([record], {})
    assert evaluate_ifeval([record], {}, on_missing="fail").prompt_level_loose == 0.0
    skipped = evaluate_ifeval([record], {}, on_missing="skip")
    assert skipped.missing == ("1013",) and skipped.n_prompts == 0 and math.isnan(skipped.prompt_level_strict)


def test_hugging_face_rows_with_null_kwargs_work():
    record = dict(RECORDS[1002])
    record["kwargs"] = [{**record["kwargs"][0], "num_words": None, "language": None, "end_phrase": None}]
    assert check_record(record, "pour pour pour").strict == (True,)


def test_bad_records_are_reported():
    with pytest.raises(KeyError, match="unknown IFEval instruction"):
        check_record({"key": 1, "prompt": "p", "instruction_id_list": ["nope:nope"], "kwargs": [{}]}, "x")
    with pytest.raises(ValueError, match="kwargs"):
        check_record({"key": 1, "prompt": "p", "instruction_id_list": ["punctuation:no_comma"], "kwargs": []}, "x")


# -- lm-eval's utilities and the Punkt data -------------------------------------------------------------

@pytest.mark.parametrize("text, n", [
    ("xx,x. xx,x! xx/x. x{x}x? x.", 5),  # expectations of the upstream instructions_util_test.py
    ("xx,x! xxxx. x(x)x?", 3),
    ("xxxx. xx,x! xx|x. x&x x?", 4),
    ("xx-x]xx,x! x{x}xx,x.", 2),
    ("Dr. Smith paid $3.50 at 5 p.m. on Jan. 3. Then he left!", 2),
])
def test_count_sentences(text, n):
    assert util.count_sentences(text) == n


def test_count_words_and_split_into_sentences():
    assert util.count_words("word1, word2, word3, word4.") == 4
    assert util.count_words("\n  Hyphenated-word has two word counts.\n  ") == 6
    assert util.split_into_sentences("The U.S.A has many Ph.D. students. They will often haven a .com website.") == [
        "The U.S.A has many Ph.D. students.", "They will often haven a .com website."]


def test_the_checkers_use_lm_eval_not_a_copy():
    assert {cls.__module__ for cls in INSTRUCTION_DICT.values()} == {"lm_eval.tasks.ifeval.instructions"}
    assert len(INSTRUCTION_DICT) == 25


def test_punkt_tab_tables_are_the_package_tables_in_nltk_layout(tmp_path):
    lang = write_punkt_tab(tmp_path)
    model = punkt.load_model("english")
    assert lang == tmp_path / "tokenizers" / "punkt_tab" / "english"
    assert (lang / "abbrev_types.txt").read_text().splitlines() == sorted(model.abbrev_types)
    assert len((lang / "ortho_context.tab").read_text().splitlines()) == len(model.ortho_context)
    assert write_punkt_tab(tmp_path) == lang  # idempotent


def test_english_model_is_the_plain_punkt_tab_conversion():
    model = punkt.load_model("english")
    assert model.metadata.source == "punkt_tab:english"
    assert not model.numeric_abbrev_types  # no extension rules beyond NLTK's tables


def test_nltk_reads_the_written_tables():
    texts = ["Dr. Smith went home. He was tired.",
             "The U.S.A has many Ph.D. students. They will often haven a .com website."]
    assert [len(nltk.sent_tokenize(t)) for t in texts] == [2, 2]
    assert nltk.word_tokenize("HELLO WORLD. Isn't it?")[:3] == ["HELLO", "WORLD", "."]


NO_NETWORK_SCRIPT = """
import socket, sys
def refuse(*args, **kwargs):
    raise OSError("outbound connection refused by the test")
socket.socket.connect = refuse
socket.socket.connect_ex = refuse
socket.create_connection = refuse
socket.getaddrinfo = refuse
import nltk
def no_download(*args, **kwargs):
    raise AssertionError("nltk.download called")
nltk.download = no_download
from evaluation.metrics.ifeval import mini_records, score_response
records = {r["key"]: r for r in mini_records()}
assert score_response(records[1006], "Linen breathes. It wicks moisture away.")["prompt_strict"] == 1.0
assert score_response(records[1021], "LAST CALL, ONLY seconds left, GO!")["prompt_strict"] == 1.0
print("ok")
"""


def test_checkers_import_and_run_with_every_outbound_connection_refused(tmp_path):
    # A fresh data dir: the tables are written from the package, nothing is fetched.
    env = {"HARNESSOPS_VAR_DIR": str(tmp_path), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1",
           "NLTK_DATA": str(tmp_path / "empty"), "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run([sys.executable, "-c", NO_NETWORK_SCRIPT], env=env, capture_output=True, text=True,
                          timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().endswith("ok")
    assert (tmp_path / "nltk_data" / "tokenizers" / "punkt_tab" / "english" / "ortho_context.tab").is_file()
