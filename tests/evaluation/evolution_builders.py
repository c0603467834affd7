"""Hand-made failure records for the evolution tests (the shapes an eval run with the reference judge leaves)."""

from evaluation.evolution.signatures import CaseRecord
from tests.evaluation.builders import make_trace, tool_step

SKILL_REASON = "no expected reply skill loaded (expected one of product-qa; loaded casual-chat)"


def skill_missing(i: int, message: str = "") -> CaseRecord:
    """The product-qa skill was never loaded: the model chatted instead of answering the price."""
    return CaseRecord(case_id=f"skill-{i}", category="product_qa", accuracy=0, effectiveness=0,
                      reasons=("missing fact: '$71.20'", SKILL_REASON), reply="Hi there, welcome!",
                      message=message or f"how much is the sweater now {i}", expected_skills=("product-qa",),
                      trace=make_trace("Hi there, welcome!", skills=("casual-chat",)))


def denied_link(i: int) -> CaseRecord:
    """The product tool was called with a name instead of a link id and the argument hook denied it."""
    step = tool_step("get_product_info_by_link_id", {"link_id": "Merino Sweater"}, error="Invalid arguments",
                     denied_by="validate-link-id-args")
    return CaseRecord(case_id=f"link-{i}", category="product_qa", accuracy=0, effectiveness=0,
                      reasons=("missing fact: 'M'",), reply="Let me check that.", message=f"is size M in stock {i}",
                      expected_skills=("product-qa",), trace=make_trace("Let me check that.", skills=("product-qa",),
                                                                       steps=[step]))


def cut_reply(i: int) -> CaseRecord:
    """The reply-length hook rewrote (cut) a long reply and the fact at its end was lost."""
    trace = make_trace("The Merino Crew-Neck Sweater is a lovely…", skills=("product-qa",),
                       steps=[tool_step("get_product_info_by_link_id", {"link_id": "L001"}, result={"price": 89})])
    trace["steps"].append({"kind": "hook", "event": "reply", "hook": "reply-length", "fired": True,
                           "action": "rewrite", "message": "", "error": ""})
    trace["hooks_fired"] = ["reply-length"]
    return CaseRecord(case_id=f"cut-{i}", category="product_qa", accuracy=0, effectiveness=0.5,
                      reasons=("missing fact: '$71.20'", "partially correct: 1 of 2 facts"),
                      reply=trace["reply"], message=f"tell me about the sweater {i}", expected_skills=("product-qa",),
                      trace=trace)


def not_called(i: int) -> CaseRecord:
    """The discount skill was loaded but get_promotion never called."""
    return CaseRecord(case_id=f"promo-{i}", category="discount", accuracy=1, effectiveness=0.5,
                      reasons=('expected tool call not made: get_promotion({"link_id": "L001"})',),
                      reply="Yes, there's a deal on it!", message=f"any discount on the sweater {i}",
                      expected_skills=("discount-promotion",),
                      trace=make_trace("Yes, there's a deal on it!", skills=("discount-promotion",)))


def passing(i: int, skill: str = "product-qa") -> CaseRecord:
    return CaseRecord(case_id=f"pass-{i}", category="product_qa", accuracy=1, effectiveness=1,
                      message="price of L001?", expected_skills=(skill,),
                      trace=make_trace("$71.20 now.", skills=(skill,)))


def odd(i: int) -> CaseRecord:
    """One-off failures, each its own kind: the long tail."""
    kinds = [("deadline", "outcome 'deadline' is not a real answer", ("faq-reply",), "faq"),
             ("fallback", "forbidden claim present: 'free shipping'", ("discount-promotion",), "discount"),
             ("replied", "expected silence, but the turn replied", (), "irrelevant")]
    outcome, reason, skills, category = kinds[i % len(kinds)]
    return CaseRecord(case_id=f"odd-{i}", category=category, accuracy=0, effectiveness=0, reasons=(reason,),
                      reply="ok", message=f"something unusual number {i}", expected_skills=skills,
                      trace=make_trace("ok", outcome=outcome, skills=skills))
