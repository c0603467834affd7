"""The live-room simulator (pure core: no Django).

- `world.generate_room(seed)`: a seeded room in the shape of `harness/demo/room.json`.
- `viewers.generate_cases(seed, n)`: viewer messages with ground truth (`cases.Case`) in the seed
  report's workload mix (`WORKLOAD_MIX`).
- `sandbox.SandboxTools(room)`: the demo tools served from a room, with injected timeouts, malformed
  output, permission denials and empty results; `.registry()` plugs into `harness.runtime.run_turn`.
"""

from harness.simulator.cases import CATEGORIES, FAULTS, Case, Expected, ExpectedCall
from harness.simulator.sandbox import SANDBOX_TARGETS, SandboxCall, SandboxTools
from harness.simulator.viewers import (
    DEMO_REPLY_SKILLS,
    DEMO_ROOM_PATH,
    DEMO_TOOL_NAMES,
    WORKLOAD_MIX,
    category_quotas,
    fact_in_room,
    faq_topic,
    generate_cases,
    load_demo_room,
    normalise,
)
from harness.simulator.world import fmt_number, generate_room, price_now

__all__ = [
    "CATEGORIES", "FAULTS", "Case", "Expected", "ExpectedCall", "SANDBOX_TARGETS", "SandboxCall", "SandboxTools",
    "DEMO_REPLY_SKILLS", "DEMO_ROOM_PATH", "DEMO_TOOL_NAMES", "WORKLOAD_MIX", "category_quotas", "fact_in_room",
    "faq_topic", "generate_cases", "load_demo_room", "normalise", "fmt_number", "generate_room", "price_now",
]
