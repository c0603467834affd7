"""Module-level differences between two specs, read off their canonical files.

Diffing canonical text (not raw uploads) means reformatting never shows up
as a change, and every change reads like a git diff of one file.
"""

from __future__ import annotations

import difflib
import re
from collections import Counter
from dataclasses import dataclass

from harness.spec.canonical import HARNESS_FILE, hook_path, prompt_path, skill_path, to_files, tool_path
from harness.spec.model import HarnessSpec

MODULES = ("settings", "skills", "tools", "hooks", "prompt")
STATUSES = ("added", "removed", "changed")
_NO_FILE = "/dev/null"


@dataclass(frozen=True)
class ModuleChange:
    """One module that differs. `path` is its file in the newer spec (the older one if removed)."""

    module: str
    name: str
    status: str
    path: str
    unified: str


@dataclass(frozen=True)
class SpecDiff:
    changes: tuple[ModuleChange, ...] = ()

    @property
    def is_empty(self) -> bool:
        return not self.changes

    def by_module(self) -> dict[str, tuple[ModuleChange, ...]]:
        """Changes grouped by module, in MODULES order; modules without changes are left out."""
        grouped = {module: tuple(c for c in self.changes if c.module == module) for module in MODULES}
        return {module: changes for module, changes in grouped.items() if changes}

    @property
    def counts(self) -> dict[str, int]:
        """How many modules were added, removed and changed."""
        counted = Counter(change.status for change in self.changes)
        return {status: counted[status] for status in STATUSES}

    def summary(self) -> str:
        """`2 changed, 1 added`, or `no changes`."""
        parts = [f"{count} {status}" for status, count in self.counts.items() if count]
        return ", ".join(parts) or "no changes"


def diff_specs(a: HarnessSpec, b: HarnessSpec) -> SpecDiff:
    """What changed from `a` to `b`, module by module (in MODULES order, then by name)."""
    old, new = _module_files(a), _module_files(b)
    changes = []
    for key in sorted(old.keys() | new.keys(), key=lambda key: (MODULES.index(key[0]), key[1])):
        change = _change(key, old.get(key), new.get(key))
        if change is not None:
            changes.append(change)
    return SpecDiff(tuple(changes))


def _change(key: tuple[str, str], old: tuple[str, str] | None, new: tuple[str, str] | None) -> ModuleChange | None:
    module, name = key
    if old == new:
        return None
    status = "added" if old is None else "removed" if new is None else "changed"
    old_path, old_text = old or (_NO_FILE, "")
    new_path, new_text = new or (_NO_FILE, "")
    headers = (_NO_FILE if old is None else f"a/{old_path}", _NO_FILE if new is None else f"b/{new_path}")
    unified = "".join(difflib.unified_diff(_lines(old_text), _lines(new_text), *headers))
    if not unified:  # a prompt block moved to another NN with the same text
        unified = f"--- {headers[0]}\n+++ {headers[1]}\n"
    return ModuleChange(module=module, name=name, status=status, path=new_path if new else old_path, unified=unified)


def _module_files(spec: HarnessSpec) -> dict[tuple[str, str], tuple[str, str]]:
    """(module, name) → (path, canonical text). Prompt blocks are keyed by name, so a reorder is a change."""
    files = to_files(spec)
    paths = {("settings", "harness"): HARNESS_FILE}
    paths |= {("skills", skill.name): skill_path(skill.name) for skill in spec.skills}
    paths |= {("tools", tool.name): tool_path(tool.name) for tool in spec.tools}
    paths |= {("hooks", hook.name): hook_path(hook.name) for hook in spec.hooks}
    paths |= {("prompt", block.name): prompt_path(block) for block in spec.prompt}
    return {key: (path, files[path]) for key, path in paths.items()}


def _lines(text: str) -> list[str]:
    """Lines with their `\\n`; unlike str.splitlines, never splits on form feeds or U+2028."""
    return re.findall(r"[^\n]*\n|[^\n]+\Z", text)
