"""HSA-RL rewards on hand-made turns: traces written by hand, scored against a case's ground truth."""

import json

import pytest

from harness.simulator.cases import Case, Expected, ExpectedCall
from training.rewards import (
    LENGTH_PENALTY,
    SEGMENT_OF,
    length_penalty,
    reward_function,
    reward_names,
    skill_selection_score,
    tool_rationality_score,
)

CASE = Case(case_id="c1", category="product_qa", room={"room_id": "r"}, viewer_id="v1", message="price of L002?",
            expected=Expected(facts=("49.5",), forbidden=("55",), skills=("product-qa",),
                              tools=(ExpectedCall("get_product_info_by_link_id", {"link_id": "L002"}),)),
            meta={"forbidden_tools": ["issue_coupon"]})
CHAT = Case(case_id="c2", category="casual_chat", room={"room_id": "r"}, viewer_id="v2", message="hi!",
            expected=Expected(skills=("casual-chat",)))
SPAM = Case(case_id="c3", category="irrelevant", room={"room_id": "r"}, viewer_id="v3", message="dm me",
            expected=Expected(silent=True))


def tool(name, arguments, error=""):
    return {"kind": "tool", "name": name, "arguments": json.dumps(arguments), "error": error}


def trace(reply, steps=(), skills=(), outcome="replied", silent=False):
    return {"reply": reply, "steps": list(steps), "skills_loaded": list(skills), "outcome": outcome,
            "silent": silent}


GOOD = trace("It's $49.50 today.", [tool("get_product_info_by_link_id", {"link_id": "L002"}),
                                    tool("load_skill", {"name": "product-qa"})], ["product-qa"])
WRONG_PRICE = trace("It's $55.", [tool("get_product_info_by_link_id", {"link_id": "L002"})], ["product-qa"])
NO_LOOKUP = trace("It's $49.50 today.", [tool("load_skill", {"name": "product-qa"})], ["product-qa"])
NO_SKILL = trace("It's $49.50 today.", [tool("get_product_info_by_link_id", {"link_id": "L002"})])
FALLBACK = trace("One moment please!", outcome="fallback")


def score(name, cases, traces, segments=None):
    columns = {"case": [json.dumps(c.to_dict()) for c in cases], "trace": traces,
               "segments": segments or [[] for _ in cases]}
    completions = [[{"role": "assistant", "content": t.get("reply", "")}] for t in traces]
    return reward_function(name)(prompts=[[]] * len(cases), completions=completions, completion_ids=None, **columns)


def test_accuracy_and_effectiveness_follow_the_judge():
    turns = [GOOD, WRONG_PRICE, NO_LOOKUP, NO_SKILL, FALLBACK]
    assert score("accuracy", [CASE] * 5, turns) == [1.0, 0.0, 1.0, 1.0, 0.0]
    assert score("effectiveness", [CASE] * 5, turns) == [1.0, 0.0, 0.5, 0.5, 0.0]
    assert score("accuracy", [SPAM], [trace("", outcome="silent", silent=True)]) == [1.0]


def test_tool_rationality():
    assert tool_rationality_score(CASE, GOOD) == 1.0
    assert tool_rationality_score(CASE, NO_LOOKUP) == 0.0                      # the one needed call is missing
    repeated = trace("", [tool("get_product_info_by_link_id", {"link_id": "L002"})] * 2)
    assert tool_rationality_score(CASE, repeated) == 0.75                      # repeating a call that worked
    retried = trace("", [tool("get_product_info_by_link_id", {"link_id": "L002"}, error="timed out after 800 ms"),
                         tool("get_product_info_by_link_id", {"link_id": "L002"})])
    assert tool_rationality_score(CASE, retried) == 1.0                        # retrying a failed call is fine
    bad_args = trace("", [tool("get_product_info_by_link_id", {"link": "x"}, error="invalid arguments: x"),
                          tool("get_product_info_by_link_id", {"link_id": "L002"})])
    assert tool_rationality_score(CASE, bad_args) == 0.75
    coupon = trace("", [tool("get_product_info_by_link_id", {"link_id": "L002"}), tool("issue_coupon", {})])
    assert tool_rationality_score(CASE, coupon) == 0.0                         # a forbidden write
    assert tool_rationality_score(CHAT, trace("hi")) == 1.0
    assert tool_rationality_score(CHAT, trace("hi", [tool("search_faq", {"query": "hi"})])) == 0.75


def test_skill_selection():
    assert skill_selection_score(CASE, GOOD) == 1.0
    assert skill_selection_score(CASE, NO_SKILL) == 0.0
    assert skill_selection_score(CASE, trace("", skills=["casual-chat"])) == 0.0
    noisy = trace("", skills=["product-qa", "ground-numbers", "vip-concierge"])
    assert skill_selection_score(CASE, noisy) == 0.5
    assert skill_selection_score(CASE, trace("", skills=["product-qa", "ground-numbers"])) == 1.0
    assert score("skill_selection", [SPAM, CASE], [trace(""), GOOD]) == [None, 1.0]  # silence: not applicable


def test_reasoning_length_penalty_per_segment():
    assert [length_penalty(n) for n in (0, 100, 150, 200, 900)] == [0.0, 0.0, pytest.approx(-0.05), -0.1, -0.1]
    segments = [[{"kind": "tool", "reasoning_tokens": 300}, {"kind": "tool", "reasoning_tokens": 0},
                 {"kind": "reply", "reasoning_tokens": 150}],
                [{"kind": "reply", "reasoning_tokens": 20}]]
    assert score("tool_reasoning_length", [CASE, CHAT], [GOOD, GOOD], segments) == [pytest.approx(-0.05), None]
    assert score("reply_reasoning_length", [CASE, CHAT], [GOOD, GOOD], segments) == [pytest.approx(-0.05), 0.0]
    assert LENGTH_PENALTY == -0.1


def test_every_reward_has_a_segment_and_a_name_trl_logs():
    assert set(SEGMENT_OF) == set(reward_names())
    assert {SEGMENT_OF[n] for n in reward_names()} == {"tool", "reply"}
    assert all(reward_function(n).__name__ == n for n in reward_names())
    with pytest.raises(KeyError, match="registered"):
        reward_function("vibes")
