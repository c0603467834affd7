"""The simulator: seeded rooms, viewer cases in the workload mix, and the sandboxed tools with faults."""

import asyncio
import json
import re
from collections import Counter
from pathlib import Path

import jsonschema
import pytest

from harness.model_protocol import ModelResponse, ToolCall
from harness.runtime import RoomContext, ToolContext, ToolError, TurnInput, engine_for, run_turn
from harness.simulator import (
    CATEGORIES,
    FAULTS,
    SANDBOX_TARGETS,
    WORKLOAD_MIX,
    Case,
    SandboxTools,
    category_quotas,
    generate_cases,
    generate_room,
    load_demo_room,
)
from harness.spec import parse_files, read_dir
from serving.backends.scripted import ScriptedBackend

DEMO = Path(__file__).resolve().parents[2] / "harness" / "demo" / "avatar"
SPEC = parse_files(read_dir(DEMO))
TOOLS = {t.name: t for t in SPEC.tools}
REPLY_SKILLS = {s.name for s in SPEC.skills if s.kind == "reply"}
DEMO_ROOM = load_demo_room()


@pytest.fixture(scope="module")
def cases_5000():
    return generate_cases(11, 5000)


@pytest.fixture(scope="module")
def demo_cases():
    return generate_cases(12, 2000, room=DEMO_ROOM)


# --- rooms -----------------------------------------------------------------------------------------------

def assert_room_consistent(room):
    demo_product_keys = set(DEMO_ROOM["products"][0])
    assert set(DEMO_ROOM) - {"host"} <= set(room)
    link_ids = [p["link_id"] for p in room["products"]]
    assert link_ids == [f"L{i:03d}" for i in range(1, len(link_ids) + 1)]
    assert len({p["name"] for p in room["products"]}) == len(link_ids), "product names are unique"
    assert room["on_screen"] in link_ids
    for p in room["products"]:
        assert set(p) == demo_product_keys
        assert p["promo_price"] is None or 0 < p["promo_price"] < p["price"]
        stock = p["stock"]
        if isinstance(stock, dict):
            assert set(stock) in (set(p["sizes"]), set(p["colours"])) and all(v >= 0 for v in stock.values())
        else:
            assert isinstance(stock, int) and stock >= 0
    products = {p["link_id"]: p for p in room["products"]}
    promoted = Counter()
    for promo in room["promotions"]:
        assert re.fullmatch(r"PR\d{2}", promo["id"]) and set(promo["link_ids"]) <= set(products)
        coupon = promo.get("coupon") or promo.get("coupon_allowed")
        for lid in promo["link_ids"]:
            p = products[lid]
            if coupon:
                assert p["promo_price"] is None, f"{lid}: a viewer coupon is only for items without a promo price"
            else:
                promoted[lid] += 1
                if promo.get("discount_pct"):
                    assert p["promo_price"] == round(p["price"] * (100 - promo["discount_pct"]) / 100, 2), lid
    assert {lid for lid, p in products.items() if p["promo_price"] is not None} == set(promoted)
    assert max(promoted.values(), default=1) == 1, "one product promotion per item"
    assert all(set(entry) == {"q", "a"} and entry["q"] and entry["a"] for entry in room["faq"])
    ids = [o["order_id"] for o in room["orders"]]
    assert len(set(ids)) == len(ids) and all(re.fullmatch(r"O\d{6}", i) for i in ids)
    for order in room["orders"]:
        assert order["link_id"] in products and order["viewer_id"].startswith("v_")
        assert {"status", "shipped_at", "eta", "carrier", "tracking_no", "placed_at", "delivered_at"} <= set(order)
        if order["status"] == "refunded":
            assert order["refund"]["amount"] > 0
    RoomContext.from_dict(room)
    json.dumps(room)


def test_the_demo_room_passes_the_same_consistency_checks():
    assert_room_consistent(DEMO_ROOM)


@pytest.mark.parametrize("seed", [0, 1, 2, "abc", 99])
def test_generated_rooms_are_consistent(seed):
    room = generate_room(seed)
    assert_room_consistent(room)
    assert len(room["products"]) == 24 and room["room_id"] == f"sim-{seed}"
    assert {p["category"].split("/")[0] for p in room["products"]} == {"apparel", "beauty", "home"}


def test_rooms_are_deterministic_per_seed():
    assert generate_room(5) == generate_room(5)
    assert generate_room(5) != generate_room(6)
    small = generate_room(7, n_products=3, room_id="r")
    assert len(small["products"]) == 3 and small["room_id"] == "r"
    import random
    assert generate_room(random.Random(1)) == generate_room(random.Random(1))


# --- cases -------------------------------------------------------------------------------------------------

