"""Unified diffs over a harness's canonical files: make one, and apply one strictly. Pure: no Django.

A proposal's edit is a unified diff (`--- a/path`, `+++ b/path`, `@@ -l,n +l,n @@` hunks) against the
canonical files of the version it diagnosed. Applying is strict: every context and removed line must match
exactly where the hunk says (no fuzz), so a diff that does not fit its base is refused, not bent into place.
"""

from __future__ import annotations

import difflib
import itertools
import re
from collections.abc import Mapping
from dataclasses import dataclass

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
NO_FILE = "/dev/null"


class PatchError(ValueError):
    """The diff is malformed, incomplete, or does not apply to its base."""


@dataclass(frozen=True)
class FilePatch:
    old_path: str
    new_path: str
    hunks: tuple[tuple[int, int, int, int, tuple[str, ...]], ...]  # old start, old len, new start, new len, lines

    @property
    def path(self) -> str:
        return self.new_path if self.new_path != NO_FILE else self.old_path


def make_diff(old: Mapping[str, str], new: Mapping[str, str]) -> str:
    """The unified diff from files `old` to files `new` (only files that differ)."""
    out = []
    for path in sorted(old.keys() | new.keys()):
        a, b = old.get(path), new.get(path)
        if a == b:
            continue
        out.extend(difflib.unified_diff(_lines(a or ""), _lines(b or ""),
                                        NO_FILE if a is None else f"a/{path}", NO_FILE if b is None else f"b/{path}"))
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in out)


def _lines(text: str) -> list[str]:
    return re.findall(r"[^\n]*\n|[^\n]+\Z", text)


def _strip_prefix(path: str) -> str:
    path = path.strip().split("\t")[0]
    return path if path == NO_FILE else re.sub(r"^[ab]/", "", path)


def parse_diff(diff: str) -> list[FilePatch]:
    """The file patches of a unified diff; raises PatchError when it is malformed or cut short."""
    lines = diff.splitlines()
    patches: list[FilePatch] = []
    i = 0
    while i < len(lines):
        if not lines[i].startswith("--- "):
            if lines[i].strip() and not lines[i].startswith(("diff ", "index ")):
                raise PatchError(f"line {i + 1}: expected a “--- a/<path>” header, found “{lines[i][:60]}”")
            i += 1
            continue
        if i + 1 >= len(lines) or not lines[i + 1].startswith("+++ "):
            raise PatchError(f"line {i + 1}: a '---' header must be followed by '+++'")
        old_path, new_path = _strip_prefix(lines[i][4:]), _strip_prefix(lines[i + 1][4:])
        i += 2
        hunks = []
        while i < len(lines) and lines[i].startswith("@@"):
            match = _HUNK.match(lines[i])
            if not match:
                raise PatchError(f"line {i + 1}: malformed hunk header “{lines[i][:60]}”")
            old_start, old_len = int(match.group(1)), int(match.group(2) or 1)
            new_start, new_len = int(match.group(3)), int(match.group(4) or 1)
            i += 1
            body: list[str] = []
            seen_old = seen_new = 0
            while i < len(lines) and (seen_old < old_len or seen_new < new_len):
                line = lines[i]
                if line.startswith("\\"):
                    i += 1
                    continue
                tag = line[:1] or " "
                if tag not in " +-":
                    break
                seen_old += tag in " -"
                seen_new += tag in " +"
                body.append(tag + line[1:])
                i += 1
            while i < len(lines) and lines[i].startswith("\\"):
                i += 1
            if seen_old != old_len or seen_new != new_len:
                raise PatchError(f"{new_path}: a hunk promises {old_len}/{new_len} lines but has "
                                 f"{seen_old}/{seen_new} (the diff is cut short or miscounted)")
            hunks.append((old_start, old_len, new_start, new_len, tuple(body)))
        if not hunks:
            raise PatchError(f"{new_path}: a file header without hunks")
        patches.append(FilePatch(old_path, new_path, tuple(hunks)))
    if not patches:
        raise PatchError("the diff changes no file")
    return patches


