"""Judges: grade one (case, trace) pair into a `Verdict`. Pure Python, no Django.

A judge is any callable `judge(case: Case, trace: dict) -> Verdict`. Judges are
registered by name so a run can store "reference" (or a model judge's name) and
a worker can resolve it later:

    from evaluation.judges import get_judge
    verdict = get_judge("reference")(case, trace)

    @register_judge("my-judge")
    def my_judge(case, trace): ...

`vote(verdicts)` combines several judges' verdicts on one case (majority
accuracy, lower-median effectiveness; see `evaluation.judges.verdict`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from evaluation.judges.reference import judge_reference
from evaluation.judges.verdict import Verdict, vote

Judge = Callable[[Any, Mapping[str, Any]], Verdict]

_JUDGES: dict[str, Judge] = {}


def register_judge(name: str, judge: Judge | None = None, *, replace: bool = False):
    """Register `judge` under `name`; usable as `register_judge(name, fn)` or as a decorator.

    Registering a different callable under a taken name raises ValueError unless `replace=True`.
    """
    if not name or not isinstance(name, str):
        raise ValueError("a judge needs a non-empty name")

    def add(fn: Judge) -> Judge:
        if not callable(fn):
            raise TypeError(f"judge {name!r} is not callable")
        current = _JUDGES.get(name)
        if current is not None and current is not fn and not replace:
            raise ValueError(f"a judge named {name!r} is already registered")
        _JUDGES[name] = fn
        return fn

    return add if judge is None else add(judge)


def get_judge(name: str) -> Judge:
    """The judge registered under `name`; KeyError naming the registered judges otherwise."""
    try:
        return _JUDGES[name]
    except KeyError:
        raise KeyError(f"unknown judge {name!r}; registered: {', '.join(sorted(_JUDGES)) or '(none)'}") from None


def available_judges() -> tuple[str, ...]:
    return tuple(sorted(_JUDGES))


register_judge("reference", judge_reference)

__all__ = ["Judge", "Verdict", "available_judges", "get_judge", "judge_reference", "register_judge", "vote"]
