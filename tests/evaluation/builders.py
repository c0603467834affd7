"""Hand-built cases and `harnessops.trace/v1` traces for the evaluation tests."""

from __future__ import annotations

import json
from typing import Any

from harness.simulator.cases import Case

ROOM = {
    "room_id": "test-room",
    "title": "Maple & Co. Live",
    "currency": "$",
    "on_screen": "L001",
    "products": [
        {"link_id": "L001", "name": "Merino Crew-Neck Sweater", "category": "apparel/knitwear", "price": 89.0,
         "promo_price": 71.2, "sizes": ["S", "M", "L"], "stock": {"S": 4, "M": 22, "L": 0}},
        {"link_id": "L013", "name": "Hydrating Serum", "category": "beauty/skincare", "price": 42.0,
         "promo_price": 35.7},
    ],
    "faq": [{"q": "How long does shipping take?", "a": "Orders ship within 1-2 business days."}],
    "promotions": [{"id": "PR01", "link_ids": ["L001"], "discount_pct": 20}],
    "orders": [],
}


def make_case(*, category: str = "product_qa", message: str = "how much is the sweater now?",
              silent: bool = False, facts=(), forbidden=(), skills=("product-qa",), tools=(),
              faults: dict[str, str] | None = None, meta: dict[str, Any] | None = None,
              dialogue=(), suite: str = "live_stream_qa") -> Case:
    """A case through `Case.from_dict`, i.e. in the simulator's JSONL form."""
    return Case.from_dict({
        "case_id": f"{category}-1",
        "category": category,
        "room": ROOM,
        "viewer_id": "v_anna88",
        "message": message,
        "expected": {"silent": silent, "facts": list(facts), "forbidden": list(forbidden), "skills": list(skills),
                     "tools": [{"name": n, "arguments": a} for n, a in tools]},
        "dialogue": [{"role": r, "text": t} for r, t in dialogue],
        "faults": faults or {},
        "suite": suite,
        "meta": meta or {},
    })


def tool_step(name: str, arguments: Any = None, *, result: Any = None, error: str = "",
              denied_by: str = "") -> dict[str, Any]:
    step = {"kind": "tool", "at_ms": 1.0, "call_id": f"call_{name}", "name": name,
            "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments or {}),
            "result": result, "error": error, "attempts": 1, "latency_ms": 0.3}
    if denied_by:
        step["denied_by"] = denied_by
    return step


def make_trace(reply: str = "", *, silent: bool = False, outcome: str | None = None, steps=(), skills=(),
               message: str = "how much is the sweater now?") -> dict[str, Any]:
    steps = list(steps)
    for skill in skills:
        steps.insert(0, tool_step("load_skill", {"name": skill}, result={"skill": skill, "kind": "reply"}))
    return {
        "schema": "harnessops.trace/v1", "trace_id": "0" * 32, "harness_hash": "h", "backend": "scripted",
        "arm": "", "started_at": 0.0,
        "input": {"message": message, "viewer_id": "v_anna88", "room_id": "test-room"},
        "steps": steps,
        "outcome": outcome or ("silent" if silent else "replied"), "reason": "",
        "reply": "" if silent else reply, "silent": silent,
        "duration_ms": 10.0, "model_calls": 2, "model_latency_ms": 9.0, "ttft_ms": 1.0,
        "tokens_in": 100, "tokens_out": 10,
        "skills_loaded": list(skills), "hooks_fired": [],
        "tools_called": [s["name"] for s in steps if s["kind"] == "tool"],
    }
