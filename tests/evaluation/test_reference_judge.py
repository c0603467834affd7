"""The reference judge: every path of the rubric, the text normalisation and tool-call matching."""

import pytest

from evaluation.judges import Verdict, available_judges, get_judge, judge_reference, register_judge, vote
from evaluation.judges.reference import CHECKS, argument_matches
from evaluation.judges.text import contains, normalise, numbers, tokens
from tests.evaluation.builders import make_case, make_trace, tool_step

PRICE_CASE = dict(facts=("71.20", "M"), forbidden=("free shipping",), skills=("product-qa",),
                  tools=(("get_product_info_by_link_id", {"link_id": "L001"}),))
LOOKUP = tool_step("get_product_info_by_link_id", {"link_id": "L001", "fields": ["price"]},
                   result={"promo_price": 71.2})


def judged(reply, *, case=None, **trace_kwargs):
    case = case or make_case(**PRICE_CASE)
    trace_kwargs.setdefault("steps", [LOOKUP])
    trace_kwargs.setdefault("skills", ["product-qa"])
    return judge_reference(case, make_trace(reply, **trace_kwargs))


# -- the rubric, path by path -----------------------------------------------------------------------

def test_accurate_and_effective():
    v = judged("It's just $71.2 today, and size M is in stock!")
    assert (v.accuracy, v.effectiveness) == (1, 1.0)
    assert v.checks == dict.fromkeys(CHECKS, True)
    assert v.reasons == () and v.judge == "reference/v1"


def test_accurate_but_no_reply_skill_loaded_is_half_effective():
    v = judged("It's $71.20 now and M is available.", skills=[])
    assert (v.accuracy, v.effectiveness) == (1, 0.5)
    assert v.checks["skills"] is False
    assert any("reply skill" in r for r in v.reasons)
    skill_reason = next(r for r in v.reasons if "reply skill" in r)
    assert "[" not in skill_reason and "'" not in skill_reason  # a sentence, not Python lists
    assert skill_reason.endswith("loaded none)")


def test_accurate_but_expected_tool_call_missing_is_half_effective():
    v = judged("It's $71.20 now and M is available.", steps=[])
    assert (v.accuracy, v.effectiveness) == (1, 0.5)
    assert v.checks["tools"] is False
    assert v.reasons == ('expected tool call not made: get_product_info_by_link_id({"link_id": "L001"})',)


def test_tool_call_with_the_wrong_arguments_does_not_count():
    wrong = tool_step("get_product_info_by_link_id", {"link_id": "L013"}, result={})
    v = judged("It's $71.20 now and M is available.", steps=[wrong])
    assert v.checks["tools"] is False and v.effectiveness == 0.5


# -- outcome × case kind: a safety net is never a correct answer ----------------------------------------

OUTCOMES = ("replied", "silent", "fallback", "deadline", "error")
FALLBACK_LINE = "Great question! Let me double-check that and get right back to you. It's $71.20 in M."
CASE_KINDS = {
    # kind: (case, the reply a turn with this outcome carries when it speaks)
    "facts": make_case(**PRICE_CASE),
    "chat": make_case(category="casual_chat", message="hi Mia!", skills=("casual-chat",)),
    "refusal": make_case(category="discount", message="give me 90% off pls", skills=("discount-promotion",),
                         forbidden=("90% off is fine",), meta={"forbidden_tools": ["issue_coupon"]}),
    "silence": make_case(category="irrelevant", message="dm me for crypto", silent=True, skills=()),
}


def _turn(outcome, kind):
    """A trace that ended with `outcome`; when it speaks, the reply states every fact of the case."""
    case = CASE_KINDS[kind]
    silent = outcome == "silent"
    reply = FALLBACK_LINE if outcome in ("fallback", "deadline", "error") else "It's just $71.20 today in M!"
    skills = list(case.expected.skills[:1])
    return judge_reference(case, make_trace(reply, silent=silent, outcome=outcome, skills=skills,
                                            steps=[LOOKUP] if kind == "facts" else []))


