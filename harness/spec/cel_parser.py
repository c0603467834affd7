"""cel-python's parser, built once per installation instead of once in every process.

cel-python builds its LALR parser from the CEL grammar the first time a process parses an expression:
130-150 ms of CPU here (a third of the time before an eval run's first case, and the first hook condition
of every server process). Lark can save a built parser and load it again in ~10-30 ms, so the first
process saves it to the installation's own directory and the others load it.

The file is a pickle, which is as trusted as its directory: only ever a directory of this installation
(HARNESSOPS_VAR_DIR, beside the secret key), never a shared temporary one; created private to this user, and
a file that another user could have written is not loaded.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

import lark
from celpy.celparser import CELParser

log = logging.getLogger(__name__)

DIRECTORY: Path | None = None  # where parsers are kept; None (pure use, without the Django app): not kept


def cached_parser_path(directory: Path, tree_class: type) -> Path:
    """Where the parser for this grammar, tree class, cel-python, Lark and Python is kept (another of any, another
    file)."""
    grammar = (Path(sys.modules[CELParser.__module__].__file__).parent / "cel.lark").read_bytes()
    versions = (f"{tree_class.__module__}.{tree_class.__qualname__} cel-python {version('cel-python')} "
                f"lark {lark.__version__} {sys.version_info[:2]}")
    return directory / f"cel-parser-{hashlib.sha256(grammar + versions.encode()).hexdigest()[:16]}.pickle"


def load_parser(directory: Path, tree_class: type) -> bool:
    """Give cel-python the parser with `tree_class` saved in `directory`, unless it has a parser already;
    False when none is saved there (or none that may be trusted)."""
    if CELParser.CEL_PARSER is not None:
        return True
    path = cached_parser_path(directory, tree_class)
    try:
        with path.open("rb") as saved:
            if not _private(os.fstat(saved.fileno())):
                log.warning("the saved CEL parser %s may be changed by other users; it is built again", path)
                return False
            CELParser.CEL_PARSER = lark.Lark.load(saved)
    except OSError:  # none saved yet, or a directory this process cannot read: built, as without one
        return False
    except Exception:  # noqa: BLE001 - a damaged file is built again and replaced, never an error
        log.warning("the saved CEL parser %s could not be loaded; it is built again", path, exc_info=True)
        return False
    return True


def _private(status: os.stat_result) -> bool:
    """Written by this user and by no one else: whoever can change the file chooses code this process runs."""
    return status.st_uid == os.getuid() and not status.st_mode & 0o022


def save_parser(directory: Path) -> None:
    """Save the parser cel-python built in this process to `directory` (whole, or not at all)."""
    if CELParser.CEL_PARSER is None:
        return
    path = cached_parser_path(directory, CELParser.CEL_PARSER.options.tree_class)
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        handle, partial = tempfile.mkstemp(dir=directory, prefix=f".{path.name}.")  # this user's only
        try:
            with os.fdopen(handle, "wb") as out:
                CELParser.CEL_PARSER.save(out)
            os.replace(partial, path)  # processes starting meanwhile read the old file or none, never half of one
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(partial)
            raise
    except Exception as error:  # noqa: BLE001 - not saving it only costs each later process its own build
        log.warning("the CEL parser could not be saved to %s (%s: %s); each process builds its own", directory,
                    type(error).__name__, error)