def test_cases_are_deterministic_per_seed():
    first = generate_cases(3, 400)
    assert first == generate_cases(3, 400)
    assert json.dumps([c.to_dict() for c in generate_cases(3, 50)]) == \
        json.dumps([c.to_dict() for c in generate_cases(3, 50)])
    other = generate_cases(4, 400)
    assert [c.message for c in first] != [c.message for c in other] and first[0].room != other[0].room
    assert len({c.case_id for c in first}) == 400 and first[0].case_id == "sim-3-00000"


def test_cases_do_not_depend_on_the_process_hash_seed():
    import hashlib
    import os
    import subprocess
    import sys

    code = ("import hashlib, json; from harness.simulator import generate_cases; "
            "print(hashlib.sha256(json.dumps([c.to_dict() for c in generate_cases(9, 300, n_rooms=2)])"
            ".encode()).hexdigest())")
    root = Path(__file__).resolve().parents[2]
    digests = {subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True,
                              env={**os.environ, "PYTHONHASHSEED": str(h)}).stdout for h in (1, 2)}
    assert len(digests) == 1
    here = hashlib.sha256(json.dumps([c.to_dict() for c in generate_cases(9, 300, n_rooms=2)]).encode()).hexdigest()
    assert digests == {here + "\n"}


def test_several_rooms_per_set():
    cases = generate_cases(6, 200, n_rooms=3)
    assert {c.room["room_id"] for c in cases} == {"sim-6-0", "sim-6-1", "sim-6-2"}


def test_the_category_mix_of_5000_cases_follows_the_workload_mix(cases_5000):
    counts = Counter(c.category for c in cases_5000)
    total = sum(WORKLOAD_MIX.values())
    for category in CATEGORIES:
        observed = counts[category] / len(cases_5000)
        assert abs(observed - WORKLOAD_MIX[category]) <= 0.02, (category, observed)
        assert abs(observed - WORKLOAD_MIX[category] / total) <= 0.001, (category, observed)
    assert 0 < counts["irrelevant"] / len(cases_5000) < 0.01


def test_mix_overrides_and_small_sets_keep_every_category():
    quotas = category_quotas(200)
    assert sum(quotas.values()) == 200 and all(quotas[c] >= 1 for c in CATEGORIES)
    assert {c.category for c in generate_cases(1, 30, mix={"faq": 1, "irrelevant": 1})} == {"faq", "irrelevant"}
    with pytest.raises(ValueError):
        generate_cases(1, 10, mix={"weather": 1.0})


def check_cases(cases):
    for case in cases:
        assert case.category in CATEGORIES and case.message
        assert set(case.expected.skills) <= REPLY_SKILLS, case.case_id
        for call in case.expected.tools:
            tool = TOOLS[call.name]
            schema = {k: v for k, v in tool.parameters.items() if k != "required"}
            jsonschema.Draft202012Validator(schema).validate(dict(call.arguments))
            missing = set(tool.parameters.get("required", ())) - set(call.arguments)
            assert missing <= {"query"} | ({"position"} if call.name == "adjust_presentation_order" else set()), \
                (case.case_id, call)
        for name in [*case.meta.get("forbidden_tools", ()), *case.meta.get("any_of_tools", ())]:
            assert name in TOOLS
        room_text = json.dumps(case.room, ensure_ascii=False).lower()
        for fact in case.expected.facts:
            if re.fullmatch(r"\d+(\.\d+)?", fact):
                assert re.search(rf"(?<![\d.]){re.escape(fact)}(\.0+)?(?![\d])", room_text) or \
                    re.search(rf"(?<![\d.]){re.escape(fact)}0\b", room_text), (case.case_id, fact)
            else:
                assert fact.lower() in room_text, (case.case_id, fact)
        if case.category == "irrelevant":
            assert case.expected.silent and not case.expected.tools and not case.expected.skills
        else:
            assert not case.expected.silent and case.expected.skills


def test_generated_cases_name_demo_skills_and_tools_with_valid_arguments_and_grounded_facts(cases_5000):
    check_cases(cases_5000)


def test_cases_over_the_demo_room_are_valid_too(demo_cases):
    check_cases(demo_cases)
    orders = {o["order_id"]: o for o in DEMO_ROOM["orders"]}
    for case in demo_cases:
        for call in case.expected.tools:
            if call.name == "get_order_status":
                owner = orders[call.arguments["order_id"]]["viewer_id"]
                mine = case.meta.get("expects") != "permission_denied"
                assert (owner == case.viewer_id) == mine, case.case_id


def test_every_category_has_varied_phrasings(cases_5000, demo_cases):
    for category in CATEGORIES:
        messages = {c.message.lower() for c in cases_5000 + demo_cases if c.category == category}
        assert len(messages) >= 5, category