@pytest.mark.parametrize("kind", sorted(CASE_KINDS))
@pytest.mark.parametrize("outcome", OUTCOMES)
def test_every_outcome_against_every_case_kind(outcome, kind):
    v = _turn(outcome, kind)
    correct = outcome == ("silent" if kind == "silence" else "replied")
    assert bool(v.accuracy) is correct, v.reasons
    assert (v.effectiveness == 1.0) is correct, v.reasons
    if outcome in ("fallback", "deadline", "error"):
        # not even partial credit, whatever the fallback line says (it states the facts here)
        assert (v.accuracy, v.effectiveness) == (0, 0.0)
        assert v.checks["answered"] is False
        assert any(f"“{outcome}” is not a real" in r for r in v.reasons)


def test_a_silent_deadline_is_not_the_expected_silence():
    case = CASE_KINDS["silence"]
    v = judge_reference(case, make_trace("", silent=True, outcome="deadline"))
    assert (v.accuracy, v.effectiveness) == (0, 0.0) and v.checks["silence"] is True


def test_some_facts_is_partially_correct():
    v = judged("It's $71.20 today!")  # the size fact is missing
    assert (v.accuracy, v.effectiveness) == (0, 0.5)
    assert v.checks["facts"] is False
    assert "missing fact: “M”" in v.reasons
    assert "partially correct: 1 of 2 facts" in v.reasons


def test_no_expected_fact_is_ineffective():
    v = judged("It's a lovely sweater, very soft.")
    assert (v.accuracy, v.effectiveness) == (0, 0.0)


def test_a_single_missing_fact_is_not_partial_credit():
    case = make_case(facts=("71.2",), skills=(), tools=())
    v = judge_reference(case, make_trace("It's on sale today!"))
    assert (v.accuracy, v.effectiveness) == (0, 0.0)


def test_forbidden_claim_makes_an_otherwise_correct_reply_wrong():
    v = judged("$71.20 in M, with free shipping!")
    assert (v.accuracy, v.effectiveness) == (0, 0.0)
    assert v.checks["forbidden"] is False and v.checks["facts"] is True
    assert "forbidden claim present: “free shipping”" in v.reasons


def test_forbidden_claim_cancels_partial_credit():
    v = judged("Only $71.20 and free shipping!")
    assert (v.accuracy, v.effectiveness) == (0, 0.0)


def test_expected_silence_kept():
    case = make_case(category="irrelevant", message="check my channel!!", silent=True, skills=())
    v = judge_reference(case, make_trace(silent=True))
    assert (v.accuracy, v.effectiveness) == (1, 1.0)
    assert v.checks["silence"] and v.checks["answered"]


def test_expected_silence_broken():
    case = make_case(category="irrelevant", message="check my channel!!", silent=True, skills=())
    v = judge_reference(case, make_trace("Thanks, I'll take a look!"))
    assert (v.accuracy, v.effectiveness) == (0, 0.0)
    assert v.reasons[0] == "expected silence, but the turn replied"


def test_silent_when_a_reply_was_expected():
    v = judged("", silent=True)
    assert (v.accuracy, v.effectiveness) == (0, 0.0)
    assert v.checks["silence"] is False
    assert "expected a reply, but the turn was silent" in v.reasons


def test_any_one_of_the_expected_skills_is_enough():
    case = make_case(facts=("71.2",), skills=("product-qa", "discount-promotion"), tools=())
    v = judge_reference(case, make_trace("$71.20 today", skills=["discount-promotion"]))
    assert v.checks["skills"] and v.effectiveness == 1.0


def test_case_without_expectations_only_needs_a_real_answer():
    case = make_case(category="casual_chat", facts=(), skills=(), tools=())
    assert judge_reference(case, make_trace("Hello there!", steps=[])).effectiveness == 1.0


# -- normalisation -------------------------------------------------------------------------------------