def apply_diff(files: Mapping[str, str], diff: str) -> dict[str, str]:
    """`files` with the diff applied (strictly); raises PatchError naming the file and hunk that does not fit."""
    result = dict(files)
    for patch in parse_diff(diff):
        if patch.old_path == NO_FILE:
            if patch.new_path in result:
                raise PatchError(f"{patch.new_path}: the diff creates a file that already exists")
            source: list[str] = []
        else:
            if patch.old_path not in result:
                raise PatchError(f"{patch.old_path}: no such file in the base version")
            source = result[patch.old_path].split("\n")
        out: list[str] = []
        position = 0  # index into source
        for number, (old_start, old_len, _, _, body) in enumerate(patch.hunks, 1):
            start = max(old_start - 1, 0) if old_len else old_start
            if start < position:
                raise PatchError(f"{patch.path}: hunk {number} overlaps the previous one")
            out.extend(source[position:start])
            position = start
            for line in body:
                tag, text = line[0], line[1:]
                if tag in " -":
                    if position >= len(source) or source[position] != text:
                        found = source[position] if position < len(source) else "(end of file)"
                        raise PatchError(f"{patch.path}: hunk {number} does not apply at line {position + 1}: "
                                         f"expected “{text[:60]}”, found “{found[:60]}”")
                    position += 1
                    if tag == " ":
                        out.append(text)
                else:
                    out.append(text)
        out.extend(source[position:])
        if patch.new_path == NO_FILE:
            result.pop(patch.old_path, None)
            continue
        text = "\n".join(out)
        if patch.old_path == NO_FILE and text and not text.endswith("\n"):
            text += "\n"
        if patch.old_path != patch.new_path and patch.old_path != NO_FILE:
            result.pop(patch.old_path, None)
        result[patch.new_path] = text
    return result


def merge_text(base: str, ours: str, theirs: str, *, path: str = "") -> str:
    """Three-way line merge of two edits of `base`; PatchError when both change the same or adjacent lines
    (identical changes are taken once)."""
    lines = base.split("\n")

    def changes(new: str) -> list[tuple[int, int, tuple[str, ...]]]:
        matcher = difflib.SequenceMatcher(None, lines, new.split("\n"), autojunk=False)
        other = new.split("\n")
        return [(i1, i2, tuple(other[j1:j2])) for tag, i1, i2, j1, j2 in matcher.get_opcodes() if tag != "equal"]

    mine, yours = changes(ours), changes(theirs)
    merged = sorted(set(mine) | set(yours))
    for a, b in itertools.pairwise(merged):
        if b[0] <= a[1]:  # overlapping, touching, or two insertions at one place
            first, last = a[0] + 1, max(a[1], b[1], a[0] + 1)
            raise PatchError(f"{path or 'file'}: both edits change line{'s' if last > first else ''} "
                             f"{first}{f'–{last}' if last > first else ''} of the diagnosed version")
    out, position = [], 0
    for start, end, replacement in merged:
        out.extend(lines[position:start])
        out.extend(replacement)
        position = end
    out.extend(lines[position:])
    return "\n".join(out)


def apply_onto(base: Mapping[str, str], current: Mapping[str, str], diff: str) -> dict[str, str]:
    """Apply `diff`, written against `base`, onto `current` (base plus other edits): the diff is applied to
    `base` strictly, then each file it changes is merged three-way with `current`. PatchError when it does
    not fit its base or when it and the other edits change the same lines (a real conflict)."""
    edited = apply_diff(base, diff)
    result = dict(current)
    for path in sorted(base.keys() | edited.keys()):
        if edited.get(path) == base.get(path):
            continue
        if current.get(path) == base.get(path):
            new = edited.get(path)
        elif path in base and path in edited and path in current:
            new = merge_text(base[path], current[path], edited[path], path=path)
        else:
            raise PatchError(f"{path}: created or deleted by one edit and changed by another")
        if new is None:
            result.pop(path, None)
        else:
            result[path] = new
    return result


def changed_lines(diff: str) -> tuple[list[str], list[str]]:
    """(added, removed) lines of a diff, without their +/- marks (file headers excluded)."""
    added, removed = [], []
    for line in diff.splitlines():
        if line.startswith(("+++", "---")):
            continue
        if line.startswith("+"):
            added.append(line[1:])
        elif line.startswith("-"):
            removed.append(line[1:])
    return added, removed


def reverse_diff(diff: str) -> str:
    """The diff that undoes `diff` (old and new swapped in headers, hunk ranges and lines)."""
    out = []
    lines = diff.splitlines(keepends=True)
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            old, new = line[4:].rstrip("\n"), lines[i + 1][4:].rstrip("\n")
            swap = lambda path, prefix: path if path == NO_FILE else prefix + re.sub(r"^[ab]/", "", path)  # noqa: E731
            out += [f"--- {swap(new, 'a/')}\n", f"+++ {swap(old, 'b/')}\n"]
            i += 2
            continue
        if match := _HUNK.match(line):
            a, b = f"{match.group(1)}" + (f",{match.group(2)}" if match.group(2) else ""), \
                f"{match.group(3)}" + (f",{match.group(4)}" if match.group(4) else "")
            out.append(f"@@ -{b} +{a} @@\n")
        elif line.startswith("+"):
            out.append("-" + line[1:])
        elif line.startswith("-"):
            out.append("+" + line[1:])
        else:
            out.append(line)
        i += 1
    return "".join(out)