def test_clarification_cases_carry_the_prior_dialogue(cases_5000):
    clarifications = [c for c in cases_5000 if c.category == "clarification"]
    assert clarifications
    for case in clarifications:
        assert 2 <= len(case.dialogue) <= 4
        assert {who for who, _ in case.dialogue} <= {"viewer", "assistant"} and case.dialogue[-1][0] == "assistant"


def test_case_json_round_trip(cases_5000, demo_cases):
    for case in cases_5000[:300] + demo_cases[:200]:
        assert Case.from_dict(json.loads(json.dumps(case.to_dict()))) == case


def test_skill_and_tool_names_can_be_mapped_to_a_harness_variant():
    cases = generate_cases(2, 300, harness_skill_names={"product-qa": "item_qa"},
                           tool_names={"get_product_info_by_link_id": "lookup_item"})
    qa = [c for c in cases if c.category == "product_qa"]
    assert all(c.expected.skills == ("item_qa",) for c in qa)
    assert "lookup_item" in {call.name for c in qa for call in c.expected.tools}
    assert "get_product_info_by_link_id" not in {call.name for c in cases for call in c.expected.tools}


def test_demo_input_hooks_block_exactly_the_irrelevant_cases(cases_5000, demo_cases):
    hooks = engine_for(SPEC)
    for case in cases_5000 + demo_cases:
        messages = [case.message] + [text for who, text in case.dialogue if who == "viewer"]
        for message in messages:
            outcome = hooks.run("input", {"message": message, "viewer_id": case.viewer_id,
                                          "room_id": case.room["room_id"]})
            blocked = outcome.action == "block"
            assert blocked == (case.category == "irrelevant" and message == case.message), (case.case_id, message)


def test_an_irrelevant_case_ends_silently_without_a_model_call():
    case = next(c for c in generate_cases(5, 400, mix={"irrelevant": 1}))
    backend = ScriptedBackend([])
    result = asyncio.run(run_turn(SPEC, TurnInput(case.message, case.viewer_id, RoomContext.from_dict(case.room)),
                                  backend, SandboxTools.for_case(case).registry()))
    assert (result.outcome, result.silent) == ("silent", True) and backend.calls == []


# --- the sandbox ---------------------------------------------------------------------------------------------

ROOM = generate_room(21)


def turn_calling(tool_name, args, viewer_id="v_test1", room=ROOM):
    backend = ScriptedBackend([
        ModelResponse(tool_calls=(ToolCall("s1", "load_skill", json.dumps({"name": "product-qa"})),
                                  ToolCall("t1", tool_name, json.dumps(args)))),
        "Let me check that for you!",
    ])
    return backend, TurnInput(message="how much is L001?", viewer_id=viewer_id, room=RoomContext.from_dict(room))


def tool_step(result, name):
    return next(s for s in result.trace["steps"] if s["kind"] == "tool" and s["name"] == name)


def test_every_demo_binding_target_is_served_by_the_sandbox():
    targets = {t.binding.target for t in SPEC.tools}
    assert targets == set(SANDBOX_TARGETS.values()) == set(SandboxTools(ROOM).callables())
    sandbox = SandboxTools(ROOM)
    registry = sandbox.registry()
    order = ROOM["orders"][0]
    no_promo = next(p["link_id"] for p in ROOM["products"] if p["promo_price"] is None)
    args = {"get_product_info_by_link_id": {"link_id": "L001"}, "search_products": {"query": "jeans"},
            "search_faq": {"query": "return policy"}, "get_promotion": {}, "get_order_status":
            {"order_id": order["order_id"]}, "issue_coupon": {"link_id": no_promo, "discount_pct": 5},
            "adjust_presentation_order": {"link_id": "L002", "position": 1}}
    for tool in SPEC.tools:
        outcome = asyncio.run(registry.execute(tool, args[tool.name], ToolContext(RoomContext.from_dict(ROOM),
                                                                                  order["viewer_id"])))
        assert "no builtin binding" not in outcome.error and "no sandbox binding" not in outcome.error
    assert [c.name for c in sandbox.calls] == [t.name for t in SPEC.tools]
    assert sandbox.queue == [{"viewer_id": order["viewer_id"], "queued": True, "link_id": "L002", "position": 1}]


def test_a_clean_turn_reads_the_world():
    sandbox = SandboxTools(ROOM)
    backend, turn = turn_calling("get_product_info_by_link_id", {"link_id": "L001"})
    result = asyncio.run(run_turn(SPEC, turn, backend, sandbox.registry()))
    step = tool_step(result, "get_product_info_by_link_id")
    assert step["error"] == "" and step["result"] == ROOM["products"][0] and result.outcome == "replied"
    assert [(c.name, c.args, c.fault) for c in sandbox.calls] == [("get_product_info_by_link_id",
                                                                  {"link_id": "L001"}, "")]


