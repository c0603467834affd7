"""The chain-of-thought length penalty counts reasoning tokens as the model's chat template marks them, in the ids
each model call generated, and is off (None, said in the record) for a model whose template marks none."""

from pathlib import Path

import pytest
from transformers import AutoTokenizer
from trl.trainer.utils import get_callable_name

from training.base_models import TINY, load_tokenizer
from training.rewards import (
    REASONING_OFF,
    SEGMENT_CODES,
    ReasoningTokens,
    model_calls,
    reasoning_markers,
    reply_reasoning_length,
    stage_rewards,
    tool_reasoning_length,
)

# What a reasoning model's template writes around an assistant turn's reasoning (Qwen3's, abridged).
QWEN3_LIKE = ("{%- if message.reasoning_content %}{{- '<|im_start|>assistant\\n<think>\\n' + message.reasoning_content"
              " + '\\n</think>\\n\\n' }}{%- endif %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
              "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}"
              "{%- endif %}{%- endif %}")
TOOL, REPLY = SEGMENT_CODES["tool"], SEGMENT_CODES["reply"]


@pytest.fixture(scope="module")
def tokenizer():
    tokenizer = load_tokenizer(TINY)
    tokenizer.add_tokens(["<think>", "</think>"], special_tokens=True)  # as reasoning models' vocabularies have
    return tokenizer


def encode(tokenizer, text):
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def test_smollm2_templates_mark_no_reasoning_so_the_penalty_is_off(tokenizer):
    training_template = load_tokenizer(TINY).chat_template
    smollm2_own = AutoTokenizer.from_pretrained(Path.home() / ".cache" / "harnessops" / "smollm2-tokenizer")
    assert "<|im_start|>" in smollm2_own.chat_template  # the GGUF's own template, read back
    for template in (training_template, smollm2_own.chat_template):
        assert reasoning_markers(template) is None
        off = ReasoningTokens.from_template(template, lambda text: encode(tokenizer, text))
        assert not off.enabled and off.describe() == REASONING_OFF == "off: the model emits no reasoning"
    ids = encode(tokenizer, "<think>" + " plan" * 150 + "</think>")
    columns = {"completion_ids": [ids], "segment_ids": [[REPLY] * len(ids)],
               "segments": [[{"kind": "reply", "reasoning_tokens": 150}]]}
    assert reply_reasoning_length([[]], [[]], reasoning=off, **columns) == [None]  # off: not applicable


def test_reasoning_is_counted_in_the_generated_ids_between_the_templates_markers(tokenizer):
    assert reasoning_markers(QWEN3_LIKE) == ("<think>", "</think>")
    reasoning = ReasoningTokens.from_template(QWEN3_LIKE, lambda text: encode(tokenizer, text))
    assert reasoning.enabled and len(reasoning.open_ids) == len(reasoning.close_ids) == 1
    assert reasoning.describe() == "on: the tokens between <think> and </think>"
    think, close = reasoning.open_ids[0], reasoning.close_ids[0]
    word = encode(tokenizer, " plan")[0]
    tool_call = [think, *[word] * 150, close, *encode(tokenizer, '<tool_call>{"name": "x"}</tool_call>')]
    runtime = encode(tokenizer, "<|im_end|>\n<|im_start|>user\n<tool_response>{}</tool_response><|im_end|>\n")
    reply = [*[word] * 120, close, *encode(tokenizer, "It costs 88.")]  # opened by the generation prompt
    ids = tool_call + runtime + reply
    codes = [TOOL] * len(tool_call) + [0] * len(runtime) + [REPLY] * len(reply)
    assert [(c["kind"], c["reasoning_tokens"]) for c in model_calls(ids, codes, reasoning)] == [("tool", 150),
                                                                                              ("reply", 120)]
    # the rollout's own <think>-text count in `segments` is not what is scored
    columns = {"completion_ids": [ids], "segment_ids": [codes],
               "segments": [[{"kind": "tool", "reasoning_tokens": 0}, {"kind": "reply", "reasoning_tokens": 0}]]}
    assert tool_reasoning_length([[]], [[]], reasoning=reasoning, **columns) == [pytest.approx(-0.05)]
    assert reply_reasoning_length([[]], [[]], reasoning=reasoning, **columns) == [pytest.approx(-0.02)]
    assert reasoning.count([think, word, word]) == 2  # an open block counts to the end of the call
    assert reasoning.count([word, word]) == 0


def test_stage_rewards_bind_the_count_and_keep_the_names_trl_logs():
    off = ReasoningTokens()
    bound = stage_rewards(["accuracy", "tool_reasoning_length", "reply_reasoning_length"], reasoning=off)
    assert [get_callable_name(f) for f in bound] == ["accuracy", "tool_reasoning_length", "reply_reasoning_length"]
    assert bound[1].keywords == {"reasoning": off}
