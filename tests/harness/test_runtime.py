"""The agent loop with a scripted model: every hook action, bounds, tools, deadline, baseline."""

import asyncio
import dataclasses
import json
import time

import pytest

from harness.model_protocol import ModelResponse, ToolCall
from harness.runtime import (
    RoomContext,
    ToolError,
    ToolRegistry,
    TurnInput,
    react_baseline_spec,
    run_turn,
    stream_turn,
)
from harness.spec import HarnessSpec, Settings, validate
from harness.spec.model import Condition, Hook, PromptBlock, Skill, Tool, ToolBinding
from serving.backends.scripted import ScriptedBackend

ROOM = RoomContext.from_dict({
    "room_id": "r1", "title": "Test room", "currency": "$", "on_screen": "L001",
    "products": [{"link_id": "L001", "name": "Wool Sweater", "price": 89.0, "promo_price": 71.2},
                 {"link_id": "L002", "name": "Silk Scarf", "price": 35.0}],
    "faq": [{"q": "Shipping?", "a": "Ships in 2 days."}],
    "orders": [{"order_id": "O000001", "viewer_id": "v1", "status": "shipped"}],
})
TURN = TurnInput(message="how much is the sweater?", viewer_id="v1", room=ROOM)
PARAMS = {"type": "object", "properties": {"link_id": {"type": "string", "pattern": "^L\\d{3}$"}},
          "required": ["link_id"]}


def tool(name, target=None, timeout_ms=500, retries=0):
    return Tool(name=name, description=f"{name} tool", parameters=PARAMS,
                binding=ToolBinding("builtin", target or f"test.{name}"), timeout_ms=timeout_ms, retries=retries)


def hook(name, event, condition, action, message="", max_retries=0, matcher="*", priority=100, rewrite=None):
    return Hook(name=name, event=event, matcher=matcher, condition=condition, action=action, message=message,
                max_retries=max_retries, priority=priority, rewrite=rewrite)


def make_spec(*, hooks=(), tools=(), skills=(), settings=None) -> HarnessSpec:
    spec = HarnessSpec(
        description="test",
        settings=settings or Settings(max_turns=4, reply_max_chars=60, deadline_s=5, max_hook_retries=2,
                                      fallback_reply="One moment please!"),
        skills=tuple(skills), tools=tuple(tools), hooks=tuple(hooks),
        prompt=(PromptBlock(order=0, name="persona", template="You sell things. {{ skills_catalogue }}",
                            variables=("skills_catalogue",)),
                PromptBlock(order=10, name="room", cache_tier="session", variables=("room_catalogue",),
                            template="{{ room_catalogue }}"),
                PromptBlock(order=20, name="now", cache_tier="turn", variables=("product_on_screen",),
                            template="On screen: {{ product_on_screen }}")),
    )
    assert validate(spec) == [], validate(spec)
    return spec


def call(name, args, id="c1"):
    return ToolCall(id=id, name=name, arguments=args if isinstance(args, str) else json.dumps(args))


def run(spec, backend, tools=None, turn=TURN, **kw):
    return asyncio.run(run_turn(spec, turn, backend, tools or ToolRegistry(), **kw))


def steps(result, kind):
    return [s for s in result.trace["steps"] if s["kind"] == kind]


def info(args, ctx):
    product = ctx.room.product(args["link_id"])
    if product is None:
        raise ToolError("no such product")
    return dict(product)


# --- replies, prompt assembly, reasoning -----------------------------------------------------------

def test_plain_reply_and_prompt_layout():
    backend = ScriptedBackend(["<think>price is in the catalogue</think>It is $89, now $71.2!"])
    result = run(make_spec(), backend)
    assert (result.outcome, result.reply, result.silent) == ("replied", "It is $89, now $71.2!", False)
    messages = backend.calls[0].messages
    assert [m["role"] for m in messages] == ["system", "user"]
    assert "L001 · Wool Sweater" in messages[0]["content"]  # session tier in the cached system prompt
    assert "On screen: L001" in messages[1]["content"] and "how much" in messages[1]["content"]  # turn tier last
    model = steps(result, "model")[0]
    assert "think" in model["content"] and result.trace["schema"] == "harnessops.trace/v1"
    json.dumps(result.trace)  # JSON-serialisable


def test_unclosed_reasoning_is_stripped_too():
    result = run(make_spec(), ScriptedBackend(["Sure!<think>still thinking"]))
    assert result.reply == "Sure!"


# --- input hooks -----------------------------------------------------------------------------------