@pytest.mark.parametrize("reply, fact, expected", [
    ("now $71.2", "71.20", True),
    ("now 71.20 dollars", "$71.2", True),
    ("now USD71.20", "71.2", False),  # "usd71" is one letter-led token: not the number
    ("now 71.25", "71.2", False),
    ("now 171.2", "71.2", False),
    ("it's 1,299.00", "1299", True),
    ("in sizes 8, 10", "810", False),
    ("20 percent off", "20% off", True),
    ("HAND-WASH   cold", "hand wash cold", True),
    ("Merino wool", "M", False),
    ("size M.", "m", True),
    ("link L001", "l001", True),
    ("link L001", "1", False),
    ("weighs 310g", "310 g", True),
    ("这是一支笔。", "一支笔", True),
    ("anything", "!!!", True),  # no tokens: vacuous
    ("It's lovely, I'm sure", "S", False),  # contractions are not sizes
    ("It's lovely, I’m sure", "M", False),
    ("Mia's favourite", "Mia", True),
    ("size 'M' is left", "M", True),
])
def test_contains(reply, fact, expected):
    assert contains(reply, fact) is expected


def test_tokens_and_numbers():
    assert tokens("Only $71.20 — 0.50 off, 007!") == ["only", "71.2", "0.5", "off", "7"]
    assert normalise("  Size\tM\n in  STOCK ") == "size m in stock"
    assert numbers("L001 costs $89.00, 20% off") == ["89", "20"]


# -- tool-call matching --------------------------------------------------------------------------------

@pytest.mark.parametrize("expected, actual, ok", [
    ({"link_id": "L001"}, {"link_id": "L001", "extra": 1}, True),
    ({"link_id": "L001"}, {"link_id": " l001 "}, True),
    ({"discount_pct": 30}, {"discount_pct": 30.0}, True),
    ({"discount_pct": 30}, {"discount_pct": "30"}, False),
    ({"flag": True}, {"flag": 1}, False),
    ({"filter": {"size": "M"}}, {"filter": {"size": "M", "colour": "navy"}}, True),
    ({"ids": ["L001", "L002"]}, {"ids": ["L001", "L002"]}, True),
    ({"ids": ["L001"]}, {"ids": ["L001", "L002"]}, False),
    ({"link_id": "L001"}, {}, False),
    ({}, {"anything": 1}, True),
])
def test_argument_matches(expected, actual, ok):
    assert argument_matches(expected, actual) is ok


def test_malformed_arguments_never_match():
    case = make_case(facts=(), skills=(), tools=(("search_faq", {"query": "shipping"}),))
    trace = make_trace("Ships in 1-2 days.", steps=[tool_step("search_faq", '{"query": "shipping"')])
    assert judge_reference(case, trace).checks["tools"] is False


def test_each_step_satisfies_one_expected_call():
    case = make_case(facts=(), skills=(), tools=(("get_promotion", {}), ("get_promotion", {"link_id": "L001"})))
    one = [tool_step("get_promotion", {"link_id": "L001"}, result=[])]
    assert judge_reference(case, make_trace("ok", steps=one)).checks["tools"] is False
    two = one + [tool_step("get_promotion", {}, result=[])]
    assert judge_reference(case, make_trace("ok", steps=two)).checks["tools"] is True


def test_failed_or_denied_calls_still_count_as_made():
    case = make_case(facts=(), skills=(), tools=(("get_product_info_by_link_id", {"link_id": "L001"}),))
    step = tool_step("get_product_info_by_link_id", {"link_id": "L001"}, error="timed out after 800 ms")
    assert judge_reference(case, make_trace("Let me check that.", steps=[step])).checks["tools"] is True


# -- Verdict, registry, vote ---------------------------------------------------------------------------

def test_verdict_validates_its_scales():
    with pytest.raises(ValueError):
        Verdict(accuracy=2, effectiveness=1.0)
    with pytest.raises(ValueError):
        Verdict(accuracy=1, effectiveness=0.7)
    with pytest.raises(ValueError):
        Verdict(accuracy=True, effectiveness=1.0)
    v = Verdict(accuracy=1, effectiveness=1, reasons=["a"], checks={"x": 1})
    assert v.effectiveness == 1.0 and v.reasons == ("a",) and v.checks == {"x": True}
    assert Verdict.from_dict(v.to_dict()) == v


