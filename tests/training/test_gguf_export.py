"""A model directory exported to GGUF decodes in llama.cpp as it does in transformers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from serving.backends.hermes import render_chatml
from training.base_models import TINY, gguf_path, load_tokenizer, materialize_base, model_cache
from training.gguf_export import ExportError, _permute, export_gguf, gguf_name

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def test_tensor_names_map_to_llama_cpp():
    assert gguf_name("model.layers.3.self_attn.q_proj.weight") == "blk.3.attn_q.weight"
    assert gguf_name("model.layers.0.mlp.down_proj.weight") == "blk.0.ffn_down.weight"
    assert gguf_name("model.embed_tokens.weight") == "token_embd.weight"
    assert gguf_name("model.norm.weight") == "output_norm.weight"
    with pytest.raises(ExportError, match="no llama.cpp name"):
        gguf_name("model.layers.0.self_attn.rotary_emb.inv_freq")


def test_permutation_interleaves_the_halves_of_each_head():
    heads, head_dim = 2, 4
    rows = np.arange(heads * head_dim, dtype=np.float32)[:, None]
    permuted = _permute(rows, heads)[:, 0]
    # per head: rows [0, 1 | 2, 3] (first half, second half) become [0, 2, 1, 3]
    assert permuted.tolist() == [0, 2, 1, 3, 4, 6, 5, 7]


def _greedy_transformers(model_dir: str, prompt: str, tokens: int) -> list[int]:
    from transformers import AutoModelForCausalLM

    tokenizer = load_tokenizer(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    ids = tokenizer(prompt, add_special_tokens=False, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                             max_new_tokens=tokens, min_new_tokens=tokens, pad_token_id=tokenizer.pad_token_id)
    return out[0, ids.shape[1]:].tolist()


def _greedy_llama_cpp(gguf: str, prompt: str, tokens: int) -> list[int]:
    from llama_cpp import Llama

    llama = Llama(model_path=gguf, n_ctx=512, n_threads=2, verbose=False)
    try:
        ids = llama.tokenize(prompt.encode(), add_bos=False, special=True)
        out = []
        for token in llama.generate(ids, temp=0.0, top_k=1):
            out.append(token)
            if len(out) == tokens:
                break
        return out
    finally:
        llama.close()


@pytest.mark.parametrize("weights", ["f32", "q8_0"])
def test_exported_tiny_model_decodes_like_transformers(tmp_path, weights):
    """A tiny random Llama on SmolLM2's tokenizer: same greedy tokens in llama.cpp (f32 exactly; Q8_0
    within a token or two of the end, quantisation being lossy)."""
    model_dir = materialize_base(TINY, model_cache(), seed=3)
    target = export_gguf(model_dir, tmp_path / f"tiny.{weights}.gguf", template=gguf_path(), weights=weights)
    prompt = render_chatml([{"role": "user", "content": "How much is L001?"}])
    expected = _greedy_transformers(model_dir, prompt, 12)
    got = _greedy_llama_cpp(str(target), prompt, 12)
    agree = next((i for i, (a, b) in enumerate(zip(expected, got, strict=False)) if a != b), len(expected))
    assert agree >= (12 if weights == "f32" else 6), (expected, got)


def test_export_refuses_a_model_on_another_vocabulary(tmp_path):
    import json
    import shutil

    model_dir = tmp_path / "other"
    shutil.copytree(materialize_base(TINY, model_cache(), seed=3), model_dir)
    config = json.loads((model_dir / "config.json").read_text())
    config["vocab_size"] += 1
    (model_dir / "config.json").write_text(json.dumps(config))
    with pytest.raises(ExportError, match="vocabulary"):
        export_gguf(model_dir, tmp_path / "x.gguf", template=gguf_path())
    assert not list(tmp_path.glob("x.gguf*"))