def test_input_block_is_a_silent_refusal_without_calling_the_model():
    spec = make_spec(hooks=[hook("spam", "input", Condition.regex("message", r"https?://"), "block")])
    backend = ScriptedBackend([])
    result = run(spec, backend, turn=TurnInput(message="win at http://spam.example", viewer_id="v", room=ROOM))
    assert (result.outcome, result.silent, result.reply) == ("silent", True, "")
    assert backend.calls == [] and result.trace["hooks_fired"] == ["spam"]


def test_input_allow_stops_later_hooks_and_fallback_answers():
    spec = make_spec(hooks=[
        hook("vip", "input", Condition.cel('viewer_id == "vip"'), "allow", priority=1),
        hook("long", "input", Condition.length("message", max=5), "fallback", message="Too long, sorry!"),
    ])
    vip = run(spec, ScriptedBackend(["hi"]), turn=TurnInput(message="a long message", viewer_id="vip", room=ROOM))
    assert vip.outcome == "replied"
    other = run(spec, ScriptedBackend([]), turn=TurnInput(message="a long message", viewer_id="x", room=ROOM))
    assert (other.outcome, other.reply) == ("fallback", "Too long, sorry!")


# --- reply hooks -----------------------------------------------------------------------------------

def test_reply_rewrite_truncates_to_the_limit():
    spec = make_spec(hooks=[hook("len", "reply", Condition.length("reply", max="reply_max_chars"), "rewrite")])
    result = run(spec, ScriptedBackend(["word " * 40]))
    assert result.outcome == "replied" and len(result.reply) <= 60 and result.reply.endswith("…")


def test_reply_rewrite_with_pattern():
    spec = make_spec(hooks=[hook("no-md", "reply", Condition.regex("reply", r"\*\*"), "rewrite",
                                 rewrite={"pattern": r"\*\*", "replacement": ""})])
    assert run(spec, ScriptedBackend(["**Great** pick"])).reply == "Great pick"


def test_reply_block_is_silent():
    spec = make_spec(hooks=[hook("secret", "reply", Condition.regex("reply", "system prompt", "i"), "block")])
    result = run(spec, ScriptedBackend(["My System Prompt says..."]))
    assert result.silent and result.outcome == "silent"


def test_retry_with_feedback_then_success():
    spec = make_spec(hooks=[hook("polite", "reply", Condition.regex("reply", "^(?!Hi)"), "retry_with_feedback",
                                 message="Start with Hi.", max_retries=2)])
    backend = ScriptedBackend(["Price is 89.", "Hi! It is 89."])
    result = run(spec, backend)
    assert (result.outcome, result.reply) == ("replied", "Hi! It is 89.")
    second = backend.calls[1].messages
    assert second[-2] == {"role": "assistant", "content": "Price is 89."}
    assert "Start with Hi." in second[-1]["content"]
    assert [s["hook"] for s in steps(result, "retry")] == ["polite"]


def test_retry_is_bounded_by_the_hook_then_falls_back():
    spec = make_spec(hooks=[hook("never", "reply", Condition.always(), "retry_with_feedback", "no", max_retries=1)])
    backend = ScriptedBackend(["a", "b", "c", "d"])
    result = run(spec, backend)
    assert (result.outcome, result.reply) == ("fallback", "One moment please!")
    assert len(backend.calls) == 2  # first try + one retry
    assert "retries exhausted" in result.trace["reason"]


def test_retry_is_bounded_globally_by_max_hook_retries():
    spec = make_spec(
        hooks=[hook("a", "reply", Condition.regex("reply", "^a"), "retry_with_feedback", "x", max_retries=5),
               hook("b", "reply", Condition.regex("reply", "^b"), "retry_with_feedback", "y", max_retries=5)],
        settings=Settings(max_hook_retries=1, fallback_reply="fb", deadline_s=5))
    backend = ScriptedBackend(["a1", "b1", "ok"])
    result = run(spec, backend)
    assert result.outcome == "fallback" and len(backend.calls) == 2


def test_reply_fallback_action_uses_hook_message_or_setting():
    spec = make_spec(hooks=[hook("medical", "reply", Condition.regex("reply", "cure", "i"), "fallback",
                                 message="Please ask a doctor.")])
    assert run(spec, ScriptedBackend(["It cures colds"])).reply == "Please ask a doctor."
    spec = make_spec(hooks=[hook("m", "reply", Condition.always(), "fallback")])
    assert run(spec, ScriptedBackend(["x"])).reply == "One moment please!"


