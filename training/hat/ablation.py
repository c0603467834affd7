"""Which held-out edit costs a model most: the HAT reproduction's held-out set taken apart, one edit kind at a time.

The reproduction applies all four held-out edits at once (`training.hat.heldout`), so its drop from the original
harness to the held-out one cannot say which edit does the damage. `run_ablation(backend, data, ...)` judges the
same eval cases under the original harness, under each kind alone (`HELDOUT_KINDS`: every name changed; a skill
added after training; numeric limits moved; tool descriptions reworded), and under all four (the reproduction's
held-out set, case for case), and pairs every condition with the original case by case (paired bootstrap CI, exact
McNemar p; `evaluation.metrics.compare`). A kind's edit is exactly that part of the case's full edit (the
generator's draws do not depend on the kinds kept).

Beside the model, the oracle teacher (`training.teachers.OracleBackend`, which reads every name from the case in
the harness's own names) answers every condition: the judge control. A drop there would be the judge's or the
edit's (a case no longer answerable), not the model's.

Each condition's per-turn records are kept in `workdir/<condition>.json` under the model's name, so an
interrupted run resumes where it stopped.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from training.hat.experiment import Data, paired_accuracy
from training.hat.heldout import HELDOUT_KINDS, heldout_variant

CONDITIONS = ("original", *HELDOUT_KINDS, "all")
DECODINGS = ("constrained", "free")  # harness-constrained decoding on (as served by default) or off
CONDITION_TITLES = {"original": "original harness", "names": "every skill and tool renamed",
                    "late_skill": "a skill added after training", "limits": "numeric limits moved",
                    "wording": "tool descriptions reworded", "all": "all four (the reproduction's held-out set)"}


def condition_items(data: Data, condition: str, generator_seed: int, limit: int,
                    decoding: str = "constrained") -> list[tuple[Any, Any]]:
    """The (case, harness) pairs one condition judges: the first `limit` eval cases, each under its own edit, every
    harness with `settings.constrained_decoding` as `decoding` says (a backend that cannot constrain ignores it)."""
    if condition not in CONDITIONS:
        raise ValueError(f"condition must be one of {', '.join(CONDITIONS)}, not {condition!r}")
    if decoding not in DECODINGS:
        raise ValueError(f"decoding must be one of {', '.join(DECODINGS)}, not {decoding!r}")
    cases = data.eval_cases[:limit]
    if condition == "original":
        pairs = [(case, data.spec) for case in cases]
    else:
        kinds = HELDOUT_KINDS if condition == "all" else (condition,)
        variants = [heldout_variant(data.spec, case, generator_seed, kinds=kinds) for case in cases]
        pairs = [(variant.case, variant.spec) for variant in variants]
    return [(case, _decoded(spec, decoding)) for case, spec in pairs]


def _decoded(spec: Any, decoding: str) -> Any:
    constrained = decoding == "constrained"
    if spec.settings.constrained_decoding == constrained:
        return spec
    return dataclasses.replace(spec, settings=dataclasses.replace(spec.settings, constrained_decoding=constrained))


def judged_record_path(workdir: Path, condition: str, decoding: str) -> Path:
    """Where one condition's per-turn records are kept (a record from before decoding was chosen has no suffix)."""
    return workdir / (f"{condition}.json" if decoding == "constrained" else f"{condition}.{decoding}.json")


def kept_record(saved: Path, *, model: str, decoding: str, items: list[tuple[Any, Any]]) -> dict[str, Any] | None:
    """The record kept at `saved` when it judged this model, decoding and these harnesses; else None."""
    if not saved.is_file():
        return None
    kept = json.loads(saved.read_text())
    # a record from before constrained decoding existed was decoded free
    if (kept.get("model") == model and kept.get("decoding", "free") == decoding
            and kept.get("harness_hashes") == [spec.content_hash for _, spec in items]):
        return kept
    return None


