"""Serving a trained checkpoint on CPU with transformers (torch), in process.

Registered checkpoints are Hugging Face model directories written by the training pipeline (full
weights, or a LoRA adapter whose `adapter_config.json` names the base). Why transformers rather than
converting to GGUF for llama.cpp like the `local` backend: a checkpoint is servable the moment its
stage finishes, with no conversion step (llama.cpp's converter is a script in its source tree, not in
the llama-cpp-python wheel), and the weights served are exactly the weights trained and evaluated, in
fp32, not a re-quantised copy. The cost is speed: see `benchmarks/checkpoint_decode.py` for decode
tokens/s against the `local` backend (figures in docs/training.md).

Prompts are rendered as Hermes-style ChatML (`serving.backends.hermes`), as the local backend does, so a
fine-tuned SmolLM2 sees the format it was trained on. Pure Python: no Django here.
"""

import asyncio
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.model_protocol import BackendError, ModelResponse
from serving.backends.hermes import IM_END, parse_tool_calls, render_chatml
from serving.backends.registry import register_backend


@dataclass
class LoadedCheckpoint:
    model: Any  # transformers.PreTrainedModel, in eval mode
    tokenizer: Any
    path: Path
    load_s: float
    lock: threading.Lock  # one generation at a time per model: CPU threads are the bottleneck anyway


_LOADED: dict[str, LoadedCheckpoint] = {}
_LOADED_LOCK = threading.Lock()


def load_checkpoint(path: Path | str, *, n_threads: int | None = None) -> LoadedCheckpoint:
    """Load a model directory (or adapter directory) once per process; later calls return the same."""
    path = Path(path)
    with _LOADED_LOCK:
        if str(path) not in _LOADED:
            if not path.is_dir():
                raise BackendError(f"checkpoint directory not found: {path}")
            try:
                import torch
                from transformers import AutoModelForCausalLM, AutoTokenizer
            except ImportError as error:
                raise BackendError("serving checkpoints needs torch and transformers installed") from error
            started = time.perf_counter()
            if n_threads:
                torch.set_num_threads(n_threads)
            try:
                if (path / "adapter_config.json").is_file():
                    from peft import AutoPeftModelForCausalLM

                    model = AutoPeftModelForCausalLM.from_pretrained(path, dtype=torch.float32).merge_and_unload()
                else:
                    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
                tokenizer = AutoTokenizer.from_pretrained(path)
            except (OSError, ValueError) as error:
                raise BackendError(f"could not load checkpoint {path}: {error}") from error
            model.eval()
            _LOADED[str(path)] = LoadedCheckpoint(model, tokenizer, path, time.perf_counter() - started,
                                                  threading.Lock())
        return _LOADED[str(path)]


@register_backend("transformers")
class TransformersBackend:
    name = "transformers"

    def __init__(self, model_path: Path | str | Callable[[], Path | str], *, label: str = "",
                 n_threads: int | None = None, max_context: int = 8192):
        """`label` names the model in traces (e.g. `checkpoint:12`). The model loads on first use, and
        `model_path` may be a callable that finds the directory then (off the event loop)."""
        self.model_path = model_path
        self.label = label or (Path(model_path).name if not callable(model_path) else "transformers")
        self.name = label or "transformers"  # traces record which checkpoint answered
        self.n_threads = n_threads or int(os.environ.get("HARNESSOPS_TORCH_THREADS", "0")) or None
        self.max_context = max_context

    def load(self) -> LoadedCheckpoint:
        path = self.model_path() if callable(self.model_path) else self.model_path
        return load_checkpoint(path, n_threads=self.n_threads)

    async def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, max_tokens: int = 512,
                       temperature: float = 0.0, tool_choice: str = "auto") -> ModelResponse:
        """Greedy at temperature 0, sampled above it. Cancellation stops generation at the next token."""
        started = time.perf_counter()
        offered = tools if tool_choice != "none" else []
        prompt = render_chatml(messages, offered)
        loaded = await asyncio.to_thread(self.load)
        cancelled = threading.Event()
        try:
            text, finish_reason, ttft_s, tokens_in, tokens_out = await asyncio.to_thread(
                generate, loaded, prompt, max_tokens, temperature, cancelled, started, self.max_context)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        content, calls = parse_tool_calls(text) if offered else (text.strip(), ())
        return ModelResponse(
            content=content, tool_calls=calls, tokens_in=tokens_in, tokens_out=tokens_out,
            latency_ms=(time.perf_counter() - started) * 1000,
            ttft_ms=ttft_s * 1000 if ttft_s is not None else None,
            finish_reason="tool_calls" if calls else finish_reason,
            raw={"model": self.label, "path": str(loaded.path), "text": text},
        )


def generate(loaded: LoadedCheckpoint, prompt: str, max_tokens: int, temperature: float,
             cancelled: threading.Event, started: float, max_context: int = 8192
             ) -> tuple[str, str, float | None, int, int]:
    """Runs in a worker thread: (text, finish reason, seconds to first token, tokens in, tokens out)."""
    import torch
    from transformers import StoppingCriteria, StoppingCriteriaList

    tokenizer, model = loaded.tokenizer, loaded.model
    ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=False).input_ids
    room = min(max_context, getattr(model.config, "max_position_embeddings", max_context)) - ids.shape[1]
    if room <= 0:
        raise BackendError(f"prompt of {ids.shape[1]} tokens does not fit the context of {max_context}")
    end_id = tokenizer.convert_tokens_to_ids(IM_END)
    eos = [t for t in {end_id, tokenizer.eos_token_id} if isinstance(t, int) and t >= 0]
    first_token_at: list[float] = []

    class Watch(StoppingCriteria):
        def __call__(self, input_ids, scores, **kwargs):
            if not first_token_at:
                first_token_at.append(time.perf_counter())
            return cancelled.is_set()

    with loaded.lock:
        if cancelled.is_set():
            return "", "cancelled", None, 0, 0
        try:
            with torch.inference_mode():
                output = model.generate(
                    ids, attention_mask=torch.ones_like(ids), max_new_tokens=min(max_tokens, room),
                    do_sample=temperature > 0, temperature=temperature if temperature > 0 else None,
                    top_p=None, top_k=None, eos_token_id=eos or None,
                    pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (eos or [0])[0],
                    stopping_criteria=StoppingCriteriaList([Watch()]))
        except (RuntimeError, ValueError) as error:
            raise BackendError(f"generation failed: {error}") from error
    new = output[0, ids.shape[1]:].tolist()
    stopped = bool(new) and new[-1] in eos
    text = tokenizer.decode(new[:-1] if stopped else new, skip_special_tokens=False)
    finish = "cancelled" if cancelled.is_set() else ("stop" if stopped else "length")
    ttft = first_token_at[0] - started if first_token_at else None
    return text, finish, ttft, int(ids.shape[1]), len(new)