def test_required_reply_skill_and_load_skill():
    skills = [Skill(name="product-qa", description="Answer product questions.", kind="reply",
                    body="Always quote the promo price."),
              Skill(name="triage", description="Split multi-intent messages.", kind="strategy", body="Split.")]
    spec = make_spec(skills=skills, hooks=[hook("need-skill", "reply", Condition.cel("size(loaded_reply_skills) == 0"),
                                                "retry_with_feedback", "Load a reply skill first.", max_retries=1)])
    backend = ScriptedBackend([
        "It is 89.",  # no skill loaded → feedback
        ModelResponse(tool_calls=(call("load_skill", {"name": "triage"}, "s0"), call("load_skill", {"name": "product-qa"}, "s1"))),
        "Now 71.2!",
    ])
    result = run(spec, backend)
    assert (result.outcome, result.reply) == ("replied", "Now 71.2!")
    assert result.trace["skills_loaded"] == ["triage", "product-qa"]
    tool_messages = [m for m in backend.calls[2].messages if m["role"] == "tool"]
    assert tool_messages[1]["content"] == "Always quote the promo price."
    offered = {t["function"]["name"] for t in backend.calls[0].tools}
    assert "load_skill" in offered


def test_factual_risk_counts_only_tool_results_and_room_facts():
    spec = make_spec(tools=[tool("info")], hooks=[
        hook("facts", "reply", Condition.cel("size(ungrounded_numbers) > 0"), "retry_with_feedback",
             "Only numbers from tools.", max_retries=2)])
    # $89 is in the catalogue (the prompt), which does not ground it; after the tool returned it, it is grounded.
    backend = ScriptedBackend(["Only $89 today!", ModelResponse(tool_calls=(call("info", {"link_id": "L001"}),)),
                               "It is $89, on promo at $71.2."])
    result = run(spec, backend, ToolRegistry({"test.info": info}))
    assert result.reply == "It is $89, on promo at $71.2."
    assert [s["rejected_reply"] for s in steps(result, "retry")] == ["Only $89 today!"]
    assert "89" in backend.calls[0].messages[0]["content"]  # it was in the prompt all along

    facts_room = dataclasses.replace(ROOM, facts=("Free shipping on orders over $50.",))
    turn = TurnInput(message="shipping?", viewer_id="v1", room=facts_room)
    grounded = run(spec, ScriptedBackend(["Shipping is free over $50!"]), turn=turn)
    assert grounded.outcome == "replied" and steps(grounded, "retry") == []
    ungrounded = run(spec, ScriptedBackend(["Free over $40!", "Free over $40!", "Free over $40!"]), turn=turn)
    assert ungrounded.outcome == "fallback" and "retries exhausted" in ungrounded.trace["reason"]


# --- tools and tool hooks --------------------------------------------------------------------------

def test_tool_call_result_reaches_the_model():
    spec = make_spec(tools=[tool("info")])
    backend = ScriptedBackend([ModelResponse(tool_calls=(call("info", {"link_id": "L002"}),)), "Scarf is 35."])
    result = run(spec, backend, ToolRegistry({"test.info": info}))
    tool_message = backend.calls[1].messages[-1]
    assert tool_message["role"] == "tool" and json.loads(tool_message["content"])["name"] == "Silk Scarf"
    assert steps(result, "tool")[0]["result"]["price"] == 35.0 and result.trace["tools_called"] == ["info"]


def test_independent_tool_calls_run_in_parallel():
    async def slow(args, ctx):
        await asyncio.sleep(0.3)
        return {"ok": args["link_id"]}

    spec = make_spec(tools=[tool("a"), tool("b")])
    calls = (call("a", {"link_id": "L001"}, "1"), call("b", {"link_id": "L002"}, "2"))
    started = time.perf_counter()
    result = run(spec, ScriptedBackend([ModelResponse(tool_calls=calls), "done"]),
                 ToolRegistry({"test.a": slow, "test.b": slow}))
    assert result.outcome == "replied" and time.perf_counter() - started < 0.55


def test_skills_loaded_beside_one_tool_call_keep_the_call_order():
    # With one call that may wait and skill loads around it, the calls run in turn (no tasks): the tool
    # messages and the trace's steps still follow the model's order, each answering its own call id.
    async def slow(args, ctx):
        await asyncio.sleep(0.05)
        return {"ok": args["link_id"]}

    spec = make_spec(tools=[tool("a")], skills=[Skill(name="triage", description="t", kind="strategy", body="Triage first."),
                                                Skill(name="qa", description="q", kind="reply", body="Answer with 3 facts.")])
    calls = (call("load_skill", {"name": "triage"}, "s0"), call("a", {"link_id": "L001"}, "t1"),
             call("load_skill", {"name": "qa"}, "s2"))
    backend = ScriptedBackend([ModelResponse(tool_calls=calls), "done"])
    result = run(spec, backend, ToolRegistry({"test.a": slow}))
    assert result.outcome == "replied"
    answers = [(m["tool_call_id"], m["content"]) for m in backend.calls[1].messages if m["role"] == "tool"]
    assert answers == [("s0", "Triage first."), ("t1", json.dumps({"ok": "L001"})), ("s2", "Answer with 3 facts.")]
    assert [s["call_id"] for s in steps(result, "tool")] == ["s0", "t1", "s2"]
    assert result.trace["skills_loaded"] == ["triage", "qa"]