def judge_condition(backend: Any, items: list[tuple[Any, Any]], *, model: str, condition: str, decoding: str, workdir: Path,
            deadline_s: float, say: Callable[[str], None] | None, saved: Path | None = None,
            extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """One condition judged, or read back from `saved` (default `judged_record_path`); `extra` (e.g. the host)
    is kept in a new record."""
    from training.hat.evaluate import judge_turns

    saved = saved or judged_record_path(workdir, condition, decoding)
    kept = kept_record(saved, model=model, decoding=decoding, items=items)
    if kept is not None:
        return kept
    started = time.monotonic()
    scores = judge_turns(backend, items, deadline_s=deadline_s, label=f"ablation:{condition}", say=say)
    record = {"model": model, "condition": condition, "decoding": decoding,
              "harness_hashes": [spec.content_hash for _, spec in items],
              "eval_s": round(time.monotonic() - started, 1), **(extra or {}),
              "turns": [{"case_id": s.case_id, "accuracy": s.accuracy, "outcome": s.outcome, "reasons": list(s.reasons),
                         "tools_called": list(s.tools_called), "skills_asked": list(s.skills_asked)} for s in scores]}
    saved.parent.mkdir(parents=True, exist_ok=True)
    saved.write_text(json.dumps(record, indent=1))
    return record


def judge_control(items: list[tuple[Any, Any]], oracle: dict[str, Any] | None = None) -> float:
    """A condition's accuracy when the oracle teacher answers (module docstring): 1.0 unless the judge, or an
    edit, fails a perfect harness reader."""
    from training.hat.evaluate import judge_turns, mean
    from training.teachers import ORACLE_STYLE, OracleBackend

    # the control never errs: of the teacher's config it takes the acting style, not its mistake rate
    style = {k: v for k, v in (oracle or {}).items() if k in ORACLE_STYLE}
    return round(mean([score.accuracy for case, spec in items
                       for score in judge_turns(OracleBackend(case, **style), [(case, spec)],
                                                deadline_s=60.0, label="control")]), 4)


def run_ablation(backend: Any, data: Data, *, model: str, generator_seed: int, limit: int, workdir: Path,
                 deadline_s: float = 600.0, seed: int = 13, oracle: dict[str, Any] | None = None,
                 say: Callable[[str], None] | None = None, decoding: str = "constrained",
                 judged: Sequence[str] = CONDITIONS) -> dict[str, Any]:
    """The conditions judged on the same cases (module docstring); the result is what the report renders.
    `judged` may name a subset of the conditions (the original harness is always judged: the others pair with it)."""
    unknown = [c for c in judged if c not in CONDITIONS]
    if unknown:
        raise ValueError(f"conditions must be among {', '.join(CONDITIONS)}, not {', '.join(unknown)}")
    chosen = ["original", *(c for c in CONDITIONS if c in judged and c != "original")]
    limit = min(limit or len(data.eval_cases), len(data.eval_cases))
    items = {condition: condition_items(data, condition, generator_seed, limit, decoding) for condition in chosen}
    records = {condition: judge_condition(backend, items[condition], model=model, condition=condition, decoding=decoding,
                                  workdir=workdir, deadline_s=deadline_s, say=say)
               for condition in chosen}
    return {"model": model, "n": limit, "generator_seed": generator_seed, "harness_hash": data.spec.content_hash,
            "decoding": decoding, "conditions": summarise_conditions(data, items, records, seed=seed, oracle=oracle)}


def summarise_conditions(data: Data, items: dict[str, list[tuple[Any, Any]]], records: dict[str, dict[str, Any]], *,
                         seed: int, oracle: dict[str, Any] | None = None,
                         controls: dict[str, float] | None = None) -> dict[str, dict[str, Any]]:
    """Each judged condition's figures (the original harness first: the others pair with it case by case);
    `controls` gives conditions' judge controls already computed (the oracle's answers do not depend on the
    model)."""
    from training.hat.evaluate import bootstrap_ci, mean

    conditions = {}
    for index, (condition, record) in enumerate(records.items()):
        accuracy = [t["accuracy"] for t in record["turns"]]
        outcomes: dict[str, int] = {}
        for turn in record["turns"]:
            outcomes[turn["outcome"]] = outcomes.get(turn["outcome"], 0) + 1
        control = (controls or {}).get(condition)
        conditions[condition] = {
            "n": len(accuracy), "accuracy": round(mean(accuracy), 4), "ci": bootstrap_ci(accuracy, seed=seed + index),
            "outcomes": dict(sorted(outcomes.items())),
            "wrong_replies": sum(1 for t in record["turns"] if t["outcome"] == "replied" and not t["accuracy"]),
            "eval_s": record["eval_s"],
            "vs_original": None if condition == "original" or "original" not in records else paired_accuracy(
                records["original"]["turns"], record["turns"], seed=seed + 31 * index),
            "top_reasons": _top_reasons(record["turns"]),
            "judge_control": control if control is not None else judge_control(items[condition], oracle),
        }
    for condition in ("names", "all"):
        if condition not in records:
            continue
        turns = records[condition]["turns"]
        conditions[condition]["renamed_tool_calls"] = renamed_tool_calls(data, items[condition], turns)
        conditions[condition]["renamed_skill_loads"] = renamed_skill_loads(data, items[condition], turns)
    if "late_skill" in records:
        conditions["late_skill"]["added_skill_loads"] = added_skill_loads(data, items["late_skill"],
                                                                          records["late_skill"]["turns"])
    return conditions


def added_skill_loads(data: Data, items: list[tuple[Any, Any]], turns: list[dict[str, Any]]) -> dict[str, int]:
    """Under the late skill (a reply skill on an off-topic subject added after training, under an unfamiliar
    name), the turns that loaded it and how many of those the judge failed: no case's answer needs it, so a
    model that chooses skills by what they describe leaves it alone."""
    trained = {module.name for module in data.spec.skills}
    loaded = wrong = 0
    for (_, spec), turn in zip(items, turns, strict=True):
        added = {module.name for module in spec.skills} - trained
        if added & set(turn.get("skills_asked", ())):
            loaded += 1
            wrong += not turn["accuracy"]
    return {"turns": loaded, "wrong": wrong}


def renamed_tool_calls(data: Data, items: list[tuple[Any, Any]], turns: list[dict[str, Any]]) -> dict[str, int]:
    """Under renamed tools, what a model called in each turn that missed an expected tool call: a tool name of the
    harness it was trained on (the name it learnt, not the one it was shown), some other name its harness does
    not have, only tools its harness has (the wrong ones), or none."""
    return _asked_instead(data, items, turns, kind="tools", missed="expected tool call not made",
                          asked=lambda turn: set(turn.get("tools_called", ())) - {"load_skill"})


def renamed_skill_loads(data: Data, items: list[tuple[Any, Any]], turns: list[dict[str, Any]]) -> dict[str, int]:
    """Under renamed skills, what a model asked load_skill for in each turn that loaded no expected reply skill
    (the same four answers as `renamed_tool_calls`)."""
    return _asked_instead(data, items, turns, kind="skills", missed="no expected reply skill loaded",
                          asked=lambda turn: set(turn.get("skills_asked", ())))


def _asked_instead(data: Data, items: list[tuple[Any, Any]], turns: list[dict[str, Any]], *, kind: str, missed: str,
                   asked: Callable[[dict[str, Any]], set[str]]) -> dict[str, int]:
    trained = {module.name for module in getattr(data.spec, kind)}
    counts = {"a training-harness name": 0, "another name not in its harness": 0, f"only its harness's {kind}": 0,
              f"no {kind[:-1]}": 0}
    for (_, spec), turn in zip(items, turns, strict=True):
        if not any(reason.startswith(missed) for reason in turn["reasons"]):
            continue
        names, shown = asked(turn), {module.name for module in getattr(spec, kind)}
        if names & trained - shown:
            counts["a training-harness name"] += 1
        elif names - shown:
            counts["another name not in its harness"] += 1
        elif names:
            counts[f"only its harness's {kind}"] += 1
        else:
            counts[f"no {kind[:-1]}"] += 1
    return counts


def _top_reasons(turns: list[dict[str, Any]], k: int = 4) -> list[list[Any]]:
    """The judge's commonest kinds of reason for failing a turn (its wording up to the first detail, so the
    names of each case's own edit do not split a kind), with how many failed turns gave each."""
    counts: dict[str, int] = {}
    for turn in turns:
        if not turn["accuracy"]:
            for reason in {re.split(r"[:(]", reason, maxsplit=1)[0].strip() for reason in turn["reasons"]}:
                counts[reason] = counts.get(reason, 0) + 1
    return [[reason, count] for reason, count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:k]]