@pytest.mark.parametrize("kind, expected", [
    ("timeout", "timed out"), ("permission", "permission denied"), ("malformed", "malformed"), ("empty", None),
])
def test_each_fault_kind_reaches_the_trace(kind, expected):
    sandbox = SandboxTools(ROOM, forced_faults={"get_product_info_by_link_id": kind})
    backend, turn = turn_calling("get_product_info_by_link_id", {"link_id": "L001"})
    result = asyncio.run(run_turn(SPEC, turn, backend, sandbox.registry()))
    step = tool_step(result, "get_product_info_by_link_id")
    if expected is None:
        assert step["error"] == "" and step["result"] == {}
    else:
        assert expected in step["error"] and step.get("result") is None
        assert expected in backend.calls[1].messages[-1]["content"]  # the model sees the error
    assert result.outcome == "replied"
    assert {c.fault for c in sandbox.calls} == {kind}
    # get_product_info_by_link_id has retries: 1, so a retried fault is two recorded calls
    assert len(sandbox.calls) == (2 if kind in ("timeout", "malformed") else 1)


def test_case_faults_are_forced_faults():
    case = generate_cases(8, 50, mix={"after_sales": 1})[0]
    from dataclasses import replace
    case = replace(case, faults={"get_order_status": "permission"})
    sandbox = SandboxTools.for_case(case)
    assert sandbox.draw_fault("get_order_status") == "permission" and sandbox.draw_fault("search_faq") == ""


def test_world_errors_are_recorded_without_a_fault():
    order = ROOM["orders"][0]
    sandbox = SandboxTools(ROOM)
    backend, turn = turn_calling("get_order_status", {"order_id": order["order_id"]}, viewer_id="v_someone_else")
    result = asyncio.run(run_turn(SPEC, turn, backend, sandbox.registry()))
    assert tool_step(result, "get_order_status")["error"].startswith("permission denied")
    assert sandbox.calls[0].fault == "" and "another viewer" in sandbox.calls[0].error


def test_coupon_rules_of_the_room():
    room = RoomContext.from_dict(ROOM)
    coupon = next(p for p in ROOM["promotions"] if p.get("coupon"))
    eligible, pct = coupon["link_ids"][0], coupon["discount_pct"]
    promoted = next(p["link_id"] for p in ROOM["products"] if p["promo_price"] is not None)
    sandbox = SandboxTools(ROOM)
    issue = sandbox.callables()["demo.issue_coupon"]
    ctx = ToolContext(room, "v_a1")
    with pytest.raises(ToolError, match="no viewer coupon"):
        asyncio.run(issue({"link_id": promoted, "discount_pct": 5}, ctx))
    with pytest.raises(ToolError, match="at most"):
        asyncio.run(issue({"link_id": eligible, "discount_pct": pct + 5}, ctx))
    assert asyncio.run(issue({"link_id": eligible, "discount_pct": pct}, ctx))["coupon_code"].startswith("LIVE-")
    with pytest.raises(ToolError, match="already has a coupon"):
        asyncio.run(issue({"link_id": eligible, "discount_pct": pct}, ctx))
    assert len(sandbox.coupons) == 1 and [bool(c.error) for c in sandbox.calls] == [True, True, False, True]


def test_fault_rates_hold_statistically_and_are_seeded():
    rates = {"timeout": 0.1, "malformed": 0.05, "permission": 0.05, "empty": 0.2}
    ctx = ToolContext(RoomContext.from_dict(ROOM), "v_a1")

    def run_many(seed, n=4000):
        sandbox = SandboxTools(ROOM, fault_rates=rates, seed=seed, timeout_s=0)
        fn = sandbox.callables()["demo.search_faq"]

        async def go():
            for _ in range(n):
                try:
                    await fn({"query": "shipping"}, ctx)
                except ToolError:
                    pass
        asyncio.run(go())
        return [c.fault for c in sandbox.calls]

    faults = run_many(1)
    counts = Counter(faults)
    for kind in FAULTS:
        assert abs(counts[kind] / len(faults) - rates[kind]) < 0.02, (kind, counts)
    assert abs(counts[""] / len(faults) - 0.6) < 0.03
    assert run_many(1, 300) == faults[:300] and run_many(2, 300) != faults[:300]


def test_per_tool_rates_and_bad_rates():
    sandbox = SandboxTools(ROOM, fault_rates={"get_order_status:permission": 1.0})
    assert sandbox.draw_fault("get_order_status") == "permission" and sandbox.draw_fault("search_faq") == ""
    with pytest.raises(ValueError):
        SandboxTools(ROOM, fault_rates={"timeout": 0.7, "empty": 0.5})
    with pytest.raises(ValueError):
        SandboxTools(ROOM, fault_rates={"explode": 0.1})
    with pytest.raises(ValueError):
        SandboxTools(ROOM, forced_faults={"get_weather": "timeout"})