def test_tool_timeout_retries_then_reports_error():
    attempts = []

    async def hang(args, ctx):
        attempts.append(1)
        await asyncio.sleep(5)

    spec = make_spec(tools=[tool("slow", timeout_ms=100, retries=1)])
    backend = ScriptedBackend([ModelResponse(tool_calls=(call("slow", {"link_id": "L001"}),)), "Sorry, checking."])
    result = run(spec, backend, ToolRegistry({"test.slow": hang}))
    step = steps(result, "tool")[0]
    assert step["error"] == "timed out after 100 ms" and step["attempts"] == 2 and len(attempts) == 2
    assert "timed out" in backend.calls[1].messages[-1]["content"]
    assert result.outcome == "replied"


@pytest.mark.parametrize("arguments, expected", [
    ("{not json", "arguments are not valid JSON"),
    ('["L001"]', "arguments must be a JSON object"),
    ('{"link_id": "banana"}', "invalid arguments: link_id"),
])
def test_malformed_or_invalid_arguments_become_tool_errors(arguments, expected):
    spec = make_spec(tools=[tool("info")])
    backend = ScriptedBackend([ModelResponse(tool_calls=(call("info", arguments),)), "ok"])
    result = run(spec, backend, ToolRegistry({"test.info": info}))
    assert expected in steps(result, "tool")[0]["error"] and result.outcome == "replied"


def test_unknown_tool_unregistered_binding_and_bad_output():
    spec = make_spec(tools=[tool("info"), tool("ghost"), tool("weird")])
    calls = (call("nope", {}, "1"), call("ghost", {"link_id": "L001"}, "2"), call("weird", {"link_id": "L001"}, "3"))
    result = run(spec, ScriptedBackend([ModelResponse(tool_calls=calls), "ok"]),
                 ToolRegistry({"test.weird": lambda a, c: {"x": object()}}))
    errors = [s["error"] for s in steps(result, "tool")]
    assert "unknown tool 'nope'" in errors[0]
    assert "no builtin binding named 'test.ghost'" in errors[1]
    assert result.outcome == "replied"


def test_unserialisable_output_is_malformed():
    spec = make_spec(tools=[tool("weird")])
    result = run(spec, ScriptedBackend([ModelResponse(tool_calls=(call("weird", {"link_id": "L001"}),)), "ok"]),
                 ToolRegistry({"test.weird": lambda a, c: {1, 2}}))
    assert "malformed tool output" in steps(result, "tool")[0]["error"]


