"""benchmarks/evolution.py's core on a few cases with a scripted model: the breakages apply to the shipped
compact harness, trials read only diagnosis cases, and the gate figures come from the gate cases alone."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

from evaluation.evolution.diagnosis import DiagnosisConfig
from evaluation.evolution.stopping import StopConfig
from harness.model_protocol import ModelResponse, ToolCall
from harness.spec import read_dir, to_files
from serving.backends.scripted import ScriptedBackend

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("evolution_benchmark", ROOT / "benchmarks" / "evolution.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while being defined
    spec.loader.exec_module(module)
    return module


def fixed_policy(messages, tools):
    """A model that never reads the harness text: product questions load product-qa and look the product up
    (the link id in the message, else L001); everything else is small talk."""
    user = messages[1]["content"]
    viewer = user.rsplit("] ", 1)[-1]
    called = [c["function"]["name"] for m in messages if m["role"] == "assistant" for c in m.get("tool_calls") or ()]
    product = re.search(r"\bL\d{3}\b", viewer) or re.search(r"\b(price|cost|much|stock|size)\b", viewer.lower())
    if "load_skill" not in called:
        skill = "product-qa" if product else "casual-chat"
        return ModelResponse(tool_calls=(ToolCall("c1", "load_skill", json.dumps({"name": skill})),))
    if product and "get_product_info_by_link_id" not in called and tools:
        link = re.search(r"\bL\d{3}\b", viewer)
        return ModelResponse(tool_calls=(ToolCall("c2", "get_product_info_by_link_id",
                                                  json.dumps({"link_id": link.group(0) if link else "L001"})),))
    return ModelResponse(content="Thanks for watching, so glad you're here!")


def test_breakages_change_the_compact_harness_and_it_stays_valid(bench):
    clean = read_dir(bench.COMPACT)
    spec, applied = bench.broken_harness(deadline_s=40.0)
    files = to_files(spec)
    assert [b["name"] for b in applied] == [b[0] for b in bench.BREAKAGES]
    assert len({b["kind"] for b in applied}) == 4
    for _, _, path, old, new in bench.BREAKAGES:
        assert old not in files[path] and new in files[path] and old in clean[path]
    assert spec.settings.max_turns == 2 and spec.settings.deadline_s == 40.0
    unbroken, none = bench.broken_harness([])
    assert none == [] and unbroken.settings.max_turns == 4


def test_loop_trials_read_diagnosis_cases_and_gate_figures_only_gate_cases(bench, tmp_path):
    cases = bench.eval_cases(4307, 12)
    store = tmp_path / "cache.json"
    evaluator = bench.Evaluator(cases, lambda: ScriptedBackend([fixed_policy], cycle=True), say=lambda _: None,
                                store=store, model_key="scripted")
    tried: list[str] = []
    passes = evaluator.passes
    evaluator.passes = lambda files, ids: (tried.extend(ids), passes(files, ids))[1]
    spec, _ = bench.broken_harness()
    # Stop advice loosened so that 12 cases yield a cluster, a proposal and its trial.
    config = DiagnosisConfig(stop=StopConfig(min_largest_cluster=2, noise_majority=1.01))
    report = bench.run_loop(spec, cases, evaluator, max_rounds=1, gate_min_cases=2, config=config,
                            say=lambda _: None)

    diagnosis, gate = set(report["diagnosis_case_ids"]), set(report["gate_case_ids"])
    assert diagnosis and gate and not diagnosis & gate and diagnosis | gate == {c.case_id for c in cases}
    assert tried and set(tried) <= diagnosis  # proposals were tried, and never on a gate case
    first = report["rounds"][0]
    gate_scores = [evaluator.cache[(spec.content_hash, c)].accuracy for c in sorted(gate)]
    assert first["gate_accuracy"] == pytest.approx(sum(gate_scores) / len(gate_scores), abs=1e-4)
    for row in report["rounds"]:
        assert {"round", "diagnosis_accuracy", "gate_accuracy", "gate_ci", "accepted_edits", "fixed", "broken",
                "verdict"} <= set(row)
        assert set(row["fixed"]) | set(row["broken"]) <= gate
    assert report["stopped"]["by"]  # it says why it stopped
    json.dumps(report)  # the report is what --write stores
    assert report["outcomes"][spec.content_hash[:12]].keys() == diagnosis | gate

    # --cache: a rerun reuses every stored outcome and runs no turn again
    again = bench.Evaluator(cases, lambda: pytest.fail("a cached case ran again"), store=store, model_key="scripted")
    assert again.cache == evaluator.cache and len(again.cache) >= len(cases)
    assert again.run(spec, sorted(gate)) == {c: evaluator.cache[(spec.content_hash, c)] for c in sorted(gate)}
    assert again.turns == 0 and again.reused == len(gate)
    assert "| 0 |" in bench.render_md({**report, "model": {"backend": "scripted", "name": "fixed policy"},
                                       "host": bench.host(), "command": "x", "cases": 8, "case_seed": 4307,
                                       "breakages": [], "deadline_s": None, "max_new_tokens": 64, "wall_s": 1.0,
                                       "model_turns": evaluator.turns})