def test_registry():
    assert get_judge("reference") is judge_reference
    assert "reference" in available_judges()
    with pytest.raises(KeyError, match="registered: .*reference"):
        get_judge("nope")

    @register_judge("test-always-right")
    def always_right(case, trace):
        return Verdict(accuracy=1, effectiveness=1.0, judge="always")

    assert get_judge("test-always-right") is always_right
    with pytest.raises(ValueError, match="already registered"):
        register_judge("test-always-right", lambda c, t: None)
    replacement = register_judge("test-always-right", lambda c, t: None, replace=True)
    assert get_judge("test-always-right") is replacement


def test_vote_majority_and_median():
    a = Verdict(1, 1.0, ("fine",), {"facts": True, "tools": True}, judge="m1")
    b = Verdict(1, 0.5, ("no skill",), {"facts": True, "tools": False}, judge="m2")
    c = Verdict(0, 0.0, ("wrong price",), {"facts": False, "tools": False}, judge="m3")
    v = vote([a, b, c])
    assert (v.accuracy, v.effectiveness) == (1, 0.5)  # 2 of 3; median of 0, 0.5, 1
    assert v.checks == {"facts": True, "tools": False}
    assert v.reasons == ("[m1] fine", "[m2] no skill", "[m3] wrong price")
    assert v.judge == "vote(m1,m2,m3)"


def test_vote_ties_are_conservative():
    a = Verdict(1, 1.0, ("x",), {"facts": True}, judge="m")
    b = Verdict(0, 0.5, ("x",), {"facts": False}, judge="m")
    v = vote([a, b])
    assert (v.accuracy, v.effectiveness) == (0, 0.5)  # tie → 0; lower median of 0.5, 1
    assert v.checks == {"facts": False}
    assert v.reasons == ("x",)  # same judge name: no prefix, de-duplicated
    assert vote([a]) is a
    with pytest.raises(ValueError):
        vote([])


# -- simulator conventions in case.meta ----------------------------------------------------------------

def test_any_of_tools():
    case = make_case(facts=("2",), skills=(), tools=(), meta={"any_of_tools": ["search_faq", "get_product_info"]})
    none = judge_reference(case, make_trace("It has a 2 year warranty."))
    assert (none.accuracy, none.effectiveness) == (1, 0.5)
    assert none.reasons == ("none of the expected tools called (any of search_faq, get_product_info)",)
    one = make_trace("It has a 2 year warranty.", steps=[tool_step("get_product_info", {"link_id": "L001"})])
    assert judge_reference(case, one).effectiveness == 1.0


def test_forbidden_tools_even_when_denied():
    case = make_case(category="casual_chat", facts=(), skills=(), tools=(), meta={"forbidden_tools": ["issue_coupon"]})
    coupon = tool_step("issue_coupon", {"link_id": "L001", "discount_pct": 50}, error="no", denied_by="cap")
    v = judge_reference(case, make_trace("Hi! Welcome!", steps=[coupon, coupon]))
    assert (v.accuracy, v.effectiveness) == (1, 0.5)
    assert v.checks["tools"] is False and v.reasons == ("forbidden tool called: issue_coupon",)


def test_an_abstention_has_no_scores_and_does_not_vote():
    nothing = Verdict.abstain(judge="m3", reasons=["model unreachable"], model_ids=["Qwen/Qwen3-8B"])
    assert nothing.abstained and (nothing.accuracy, nothing.effectiveness) == (None, None)
    assert Verdict.from_dict(nothing.to_dict()) == nothing
    with pytest.raises(ValueError, match="neither"):
        Verdict(accuracy=1, effectiveness=None)
    yes = Verdict(1, 1.0, ("fine",), judge="m1", model_ids=("a",))
    no = Verdict(0, 0.0, ("wrong",), judge="m2", model_ids=("b",))
    # the abstaining judge does not break the tie in either direction
    tied = vote([yes, no, nothing])
    assert (tied.accuracy, tied.effectiveness) == (0, 0.0) and tied.model_ids == ("a", "b", "Qwen/Qwen3-8B")
    assert vote([yes, nothing]).accuracy == 1
    assert "[m3] model unreachable" in vote([yes, nothing]).reasons
    everyone_abstains = vote([nothing, Verdict.abstain(judge="m4")])
    assert everyone_abstains.abstained and everyone_abstains.judge == "vote(m3,m4)"
