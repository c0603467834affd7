"""What harness-constrained decoding costs on the local backend: decode tokens/s with and without the grammar.

The offline SmolLM2-135M-Instruct (llama.cpp) answers viewer messages under the compact demo harness's
real prompt and tools (`assemble_messages`, `openai_tools`), greedily, once unconstrained and once with the
harness's grammar (`serving.backends.tool_grammar.gbnf`), alternating which goes first per prompt so
machine load and prompt evaluation hit both alike. Decode tokens/s = (tokens out - 1) / (wall time after the first token); medians over all replies.
It also times building the grammar text (once per harness version, then cached) and llama.cpp's parse of it
(paid at the start of every constrained generation), and counts replies whose text differs.

    .venv/bin/python benchmarks/constrained_decode.py [--rounds 3] [--max-tokens 96] [--threads 1] [--full-filter]

"constrained" is the local backend's path (`GreedyGrammar`: the grammar asked about the best token only);
`--full-filter` adds llama.cpp's grammar sampler filtering all 49,152 tokens every step (`grammar=`).
"""

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PROMPTS = [
    "Is the wool sweater in stock in size M?",
    "What is the price of the item on screen?",
    "Hi! Love the stream, tell me a long story about what you are showing today.",
    "Does the coat come in navy? I need it before Friday.",
    "Where is my order O000001?",
    "How long does shipping take to Lyon?",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--full-filter", action="store_true",
                        help="also decode with llama.cpp's grammar sampler testing every token (the path GreedyGrammar replaces)")
    parser.add_argument("--threads", type=int, default=1, help="1 keeps its speed on a busy machine (local.py)")
    args = parser.parse_args()

    import llama_cpp

    from harness.model_protocol import ToolConstraint
    from harness.runtime.messages import assemble_messages
    from harness.runtime.turn import RoomContext, TurnInput
    from harness.spec import openai_tools, parse_files, read_dir
    from serving.backends import tool_grammar
    from serving.backends.hermes import IM_END, render_chatml
    from serving.backends.local import LocalBackend

    root = Path(__file__).resolve().parents[1]
    spec = parse_files(read_dir(root / "harness/demo/compact"))
    room = RoomContext.from_dict(__import__("json").loads((root / "harness/demo/room.json").read_text()))
    tools = openai_tools(spec)
    backend = LocalBackend(n_threads=args.threads)
    model = backend.load()

    started = time.perf_counter()
    grammar = tool_grammar.gbnf(tools)
    build_ms = (time.perf_counter() - started) * 1000
    vocab = llama_cpp.llama_model_get_vocab(model.llama.model)
    parse_ms = []
    for _ in range(20):
        started = time.perf_counter()
        sampler = llama_cpp.llama_sampler_init_grammar(vocab, grammar.encode(), b"root")
        parse_ms.append((time.perf_counter() - started) * 1000)
        llama_cpp.llama_sampler_free(sampler)

    constraint = ToolConstraint(key=spec.content_hash)
    labels = ("unconstrained", "constrained", "full-filter")
    rates: dict[str, list[float]] = {label: [] for label in labels}
    outs: dict[str, list[int]] = {label: [] for label in labels}

    def full_filter(messages: list) -> tuple[str, int, float, float]:
        """llama.cpp's grammar sampler in the chain (what passing `grammar=` does): every token tested."""
        tokens = model.llama.tokenize(render_chatml(messages, tools).encode(), add_bos=True, special=True)
        began, first, pieces = time.perf_counter(), None, []
        with model.lock:
            for chunk in model.llama.create_completion(tokens, max_tokens=args.max_tokens, temperature=0.0,
                                                       stop=[IM_END], stream=True,
                                                       grammar=llama_cpp.LlamaGrammar.from_string(grammar, verbose=False)):
                if chunk["choices"][0].get("text"):
                    first = first or time.perf_counter()
                    pieces.append(chunk["choices"][0]["text"])
        text = "".join(pieces)
        count = len(model.llama.tokenize(text.encode(), add_bos=False, special=False)) if text else 0
        return text, count, time.perf_counter() - began, (first or began) - began
    differ = total = calls = 0
    conditions = [("unconstrained", {}), ("constrained", {"constraint": constraint})]
    for _ in range(args.rounds):
        for prompt in PROMPTS:
            messages = assemble_messages(spec, TurnInput(message=prompt, viewer_id="v1", room=room))
            texts = {}
            conditions.reverse()  # each condition goes first (evaluating the new prompt) half of the time
            if args.full_filter:
                text, count, wall_s, ttft_s = full_filter(messages)
                if count > 1 and wall_s > ttft_s:
                    rates["full-filter"].append((count - 1) / (wall_s - ttft_s))
                outs["full-filter"].append(count)
            for label, kwargs in conditions:
                began = time.perf_counter()
                response = asyncio.run(backend.complete(messages, tools, max_tokens=args.max_tokens, **kwargs))
                wall_s = time.perf_counter() - began
                ttft_s = (response.ttft_ms or 0) / 1000
                if response.tokens_out > 1 and wall_s > ttft_s:
                    rates[label].append((response.tokens_out - 1) / (wall_s - ttft_s))
                outs[label].append(response.tokens_out)
                texts[label] = response.raw["text"]
                print(f"  {label:<13} {response.tokens_out:>3} tokens in {wall_s:5.2f} s  {prompt[:40]!r}", flush=True)
                calls += len(response.tool_calls) if label == "constrained" else 0
            total += 1
            differ += texts["unconstrained"] != texts["constrained"]

    print(f"offline model {model.path.name}, llama-cpp-python {llama_cpp.__version__}, {args.threads} thread(s), "
          f"{total} replies per condition, max {args.max_tokens} tokens, compact harness ({len(tools)} tools)")
    print(f"grammar: {len(grammar)} characters, built in {build_ms:.1f} ms once per harness version (cached by "
          f"content hash); llama.cpp parses it in {statistics.median(parse_ms):.2f} ms (median of 20) per generation")
    print(f"{'condition':<14} {'decode tok/s':>12} {'min':>7} {'max':>7} {'tokens out':>11}")
    for label in labels:
        values = rates[label]
        if not values:
            continue
        print(f"{label:<14} {statistics.median(values):>12.1f} {min(values):>7.1f} {max(values):>7.1f} "
              f"{statistics.median(outs[label]):>11.0f}")
    ratio = statistics.median(rates["constrained"]) / statistics.median(rates["unconstrained"])
    print(f"constrained / unconstrained decode speed: {ratio:.2f}; replies whose text differs: {differ} of {total}; "
          f"tool calls in constrained replies: {calls}")


if __name__ == "__main__":
    main()
