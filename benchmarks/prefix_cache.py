"""Prefix-cache share across the turns of one room: llama.cpp's KV cache (the local backend) under the demo harness.

    .venv/bin/python benchmarks/prefix_cache.py [--turns 12] [--max-tokens 48] [--threads 2]

A room's viewers ask one after another (a different viewer and message each turn, the recent dialogue
growing), each turn through the real agent loop (`run_turn`) with the offline SmolLM2-135M model. The
harness puts the static and session prompt blocks first (the system message, the same for every viewer
of a room) and the turn blocks last, so each model call can reuse the KV cache of the call before it up to
where they differ. For every call the backend reports how many prompt tokens llama.cpp took from its
cache (the common prefix of the context it holds and the new prompt: what `Llama.generate` skips).
Printed: per turn, its calls' prompt tokens and the share served from the cache, and the cumulative
share after 1, 2, 4, … turns (how it grows with the work). The first call of all has nothing cached.

Replies are capped at --max-tokens (greedy); what the 135M model says does not matter here, only what
each prompt shares with the one before.
"""

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MESSAGES = [
    "How much is L001 now?", "Is the sweater on screen in stock in M?", "Do you ship to Canada?",
    "What sizes does L002 come in?", "Hi! Love the stream", "Is there a discount code today?",
    "What is the return policy?", "Can I get the merino one in blue?", "How warm is it, really?",
    "Does L003 run small?", "When does the sale end?", "Thanks, ordering now!",
]


class CountingBackend:
    """The local backend, recording each call's prompt tokens and the tokens reused from llama.cpp's cache."""

    def __init__(self, inner, max_tokens: int):
        self.inner, self.max_tokens, self.name = inner, max_tokens, inner.name
        self.calls: list[tuple[int, int]] = []

    async def complete(self, messages, tools, *, max_tokens=512, temperature=0.0, tool_choice="auto"):
        response = await self.inner.complete(messages, tools, max_tokens=min(max_tokens, self.max_tokens),
                                             temperature=temperature, tool_choice=tool_choice)
        self.calls.append((response.tokens_in, response.raw.get("cached_tokens", 0)))
        return response


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=12)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    from harness.runtime import RoomContext, TurnInput, run_turn
    from harness.spec import parse_files, read_dir
    from serving.backends.local import LocalBackend

    spec = parse_files(read_dir(ROOT / "harness/demo/avatar"))
    room = RoomContext.from_dict(json.loads((ROOT / "harness/demo/room.json").read_text()))
    backend = CountingBackend(LocalBackend(n_threads=args.threads), args.max_tokens)

    async def room_turns():
        dialogue: list[tuple[str, str]] = []
        rows = []
        for i in range(args.turns):
            message = MESSAGES[i % len(MESSAGES)]
            first = len(backend.calls)
            started = time.perf_counter()
            result = await run_turn(spec, TurnInput(message=message, viewer_id=f"viewer{i}", room=room,
                                                    recent_dialogue=tuple(dialogue[-6:])), backend,
                                    deadline_s=600)
            calls = backend.calls[first:]
            rows.append((i + 1, len(calls), sum(c[0] for c in calls), sum(c[1] for c in calls),
                         time.perf_counter() - started, result.outcome))
            dialogue += [("viewer", message), ("avatar", result.reply or "(silent)")]
        return rows

    rows = asyncio.run(room_turns())
    print(f"demo harness, SmolLM2-135M Q4_1 on llama.cpp ({args.threads} threads), replies ≤ {args.max_tokens} tokens")
    print("| turn | model calls | prompt tokens | from cache | share | wall | outcome |")
    print("|---|---|---|---|---|---|---|")
    for turn, calls, prompt, cached, wall, outcome in rows:
        print(f"| {turn} | {calls} | {prompt} | {cached} | {cached / prompt:.1%} | {wall:.1f} s | {outcome} |")
    print("\ncumulative share of prompt tokens served from the cache:")
    n = 1
    while n <= len(rows):
        prompt = sum(r[2] for r in rows[:n])
        cached = sum(r[3] for r in rows[:n])
        print(f"  after {n:>3} turns: {cached:>6} of {prompt:>6} prompt tokens = {cached / prompt:.1%}")
        n = n * 2 if n * 2 <= len(rows) or n == len(rows) else len(rows)
    later = rows[1:]
    if later:
        prompt, cached = sum(r[2] for r in later), sum(r[3] for r in later)
        print(f"  turns 2..{len(rows)} (the room's prefix already cached): {cached / prompt:.1%}")


if __name__ == "__main__":
    main()
