"""IFEval (Zhou et al. 2023) with the official instruction checkers from the `lm-eval` package.

    from evaluation.metrics.ifeval import evaluate_ifeval, mini_records
    result = evaluate_ifeval(mini_records(), {"1001": "response text", ...})
    result.prompt_level_strict, result.instruction_level_loose

`score_response(record, response)` scores one record (a per-case result row);
`aggregate_scores(rows)` turns stored rows into the run-level metrics.
"""

from evaluation.metrics.ifeval.checkers import INSTRUCTION_DICT
from evaluation.metrics.ifeval.evaluate import (
    IfevalRecordResult,
    IfevalResult,
    aggregate_scores,
    check_record,
    evaluate_ifeval,
    loose_variants,
    mini_records,
    read_records,
    score_response,
)

__all__ = [
    "INSTRUCTION_DICT",
    "IfevalRecordResult",
    "IfevalResult",
    "aggregate_scores",
    "check_record",
    "evaluate_ifeval",
    "loose_variants",
    "mini_records",
    "read_records",
    "score_response",
]