def test_permission_denied_reaches_the_model():
    from harness.runtime.demo_tools import get_order_status  # noqa: F401  (registers demo.get_order_status)

    order_tool = Tool(name="get_order_status", description="order", binding=ToolBinding("builtin", "demo.get_order_status"),
                      parameters={"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]})
    spec = make_spec(tools=[order_tool])
    turn = TurnInput(message="where is my order", viewer_id="someone-else", room=ROOM)
    backend = ScriptedBackend([ModelResponse(tool_calls=(call("get_order_status", {"order_id": "O000001"}),)), "Sorry"])
    result = run(spec, backend, turn=turn)
    assert steps(result, "tool")[0]["error"].startswith("permission denied")


def test_pre_tool_deny_never_runs_the_tool():
    ran = []
    spec = make_spec(tools=[tool("coupon")], hooks=[
        hook("cap", "pre_tool", Condition.cel('args.link_id == "L001"'), "deny", "Not for this item.", matcher="coupon")])
    backend = ScriptedBackend([ModelResponse(tool_calls=(call("coupon", {"link_id": "L001"}),)), "No coupon, sorry."])
    result = run(spec, backend, ToolRegistry({"test.coupon": lambda a, c: ran.append(1) or {"code": "X"}}))
    assert ran == [] and json.loads(backend.calls[1].messages[-1]["content"]) == {"error": "Not for this item."}
    assert steps(result, "tool")[0]["denied_by"] == "cap"


def test_pre_tool_matcher_limits_hooks_to_named_tools():
    spec = make_spec(tools=[tool("info"), tool("coupon")], hooks=[
        hook("cap", "pre_tool", Condition.always(), "deny", "no", matcher="coupon")])
    backend = ScriptedBackend([ModelResponse(tool_calls=(call("info", {"link_id": "L001"}),)), "fine"])
    result = run(spec, backend, ToolRegistry({"test.info": info}))
    assert "error" not in steps(result, "tool")[0] or not steps(result, "tool")[0]["error"]


def test_post_tool_feedback_and_fallback():
    spec = make_spec(tools=[tool("info")], hooks=[
        hook("err", "post_tool", Condition.cel('error != ""'), "retry_with_feedback", "Fix the id.", max_retries=1)])
    backend = ScriptedBackend([ModelResponse(tool_calls=(call("info", {"link_id": "L999"}),)), "ok"])
    run(spec, backend, ToolRegistry({"test.info": info}))
    content = json.loads(backend.calls[1].messages[-1]["content"])
    assert content == {"error": "no such product", "feedback": "Fix the id."}

    spec = make_spec(tools=[tool("info")], hooks=[hook("stop", "post_tool", Condition.always(), "fallback", "Host will answer.")])
    result = run(spec, ScriptedBackend([ModelResponse(tool_calls=(call("info", {"link_id": "L001"}),))]),
                 ToolRegistry({"test.info": info}))
    assert (result.outcome, result.reply) == ("fallback", "Host will answer.")


def test_max_turns_forces_an_answer_then_falls_back():
    spec = make_spec(tools=[tool("info")], settings=Settings(max_turns=2, fallback_reply="fb", deadline_s=5))
    looping = ModelResponse(tool_calls=(call("info", {"link_id": "L001"}),))
    backend = ScriptedBackend([looping, looping, looping])
    result = run(spec, backend, ToolRegistry({"test.info": info}))
    assert [c.tool_choice for c in backend.calls] == ["auto", "none"]
    assert result.outcome == "fallback" and "still calling tools" in result.trace["reason"]


def write_tool(name, target, timeout_ms=100, retries=2):
    return Tool(name=name, description="writes", parameters=PARAMS, binding=ToolBinding("builtin", target),
                timeout_ms=timeout_ms, retries=retries, side_effect="write")


def test_a_write_that_timed_out_is_not_retried_without_an_idempotency_key():
    keys = []

    async def slow_coupon(args, ctx):
        keys.append(ctx.idempotency_key)
        await asyncio.sleep(1)

    spec = make_spec(tools=[write_tool("coupon", "test.coupon")])
    backend = ScriptedBackend([ModelResponse(tool_calls=(call("coupon", {"link_id": "L001"}),)), "Sorry."])
    result = run(spec, backend, ToolRegistry({"test.coupon": slow_coupon}))
    step = steps(result, "tool")[0]
    assert len(keys) == 1 and step["attempts"] == 1  # retries: 2 in the spec, but a write may have happened
    assert "not retried" in step["error"] and step["idempotency_key"] == f"{result.trace['trace_id']}:c1"


def test_an_idempotent_write_is_retried_with_the_same_key():
    keys, issued = [], {}

    async def coupon(args, ctx):
        keys.append(ctx.idempotency_key)
        if ctx.idempotency_key not in issued:
            issued[ctx.idempotency_key] = f"C{len(issued)}"
        if len(keys) < 3:  # the write happened, the answer is lost in a timeout
            await asyncio.sleep(1)
        return {"code": issued[ctx.idempotency_key]}

    spec = make_spec(tools=[write_tool("coupon", "test.coupon")])
    backend = ScriptedBackend([ModelResponse(tool_calls=(call("coupon", {"link_id": "L001"}, id="a"),
                                                         call("coupon", {"link_id": "L002"}, id="b"))), "Done."])
    result = run(spec, backend, ToolRegistry({"test.coupon": coupon}, idempotent=["test.coupon"]))
    by_call = {s["call_id"]: s for s in steps(result, "tool")}
    assert len(set(keys)) == 2 and len(issued) == 2  # one coupon per call, however many attempts
    assert by_call["a"]["idempotency_key"] != by_call["b"]["idempotency_key"]
    assert sum(s["attempts"] for s in by_call.values()) == len(keys) >= 3


def test_read_tools_keep_their_retries_and_builtin_idempotency_is_declared():
    from harness.runtime.tools import ToolRegistry as Registry

    registry = Registry()
    assert registry.max_attempts(tool("info", "demo.get_product_info_by_link_id", retries=2)) == 3
    assert registry.max_attempts(write_tool("coupon", "demo.issue_coupon")) == 3  # registered idempotent
    assert registry.max_attempts(write_tool("queue", "demo.adjust_presentation_order")) == 1
    assert Registry({"demo.issue_coupon": info}).max_attempts(write_tool("coupon", "demo.issue_coupon")) == 1


# --- deadline, backend failure, never raising -------------------------------------------------------

def test_deadline_returns_fallback_on_time():
    spec = make_spec(settings=Settings(deadline_s=1, fallback_reply="Give me a second!"))
    started = time.perf_counter()
    result = run(spec, ScriptedBackend(["late"], delay_s=3))
    assert time.perf_counter() - started < 1.5
    assert (result.outcome, result.reply) == ("deadline", "Give me a second!")


def test_backend_error_falls_back_without_raising():
    result = run(make_spec(), ScriptedBackend([]))  # exhausted script raises BackendError
    assert result.outcome == "error" and result.reply == "One moment please!"
    assert "model backend" in result.trace["reason"]


def test_a_bug_in_a_binding_does_not_escape():
    def boom(args, ctx):
        raise RuntimeError("kaput")

    spec = make_spec(tools=[tool("info")])
    result = run(spec, ScriptedBackend([ModelResponse(tool_calls=(call("info", {"link_id": "L001"}),)), "ok"]),
                 ToolRegistry({"test.info": boom}))
    assert steps(result, "tool")[0]["error"] == "RuntimeError: kaput" and result.outcome == "replied"


def test_cel_error_in_a_reply_hook_is_recorded_not_raised():
    spec = make_spec(hooks=[hook("typo", "reply", Condition.cel("reply > 3"), "block")])
    result = run(spec, ScriptedBackend(["hello"]))
    assert result.outcome == "replied"
    assert steps(result, "hook")[0]["error"] and result.trace["hook_errors"][0]["hook"] == "typo"
    assert result.trace["hook_errors"][0]["failed_closed"] is False


def test_an_input_check_that_cannot_evaluate_fails_closed():
    # `message > 3` compares a string with an int: a CEL error on every message.
    spec = make_spec(hooks=[hook("refuse", "input", Condition.cel("message > 3"), "block")])
    backend = ScriptedBackend(["should never be asked"])
    result = run(spec, backend)
    assert (result.outcome, result.silent) == ("silent", True) and backend.calls == []
    assert result.trace["reason"] == "input hook refuse could not be evaluated (failed closed)"
    step = steps(result, "hook")[0]
    assert step["error"] and step["failed_closed"] and step["action"] == "block" and not step["fired"]
    assert result.trace["hook_errors"] == [{"hook": "refuse", "event": "input", "error": step["error"],
                                            "failed_closed": True}]

    fallback = make_spec(hooks=[hook("offtopic", "input", Condition.cel("message > 3"), "fallback", "Host will answer.")])
    result = run(fallback, ScriptedBackend([]))
    assert (result.outcome, result.reply) == ("fallback", "Host will answer.")

    # A broken `allow` (bypass) rule grants nothing: the refusal after it still runs.
    bypass = make_spec(hooks=[hook("vip", "input", Condition.cel("message > 3"), "allow", priority=1),
                              hook("spam", "input", Condition.regex("message", "sweater"), "block")])
    result = run(bypass, ScriptedBackend([]))
    assert result.outcome == "silent" and result.trace["hooks_fired"] == ["spam"]
    assert result.trace["hook_errors"][0] == {"hook": "vip", "event": "input", "error": result.trace["hook_errors"][0]["error"],
                                              "failed_closed": False}


def test_a_pre_tool_cap_that_cannot_evaluate_denies_the_call():
    ran = []
    spec = make_spec(tools=[tool("coupon")], hooks=[
        hook("cap", "pre_tool", Condition.cel("args.discount_pct > 20"), "deny", "Too generous.", matcher="coupon")])
    backend = ScriptedBackend([ModelResponse(tool_calls=(call("coupon", {"link_id": "L001"}),)), "No coupon."])
    result = run(spec, backend, ToolRegistry({"test.coupon": lambda a, c: ran.append(1) or {"code": "X"}}))
    assert ran == []  # args has no discount_pct: the cap cannot evaluate, so the write never runs
    tool_step = steps(result, "tool")[0]
    assert tool_step["denied_by"] == "cap" and tool_step["hook_error"] is True
    assert json.loads(backend.calls[1].messages[-1]["content"]) == {"error": "Too generous."}
    assert result.trace["hook_errors"][0]["failed_closed"] is True


# --- streaming and the baseline --------------------------------------------------------------------

def test_stream_releases_deltas_after_hooks_then_final():
    spec = make_spec(hooks=[hook("len", "reply", Condition.length("reply", max=20), "rewrite")])

    async def collect():
        return [e async for e in stream_turn(spec, TURN, ScriptedBackend(["a very long reply " * 5]), chunk_chars=8)]

    events = asyncio.run(collect())
    deltas = "".join(e["text"] for e in events if e["type"] == "delta")
    assert events[-1]["type"] == "final" and deltas == events[-1]["reply"] and len(deltas) <= 20


def test_react_baseline_uses_same_tools_without_skills_or_hooks(demo_files):
    from harness.spec import parse_files

    demo = parse_files(demo_files)
    baseline = react_baseline_spec(demo)
    assert validate(baseline) == []
    assert baseline.tools == demo.tools and baseline.skills == () and baseline.hooks == ()
    backend = ScriptedBackend(["Sure, it is $89."])
    result = run(baseline, backend)
    assert result.outcome == "replied"
    offered = {t["function"]["name"] for t in backend.calls[0].tools}
    assert offered == {t.name for t in demo.tools}  # no load_skill


def test_demo_harness_end_to_end(demo_files):
    from harness.spec import parse_files

    demo = parse_files(demo_files)
    room = RoomContext.from_dict(json.loads(open("harness/demo/room.json").read()))
    turn = TurnInput(message="How much is L001 now?", viewer_id="v_anna88", room=room)
    backend = ScriptedBackend([
        ModelResponse(tool_calls=(call("load_skill", {"name": "product-qa"}, "a"),
                                  call("get_product_info_by_link_id", {"link_id": "L001"}, "b"))),
        "The Merino Crew-Neck Sweater is $71.2 right now, down from $89.",
    ])
    result = asyncio.run(run_turn(demo, turn, backend))
    assert result.outcome == "replied", result.trace
    assert result.trace["skills_loaded"] == ["product-qa"]
    assert result.trace["tools_called"] == ["load_skill", "get_product_info_by_link_id"]
    spam = asyncio.run(run_turn(demo, TurnInput(message="follow4follow check my channel", viewer_id="x", room=room),
                                ScriptedBackend([])))
    assert spam.silent and spam.outcome == "silent"


# --- compiled once, remembered answers --------------------------------------------------------------

def test_remembered_cel_answers_tell_types_apart_and_errors_are_never_remembered():
    from harness.runtime.hooks import HookEngine

    cap = hook("cap", "pre_tool", Condition.cel("args.pct == vars.cap"), "deny", "Not that one.")
    engine = HookEngine(dataclasses.replace(make_spec(hooks=[cap]), variables={"cap": 1}))
    decide = lambda args: engine.run("pre_tool", {"tool": "coupon", "args": args}, tool="coupon")  # noqa: E731
    for _ in range(2):  # the second round answers from memory, and must answer the same
        assert decide({"pct": 1}).action == "deny"
        assert decide({"pct": 2}).action == "allow"
        # 1.0 == 1 in Python (same hash), but `1.0 == 1` has no CEL overload: pre_tool fails closed
        # instead of reusing the remembered answer for 1.
        outcome = decide({"pct": 1.0})
        assert outcome.failed_closed and "no such overload" in outcome.decisions[0].error
    assert len(engine.by_event["pre_tool"][0].memo) == 2  # 1 and 2; the error was evaluated twice, not stored


def test_remembered_schema_answers_tell_types_apart():
    """Tool arguments and json_schema conditions remember their answers per input; True == 1 in Python (same
    hash) but is no JSON Schema integer, so it must not reuse the answer remembered for 1."""
    from harness.runtime.hooks import SchemaCheck

    check = SchemaCheck({"type": "object", "properties": {"n": {"type": "integer", "maximum": 5}}})
    for _ in range(2):  # the second round answers from memory, and must answer the same
        assert check.first_error({"n": 1}) is None and check.first_error({"n": 1.0}) is None
        assert check.first_error({"n": True}) == ("n", "True is not of type 'integer'")
        assert check.first_error({"n": 6}) == ("n", "6 is greater than the maximum of 5")
        assert check.first_error({"n": [0] * 300}) is not None  # too big to remember: validated each time
    assert len(check.memo) == 4


CEL_CASES = [
    "size(loaded_reply_skills) == 0", "size(ungrounded_numbers) > 0", "args.discount_pct > vars.max_discount_pct",
    'error != null && error != ""', 'viewer_id == "vip"', "message > 3", "args.pct == vars.cap", "missing == 1",
    "args.nope > 1 || true", "false && args.nope > 1", "message.contains('price')", "message.matches('^h')",
    "result.price > 50.0", "result.price > 50", "!(retries >= 1)", "args.discount_pct / 0 > 1",
    "loaded_skills.exists(s, s == 'product-qa')", "tools_called.all(t, t != 'issue_coupon')", "has(args.link_id)",
    "args['link_id'] == 'L001'", "int(args.discount_pct) > 5", "message.startsWith('h') ? true : false",
    'tool == "issue_coupon" && "issue_coupon" in ["issue_coupon"]',
]
CEL_CONTEXTS = [
    {"loaded_reply_skills": [], "ungrounded_numbers": ["3"], "args": {"discount_pct": 30, "link_id": "L001", "pct": 1},
     "vars": {"max_discount_pct": 15, "cap": 1.0}, "error": None, "viewer_id": "vip", "message": "hello price",
     "tool": "issue_coupon", "tools_called": ["a"], "loaded_skills": ["product-qa"], "result": {"price": 71.2},
     "retries": 1},
    {"loaded_reply_skills": ["p"], "ungrounded_numbers": [], "args": {"discount_pct": 10.0, "link_id": "L002"},
     "vars": {"max_discount_pct": 15, "cap": 1}, "error": "boom", "viewer_id": "v", "message": "", "tool": "t",
     "tools_called": [], "loaded_skills": [], "result": None, "retries": 0},
    {"args": {}, "error": "", "vars": {}, "message": "h", "result": {"price": 80}, "retries": 0},
]


def test_transpiled_cel_answers_exactly_as_the_interpreter():
    """Conditions run transpiled to Python; on every case they decide as cel-python's interpreter does, and
    fail where it fails (an error fails closed or is skipped, see hooks.py; its wording may differ)."""
    import celpy

    from harness.runtime.hooks import _cel_program, _Transpiled
    from harness.spec.validate import cel_environment

    interpreter = celpy.Environment(runner_class=celpy.InterpretedRunner)

    def outcome(program, context):
        try:
            return "value", bool(program.evaluate({k: celpy.json_to_cel(v) for k, v in context.items()}))
        except celpy.CELEvalError:
            return "error", None

    for expr in CEL_CASES:
        fast, _ = _cel_program(expr)
        assert isinstance(fast, _Transpiled), expr
        slow = interpreter.program(cel_environment().compile(expr))
        for context in CEL_CONTEXTS:
            assert outcome(fast, context) == outcome(slow, context), (expr, context)


def test_transpiled_cel_is_safe_across_threads():
    """cel-python's transpiled code passes values through module globals: evaluations in many threads at
    once must each see their own (without the engine's lock this run gives wrong answers and errors)."""
    import sys
    import threading

    import celpy

    from harness.runtime.hooks import _cel_program

    program, _ = _cel_program("args.pct == vars.cap")
    wrong, barrier = [], threading.Barrier(8)

    def evaluate(pct):
        barrier.wait()
        for _ in range(2500):
            try:
                answer = program.evaluate({"args": celpy.json_to_cel({"pct": pct}),
                                           "vars": celpy.json_to_cel({"cap": 3})})
            except celpy.CELEvalError as error:
                answer = error
            if isinstance(answer, Exception) or bool(answer) != (pct == 3):
                wrong.append((pct, answer))

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    try:
        threads = [threading.Thread(target=evaluate, args=(pct,)) for pct in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert wrong == []


def test_shared_tool_definitions_are_built_once_and_copies_stay_independent():
    from harness.spec.prompt import openai_tools, shared_openai_tools

    spec = make_spec(tools=[tool("info")])
    assert shared_openai_tools(spec) is shared_openai_tools(spec)
    copy_ = openai_tools(spec)
    copy_[0]["function"]["name"] = "changed"
    assert shared_openai_tools(spec)[0]["function"]["name"] == "info"


def test_inline_demo_builtins_answer_without_a_worker_thread():
    import threading

    from harness.runtime.tools import ToolContext, register_builtin

    seen = []

    @register_builtin("test.inline_probe", inline=True)
    def probe(args, ctx):
        seen.append(threading.current_thread() is threading.main_thread())
        return {"ok": True}

    outcome = asyncio.run(ToolRegistry().execute(tool("probe", target="test.inline_probe"), {"link_id": "L001"},
                                                 ToolContext(room=ROOM, viewer_id="v1")))
    assert outcome.result == {"ok": True} and seen == [True]


def test_a_shared_room_context_is_one_object_per_context_and_room_and_its_catalogue_follows_it(demo_files):
    from harness.runtime.messages import assemble_messages
    from harness.spec import parse_files

    context = {"title": "Demo", "currency": "$", "products": [{"link_id": "L001", "name": "Sweater", "price": 89.0}]}
    room = RoomContext.shared(context, "r1")
    assert room == RoomContext.from_dict({**context, "room_id": "r1"})
    assert room.remembered == {} and RoomContext.from_dict(context).remembered is None  # one turn's room: nothing kept
    assert RoomContext.shared(context, "r1") is room and RoomContext.shared(context, "r2").room_id == "r2"
    changed = {**context, "products": [{"link_id": "L001", "name": "Sweater", "price": 79.0}]}
    assert RoomContext.shared(changed, "r1") is not room  # another context object: another room
    spec = parse_files(demo_files)
    for context_, price in ((context, "$89.0"), (changed, "$79.0"), (context, "$89.0")):
        system = assemble_messages(spec, TurnInput("hi", "v1", RoomContext.shared(context_, "r1")))[0]["content"]
        assert f"L001 · Sweater ·  · {price}" in system
    assert "$89.0" in room.remembered["room_catalogue"]