def _decoding_words(result: dict[str, Any]) -> str:
    decoding = result.get("decoding")
    if decoding == "constrained":
        return "harness-constrained (a call can only name a declared tool or skill)"
    if decoding == "free":
        return "free (no harness constraint)"
    return "free (measured before harness-constrained decoding existed)"


def _judging_time(result: dict[str, Any], wall_s: float) -> str:
    """A resumed run's wall time leaves out the conditions judged by earlier calls: say what judging took in all."""
    judged = sum(row.get("eval_s", 0.0) for row in result["conditions"].values())
    return f" for this call; judging the model took {judged:.0f} s in all, over the calls that judged it" \
        if judged > wall_s else ""


def condition_table(conditions: dict[str, dict[str, Any]]) -> list[str]:
    """The conditions' table (`summarise_conditions`' figures), with what a model asked for under renamed names."""
    def pct(value: float) -> str:
        return f"{100 * value:.1f}"

    lines = [
        "Accuracy in % with its 95% bootstrap CI; Δ is the paired difference from the original harness, case by "
        "case (paired bootstrap 95% CI; ↑/↓ cases that got right/wrong; exact McNemar p).",
        "",
        "| condition | n | accuracy | Δ vs original | fallbacks | wrong replies | oracle (judge control) "
        "| commonest failure reasons |",
        "|---|---:|---:|---|---:|---:|---:|---|",
    ]
    for condition, row in conditions.items():
        paired = row["vs_original"]
        if paired is None:
            delta = "—"
        else:
            p = paired["mcnemar_p"]
            p_text = "" if p is None else (", p < 0.001" if p < 0.001 else f", p = {p:.3g}")
            delta = (f"{100 * paired['delta']:+.1f} [{100 * paired['ci'][0]:+.1f}, {100 * paired['ci'][1]:+.1f}] "
                     f"({paired['better']}↑ {paired['worse']}↓{p_text})")
        reasons = "; ".join(f"{reason} ({count})" for reason, count in row["top_reasons"]) or "—"
        lines.append(f"| {CONDITION_TITLES[condition]} | {row['n']} | {pct(row['accuracy'])} "
                     f"[{pct(row['ci'][0])}, {pct(row['ci'][1])}] | {delta} | {row['outcomes'].get('fallback', 0)} "
                     f"| {row['wrong_replies']} | {pct(row['judge_control'])} | {reasons} |")
    for condition in ("names", "all"):
        if condition not in conditions:
            continue
        for key, missed in (("renamed_tool_calls", "missed an expected tool call"),
                            ("renamed_skill_loads", "loaded no expected reply skill")):
            counts = conditions[condition].get(key)
            if counts and any(counts.values()):
                lines += ["", f"Turns (right or wrong) that {missed} under “{CONDITION_TITLES[condition]}”, by what "
                          "the model asked for instead: "
                          + "; ".join(f"{what} {count}" for what, count in counts.items()) + "."]
    added = conditions.get("late_skill", {}).get("added_skill_loads")
    if added:
        lines += ["", f"Turns that loaded the late skill (no case needs it): {added['turns']}, "
                  f"{added['wrong']} of them judged wrong."]
    return lines


def render_markdown(result: dict[str, Any], *, command: str, wall_s: float, notes: str = "") -> str:
    """The ablation's page: only the measured figures of `result`."""
    lines = [
        "# Which held-out edit costs the model most (issue 13)",
        "",
        f"Model `{result['model']}`, compact harness (content hash `{result['harness_hash'][:12]}`), the first "
        f"{result['n']} eval cases of its run, each judged by the reference judge under the original harness, "
        "under each held-out edit kind alone, and under all four at once (held-out generator seed "
        f"{result['generator_seed']}; one edit per case). Decoding: {_decoding_words(result)}. "
        f"Wall time {wall_s:.0f} s{_judging_time(result, wall_s)}.",
        "",
        f"Command: `{command}`",
        "",
        *condition_table(result["conditions"]),
    ]
    if notes:
        lines += ["", notes.strip()]
    return "\n".join(lines) + "\n"
