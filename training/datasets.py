"""Conversations (TRL's conversational format with `tools`) → token ids with assistant-only labels.

Rows are `{"messages": [...], "tools": [...]}` as `Trajectory.to_row()` writes them (the JSONL
artifact of a job is exactly this, loadable by TRL). They are tokenized here, with the same
`apply_chat_template(..., return_assistant_tokens_mask=True)` call TRL's SFTTrainer makes, for two
reasons: the `{% generation %}` template (`chat_template.py`) is applied explicitly, and no row is
ever cut silently. TRL truncates to `max_length` and, when packing, can leave a long trajectory with
no labels at all; here a row longer than `max_length` raises `OverlongError` (naming how many and
the longest) or, with `overlong="drop"`, is left out and counted in `LengthReport`. A row without a
single assistant token is an error too. SFTTrainer then receives `input_ids` + `assistant_masks`
and builds `labels` from the mask (-100 elsewhere).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from transformers import PreTrainedTokenizerBase

from serving.backends.hermes import signatures
from training.chat_template import CHAT_TEMPLATE


class OverlongError(ValueError):
    """Rows longer than `max_length` (with overlong="error")."""


@dataclass
class LengthReport:
    rows: int = 0
    kept: int = 0
    dropped_overlong: int = 0
    longest: int = 0
    max_length: int = 0
    tokens: int = 0
    assistant_tokens: int = 0

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


def write_jsonl(path: Path, rows: Iterable[Mapping[str, Any]]) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    count = 0
    with temporary.open("w", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n")
            count += 1
    temporary.replace(path)
    return count


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def tokenize_conversation(tokenizer: PreTrainedTokenizerBase, messages: Sequence[Mapping[str, Any]],
                          tools: Sequence[Mapping[str, Any]] | None) -> tuple[list[int], list[int]]:
    """(input_ids, assistant_masks) of one conversation under the training template."""
    out = tokenizer.apply_chat_template(list(messages), tools=signatures(tools) if tools else None, tokenize=True,
                                        return_dict=True, return_assistant_tokens_mask=True,
                                        chat_template=CHAT_TEMPLATE)
    return list(out["input_ids"]), list(out["assistant_masks"])


def tokenize_rows(rows: Sequence[Mapping[str, Any]], tokenizer: PreTrainedTokenizerBase, *, max_length: int,
                  overlong: str = "error") -> tuple[list[dict[str, list[int]]], LengthReport]:
    """Tokenized rows and the length report (see the module docstring for the rules)."""
    report = LengthReport(rows=len(rows), max_length=max_length)
    tokenized, too_long = [], []
    for index, row in enumerate(rows):
        input_ids, mask = tokenize_conversation(tokenizer, row["messages"], row.get("tools"))
        report.longest = max(report.longest, len(input_ids))
        if len(input_ids) > max_length:
            too_long.append((index, len(input_ids)))
            continue
        if not any(mask):
            raise ValueError(f"row {index} has no assistant tokens: nothing to learn from it")
        tokenized.append({"input_ids": input_ids, "assistant_masks": mask})
        report.tokens += len(input_ids)
        report.assistant_tokens += sum(mask)
    if too_long and overlong == "error":
        index, length = max(too_long, key=lambda item: item[1])
        raise OverlongError(f"{len(too_long)} of {len(rows)} trajectories exceed max_length={max_length} tokens "
                            f"(longest: row {index}, {length} tokens); raise max_length or set overlong='drop'")
    report.dropped_overlong = len(too_long)
    report.kept = len(tokenized)
    if not tokenized:
        raise ValueError(f"no trajectory fits max_length={max_length} (longest {report.longest} tokens)")
    return tokenized, report
