"""lm-eval's IFEval instruction checkers, imported with their Punkt data already in place.

Import `INSTRUCTION_DICT` (and `INSTRUCTION_CONFLICTS`, which instructions the reference data never puts in
one prompt) from here, never from lm-eval directly: this module writes the punkt_tab
tables first (see `punkt_data`), so lm-eval's import-time `nltk.download` is never reached.
"""

from evaluation.metrics.ifeval.punkt_data import ensure_punkt_tab

ensure_punkt_tab()

from lm_eval.tasks.ifeval import instructions_util  # noqa: E402
from lm_eval.tasks.ifeval.instructions_registry import INSTRUCTION_CONFLICTS, INSTRUCTION_DICT  # noqa: E402

__all__ = ["INSTRUCTION_CONFLICTS", "INSTRUCTION_DICT", "instructions_util"]
