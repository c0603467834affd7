"""The training chat template renders what the local backend serves; only assistant tokens carry labels;
nothing is truncated silently."""

import pytest

from serving.backends.hermes import render_chatml, signatures
from training.base_models import TINY, load_tokenizer
from training.chat_template import CHAT_TEMPLATE
from training.datasets import OverlongError, tokenize_conversation, tokenize_rows
from training.trajectories import TrajectoryConfig, generate_trajectories


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(TINY)


@pytest.fixture(scope="module")
def rows(mini_spec, mini_cases):
    kept, _ = generate_trajectories(mini_cases, [mini_spec], TrajectoryConfig(
        teacher_config={"mistake_rate": 1.0}, keep_full_retry_share=1.0, augmented_variants=1))
    return [t.to_row() for t in kept]


def trained_spans(tokenizer, ids, mask):
    spans, current = [], []
    for token, bit in zip(ids, mask, strict=True):
        if bit:
            current.append(token)
        elif current:
            spans.append(tokenizer.decode(current))
            current = []
    if current:
        spans.append(tokenizer.decode(current))
    return spans


def test_template_renders_exactly_what_the_local_backend_serves(tokenizer, rows):
    for row in rows:
        text = tokenizer.apply_chat_template(row["messages"], tools=signatures(row["tools"]), tokenize=False,
                                             chat_template=CHAT_TEMPLATE)
        assert text == render_chatml(row["messages"], row["tools"]).removesuffix("<|im_start|>assistant\n")
    prompt = tokenizer.apply_chat_template(rows[0]["messages"][:2], tools=signatures(rows[0]["tools"]), tokenize=False,
                                           add_generation_prompt=True, chat_template=CHAT_TEMPLATE)
    assert prompt == render_chatml(rows[0]["messages"][:2], rows[0]["tools"])


def test_only_assistant_tokens_carry_labels(tokenizer, rows):
    for row in rows:
        ids, mask = tokenize_conversation(tokenizer, row["messages"], row["tools"])
        spans = trained_spans(tokenizer, ids, mask)
        trained_turns = [m for m in row["messages"] if m["role"] == "assistant" and m.get("weight", 1) != 0]
        assert len(spans) == len(trained_turns)
        for span in spans:  # each trained span is one assistant turn, ending with the end-of-turn token
            assert span.endswith("<|im_end|>") and "<|im_start|>" not in span
        text = "".join(spans)
        for message in row["messages"]:
            if message["role"] in ("system", "user", "tool") and message.get("content"):
                assert message["content"] not in text  # prompt, viewer, tool results and feedback are context
        # the full retry's rejected reply is context; the recovery after the feedback is trained
        assert any(m.get("weight") == 0 for m in row["messages"])  # counted out of trained_turns above
        assert any("load_skill" in span for span in spans)


def test_overlong_rows_are_an_error_or_counted_never_cut(tokenizer, rows):
    longest = max(len(tokenize_conversation(tokenizer, r["messages"], r["tools"])[0]) for r in rows)
    with pytest.raises(OverlongError, match=f"longest: row \\d+, {longest} tokens"):
        tokenize_rows(rows, tokenizer, max_length=longest - 1)
    kept, report = tokenize_rows(rows, tokenizer, max_length=longest - 1, overlong="drop")
    assert report.dropped_overlong >= 1 and report.kept == len(kept) == len(rows) - report.dropped_overlong
    assert all(len(k["input_ids"]) <= longest - 1 for k in kept)
    kept, report = tokenize_rows(rows, tokenizer, max_length=longest)
    assert report.kept == len(rows) and report.dropped_overlong == 0 and report.longest == longest
    with pytest.raises(ValueError, match="no assistant tokens"):
        tokenize_rows([{"messages": [{"role": "user", "content": "hi"}], "tools": []}], tokenizer, max_length=64)
