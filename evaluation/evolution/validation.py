"""Checks every proposal passes before anyone sees it as a candidate. Pure: no Django.

An invalid proposal is kept with its errors (the review page lists it apart), never shown as a candidate:

- `base` — it was written against the diagnosed version (same content hash);
- `applies` — its diff is well-formed, complete and applies strictly to that version's files;
- `spec` — the edited files still parse and validate as a harness;
- `variables` — every `{{ name }}` the edited files used is still there;
- `truncated` — the model's output was not cut off (finish reason `length`, or a hunk cut short);
- `copied` — no run of `COPY_WORDS` or more words is copied from an eval case (no teaching to the test);
- `size` — at most `max_changed_lines` changed lines and `max_chars` characters;
- `rejected` — an operator has not already rejected the same edit for this harness.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from evaluation.evolution.patches import PatchError, apply_diff, changed_lines, parse_diff
from evaluation.evolution.proposals import Proposal
from evaluation.evolution.signatures import case_words
from harness.spec import HarnessSpec, SpecInvalid, parse_files, to_files
from harness.spec.template import template_names

COPY_WORDS = 5


@dataclass(frozen=True)
class ValidationConfig:
    max_changed_lines: int = 24
    max_chars: int = 6000
    copy_words: int = COPY_WORDS


def _grams(texts: Iterable[str], n: int) -> set[tuple[str, ...]]:
    grams = set()
    for text in texts:
        words = case_words([text])
        grams.update(tuple(words[i:i + n]) for i in range(len(words) - n + 1))
    return grams


def copied_run(added: Iterable[str], case_texts: Sequence[str], n: int = COPY_WORDS,
               removed: Iterable[str] = ()) -> str:
    """The first run of `n` words the added lines share with the eval cases' texts ('' when none).

    Runs the edited line already held (its removed version) are not new, so they do not count: a one-line
    YAML description that already quoted a viewer phrase is not a copy made by this edit."""
    grams = _grams(case_texts, n) - _grams(removed, n)
    for line in added:
        words = case_words([line])
        for i in range(len(words) - n + 1):
            if tuple(words[i:i + n]) in grams:
                return " ".join(words[i:i + n])
    return ""


def validate_proposal(proposal: Proposal, spec: HarnessSpec, *, case_texts: Sequence[str] = (),
                      rejected: Iterable[str] = (), config: ValidationConfig = ValidationConfig()) -> Proposal:
    """The proposal with `errors` filled in (empty when it may be shown as a candidate)."""
    errors: list[str] = []
    if proposal.base_hash != spec.content_hash:
        errors.append(f"base: written against {proposal.base_hash[:12]}, not the diagnosed version "
                      f"{spec.content_hash[:12]}")
    if proposal.finish_reason == "length":
        errors.append("truncated: the model's output was cut off at its token limit")
    files = to_files(spec)
    edited = None
    try:
        parse_diff(proposal.diff)
        edited = apply_diff(files, proposal.diff)
    except PatchError as exc:
        kind = "truncated" if "cut short" in str(exc) else "applies"
        if not (kind == "truncated" and any(e.startswith("truncated") for e in errors)):
            errors.append(f"{kind}: {exc}")
    if edited is not None:
        if edited == files:
            errors.append("applies: the diff changes nothing")
        try:
            parse_files(edited)
        except SpecInvalid as exc:
            errors.append("spec: the edited harness is invalid: " + "; ".join(str(e) for e in exc.errors[:5]))
        for path, text in files.items():
            if path in edited and edited[path] != text:
                lost = [n for n in template_names(text) if n not in template_names(edited[path])]
                if lost:
                    errors.append(f"variables: {path} loses {', '.join('{{ ' + n + ' }}' for n in lost)}")
    added, removed = changed_lines(proposal.diff)
    if run := copied_run(added, case_texts, config.copy_words, removed):
        errors.append(f"copied: the edit copies “{run}” from an eval case")
    if len(added) + len(removed) > config.max_changed_lines or len(proposal.diff) > config.max_chars:
        errors.append(f"size: {len(added) + len(removed)} changed lines, {len(proposal.diff)} characters "
                      f"(at most {config.max_changed_lines} lines and {config.max_chars} characters)")
    if proposal.fingerprint in set(rejected):
        errors.append("rejected: an operator already rejected this edit for this harness")
    return replace(proposal, errors=tuple(errors))
