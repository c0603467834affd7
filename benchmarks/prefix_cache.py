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

`--openai http://gpu:8000/v1 --model NAME` sends the same turns to an OpenAI-compatible server instead (the
`openai` backend, as deployed): each call's cached prompt tokens are read from its usage
(`prompt_tokens_details.cached_tokens`, which vLLM reports when started with `--enable-prompt-tokens-details`,
and `python -m serving.openai_compat --backend local` for llama.cpp), and vLLM's own prefix-cache counters
(`vllm:prefix_cache_queries` / `vllm:prefix_cache_hits`, in tokens) are read from its `/metrics` before and
after: their difference is the run's hit rate as the server counts it (other traffic on the server counts too).
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
    """A backend (local, or an OpenAI-compatible server), recording each call's prompt tokens and those taken from a cache."""

    def __init__(self, inner, max_tokens: int):
        self.inner, self.max_tokens, self.name = inner, max_tokens, inner.name
        self.calls: list[tuple[int, int]] = []
        self.reported = False  # whether any call said how many of its prompt tokens came from a cache

    async def complete(self, messages, tools, *, max_tokens=512, temperature=0.0, tool_choice="auto"):
        response = await self.inner.complete(messages, tools, max_tokens=min(max_tokens, self.max_tokens),
                                             temperature=temperature, tool_choice=tool_choice)
        raw = response.raw or {}
        details = (raw.get("usage") or {}).get("prompt_tokens_details") or {}
        cached = raw.get("cached_tokens", details.get("cached_tokens"))
        self.reported = self.reported or isinstance(cached, int)
        self.calls.append((response.tokens_in, cached if isinstance(cached, int) else 0))
        return response


def prefix_cache_counters(base_url: str) -> dict[str, float] | None:
    """vLLM's prefix-cache counters (queries, hits: tokens), summed over their label sets, from the `/metrics`
    beside `base_url`'s API prefix; None when the server has none."""
    import httpx

    root = base_url.rstrip("/").removesuffix("/v1")
    try:
        text = httpx.get(f"{root}/metrics", timeout=10).raise_for_status().text
    except httpx.HTTPError:
        return None
    totals: dict[str, float] = {}
    for line in text.splitlines():
        for name in ("queries", "hits"):
            metric = f"vllm:prefix_cache_{name}"
            if line.startswith((f"{metric}_total", f"{metric}{{", f"{metric} ")):
                totals[name] = totals.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    return totals if "queries" in totals and "hits" in totals else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=12)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--openai", metavar="BASE_URL", help="an OpenAI-compatible server (e.g. vLLM) instead")
    parser.add_argument("--model", default="", help="with --openai: the served model's name")
    args = parser.parse_args()
    if args.openai and not args.model:
        parser.error("--openai needs --model")

    from harness.runtime import RoomContext, TurnInput, run_turn
    from harness.spec import parse_files, read_dir
    from serving.backends.local import LocalBackend
    from serving.backends.openai import OpenAIBackend

    spec = parse_files(read_dir(ROOT / "harness/demo/avatar"))
    room = RoomContext.from_dict(json.loads((ROOT / "harness/demo/room.json").read_text()))
    if args.openai:
        inner, label = OpenAIBackend(args.openai, args.model, timeout_s=600), f"{args.model} at {args.openai}"
    else:
        inner, label = LocalBackend(n_threads=args.threads), f"SmolLM2-135M Q4_1 on llama.cpp ({args.threads} threads)"
    backend = CountingBackend(inner, args.max_tokens)
    counters_before = prefix_cache_counters(args.openai) if args.openai else None

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
    print(f"demo harness, {label}, replies ≤ {args.max_tokens} tokens")
    if not backend.reported:
        print("the server did not say how many prompt tokens it took from a cache (for vLLM: start it with "
              "--enable-prompt-tokens-details); the shares below count none")
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
    if args.openai:
        after = prefix_cache_counters(args.openai)
        if counters_before is None or after is None:
            print("the server's /metrics has no vLLM prefix-cache counters")
        else:
            queries, hits = after["queries"] - counters_before["queries"], after["hits"] - counters_before["hits"]
            share = f"{hits / queries:.1%}" if queries else "no queries"
            print(f"vLLM's prefix cache over the run (/metrics): {hits:.0f} of {queries:.0f} prompt tokens = {share}")


if __name__ == "__main__":
    main()
