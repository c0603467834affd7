"""Decode speed of a served checkpoint: the `transformers` backend (how `checkpoint:<id>` is served)
beside the `local` llama.cpp backend, on the same SmolLM2-135M-Instruct weights and prompts.

The checkpoint is the offline SmolLM2 GGUF written as a Hugging Face directory by the training
pipeline's `materialize_base` (what every trained stage's output looks like: fp32 safetensors plus
the tokenizer and chat template). Each backend answers the same prompts greedily with a fixed token
budget; decode tokens/s = (tokens out - 1) / (wall time after the first token).

    .venv/bin/python benchmarks/checkpoint_decode.py [--prompts 4] [--max-tokens 96] [--threads 2]
"""

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PROMPTS = [
    "Is the red dress in stock in size M?",
    "What is the price of the linen shirt on screen?",
    "Hi! Love the stream, what are you showing today?",
    "Does the coat come in navy? I need it before Friday.",
    "Can you compare the two sneakers you showed earlier?",
    "How long does shipping take to Lyon?",
]


def measure(backend, prompts: list[str], max_tokens: int) -> dict:
    rates, ttfts, outs = [], [], []
    for prompt in prompts:
        started = time.perf_counter()
        response = asyncio.run(backend.complete([{"role": "user", "content": prompt}], [], max_tokens=max_tokens))
        wall_s = time.perf_counter() - started
        ttft_s = (response.ttft_ms or 0) / 1000
        if response.tokens_out > 1 and wall_s > ttft_s:
            rates.append((response.tokens_out - 1) / (wall_s - ttft_s))
        ttfts.append(ttft_s * 1000)
        outs.append(response.tokens_out)
    return {"decode_tokens_per_s": statistics.median(rates) if rates else float("nan"),
            "ttft_ms": statistics.median(ttfts), "tokens_out": statistics.median(outs)}


def smollm2_checkpoint() -> str:
    """SmolLM2-135M-Instruct as a stage output directory (fp32 safetensors, tokenizer, chat template)."""
    from training.base_models import SMOLLM2, materialize_base

    return materialize_base(SMOLLM2, Path(tempfile.mkdtemp(prefix="checkpoint-bench-")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    prompts = PROMPTS[: args.prompts]

    from serving.backends.local import LocalBackend
    from serving.backends.transformers_backend import TransformersBackend

    started = time.perf_counter()
    directory = smollm2_checkpoint()
    print(f"checkpoint directory written in {time.perf_counter() - started:.1f} s: {directory}")

    checkpoint = TransformersBackend(directory, label="checkpoint:bench", n_threads=args.threads)
    started = time.perf_counter()
    checkpoint.load()
    print(f"transformers load {time.perf_counter() - started:.1f} s")
    measure(checkpoint, prompts[:1], 8)  # warm-up
    served = measure(checkpoint, prompts, args.max_tokens)

    local = LocalBackend(n_threads=args.threads)
    started = time.perf_counter()
    local.load()
    print(f"llama.cpp load {time.perf_counter() - started:.1f} s")
    measure(local, prompts[:1], 8)
    gguf = measure(local, prompts, args.max_tokens)

    print(f"{'backend':<34} {'decode tok/s':>12} {'TTFT ms':>9} {'tokens out':>10}")
    for name, row in (("transformers fp32 (checkpoint:<id>)", served), ("llama.cpp Q4_1 (local)", gguf)):
        print(f"{name:<34} {row['decode_tokens_per_s']:>12.1f} {row['ttft_ms']:>9.0f} {row['tokens_out']:>10.0f}")
    print(f"ratio transformers / llama.cpp: {served['decode_tokens_per_s'] / gguf['decode_tokens_per_s']:.2f}")


if __name__ == "__main__":
    main()
