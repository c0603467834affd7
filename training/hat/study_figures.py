"""The harness-reading study's result: its kept records (`training.hat.study`) turned into the figures
`docs/default-model.json` carries and `training.hat.report` renders.

Per split, arm and decoding, the ablation's per-condition figures (`training.hat.ablation.summarise_conditions`:
accuracy with CI, outcomes, wrong replies, the paired drop from the original harness, the oracle's judge
control); per split and arm, IFEval; per split, each arm's figures under the chosen decoding in the shape the
shipping rule reads (`training.default_model.ship_decision`: `fixed` = original harness, `heldout` = all four
held-out edits); the choice (validation) and the targets (test) of the shipped arm.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from training.hat.ablation import DECODINGS, judge_control, summarise_conditions
from training.hat.evaluate import bootstrap_ci, mean
from training.hat.experiment import (
    EVAL_SEED_OFFSET,
    disjointness,
    harness_info,
    paired_accuracy,
    teacher_config,
)
from training.hat.study import CHAINS, SPLITS, TEST_SEED_OFFSET, Study, turns_and_verdicts
from training.hat.study_state import read_json
from training.hat.targets import compute_targets
from training.results import StageResult


def ifeval_summary(record: dict[str, Any], *, seed: int) -> dict[str, Any]:
    scores = [v["strict"] for v in record["verdicts"]]
    return {"accuracy": round(mean(scores), 4), "ci": bootstrap_ci(scores, seed=seed), "n": len(scores),
            "eval_s": record["eval_s"], "host": record.get("host")}


def ship_figures(conditions: dict[str, Any], ifeval: dict[str, Any]) -> dict[str, Any]:
    """One arm's figures in the shape the shipping rule reads."""
    original, heldout = conditions["original"], conditions["all"]
    return {"fixed": original["accuracy"], "fixed_ci": original["ci"], "heldout": heldout["accuracy"],
            "heldout_ci": heldout["ci"], "ifeval": ifeval["accuracy"], "ifeval_ci": ifeval["ci"],
            "n": {"fixed": original["n"], "heldout": heldout["n"], "ifeval": ifeval["n"]},
            "wrong_answers": {"fixed": original["wrong_replies"], "heldout": heldout["wrong_replies"]}}


def study_result(study: Study) -> dict[str, Any]:
    """The study's result, from its state (every part must be done)."""
    from training.base_models import load_tokenizer
    from training.default_model import ship_decision

    config, experiment, state = study.config, study.experiment, study.state
    seed = experiment.seed
    choice = read_json(state.choice_path)
    if choice is None:
        raise RuntimeError("the study has not chosen on its validation split yet")
    shipped_arm, shipped_decoding = choice["arm"], choice["decoding"]
    oracle = teacher_config(experiment)
    splits: dict[str, Any] = {}
    walls: dict[str, float] = {}
    hosts: list[dict[str, Any]] = []
    turns: dict[str, Any] = {}
    verdicts: dict[str, Any] = {}
    for split in SPLITS:
        data = study.data[split]
        judged, ifeval = study.records(split)
        turns[split], verdicts[split] = turns_and_verdicts(judged, ifeval)
        controls: dict[tuple[str, str], float] = {}
        arms: dict[str, Any] = {}
        for index, arm in enumerate(config.arms):
            decodings = {}
            for decoding in DECODINGS:
                records = judged[arm][decoding]
                missing = [c for c in config.split_conditions(split) if c not in records]
                if missing or ifeval[arm] is None:
                    raise RuntimeError(f"{arm} is not fully judged on {split} ({decoding}: {', '.join(missing)}"
                                       f"{'; IFEval' if ifeval[arm] is None else ''})")
                items = {condition: study.items(split, condition, decoding) for condition in records}
                for condition in records:
                    if (decoding, condition) not in controls:
                        controls[(decoding, condition)] = judge_control(items[condition], oracle)
                decodings[decoding] = {"conditions": summarise_conditions(
                    data, items, records, seed=seed, oracle=oracle,
                    controls={c: controls[(decoding, c)] for c in records})}
                for record in records.values():
                    walls[f"judge {split} {arm}"] = walls.get(f"judge {split} {arm}", 0.0) + record["eval_s"]
                    hosts.append(record.get("host") or {})
            walls[f"judge {split} {arm}"] = round(walls[f"judge {split} {arm}"] + ifeval[arm]["eval_s"], 1)
            arms[arm] = {"model": study.model_id(arm), "decodings": decodings,
                         "ifeval": ifeval_summary(ifeval[arm], seed=seed + 2 + index)}
        vs_fixed = {decoding: {arm: paired_accuracy(turns[split]["fixed_sft"][decoding]["all"],
                                                    turns[split][arm][decoding]["all"], seed=seed + 11)
                               for arm in config.arms if arm not in ("base", "fixed_sft")}
                    for decoding in DECODINGS}
        splits[split] = {
            "cases": len(data.eval_cases), "ifeval_prompts": len(data.ifeval),
            "simulator_seed": seed + (EVAL_SEED_OFFSET if split == "validation" else TEST_SEED_OFFSET),
            "skipped_near_duplicates": data.skipped_near_duplicates, "arms": arms,
            "heldout_vs_fixed_sft": vs_fixed,
            "figures": {arm: ship_figures(arms[arm]["decodings"][shipped_decoding]["conditions"], arms[arm]["ifeval"])
                        for arm in config.arms}}
    test = turns["test"]
    targets = compute_targets(shipped=test[shipped_arm][shipped_decoding], fixed=test["fixed_sft"][shipped_decoding],
                              ifeval=verdicts["test"][shipped_arm], base_ifeval=verdicts["test"]["base"])
    plan = state.plan or {}
    stages = {arm: state.stage_record(arm) for arm in config.trained_arms}
    data = study.data["validation"]
    lineage = lineage_of(study, plan, stages)
    training = {arm: training_figures(record) for arm, record in stages.items()}
    for arm, record in stages.items():
        walls[f"train {arm}"] = record.get("wall_s") or 0.0
        hosts.append(record.get("host") or {})
    result = {
        "study": "harness-reading (issue 42)",
        "model": experiment.base,
        "config": {**asdict(experiment), **{k: v for k, v in config.measured().items() if k != "experiment"},
                   "state_dir": config.state_dir},
        "splits": splits,
        "choice": {k: v for k, v in choice.items() if k != "validation_digest"},
        "shipped": {"arm": shipped_arm, "decoding": shipped_decoding,
                    "adapters": list(CHAINS[shipped_arm])},
        "targets": targets,
        "targets_source": {"split": "test", "arm": shipped_arm, "decoding": shipped_decoding,
                           "renames": "names", "heldout": "all", "fixed_arm": "fixed_sft", "ifeval_base": "base",
                           "wrong_fact": "original harness: replies the judge failed, per turn"},
        "train_tokens": {"fixed_sft": plan.get("fixed_tokens"), "hsa_sft": plan.get("hsa_tokens"),
                         "fixed_sft_rows": plan.get("fixed_rows"), "hsa_sft_rows": plan.get("hsa_rows")},
        "steps": plan.get("steps", {}),
        "training": training,
        "harness": harness_info(data, load_tokenizer(experiment.base)),
        "lineage": lineage,
        "hosts": [dict(h) for h in {tuple(sorted((k, v) for k, v in h.items() if k != "load_1m")): h
                                    for h in hosts if h}.values()],
        "timings_s": {key: round(value, 1) for key, value in walls.items()},
        "wall_s": round(sum(walls.values()), 1),
    }
    result["ships"], result["decision"] = ship_decision(result, arm=shipped_arm)
    return result


def training_figures(record: dict[str, Any]) -> dict[str, Any]:
    """One stage's training as the docs show it. A stage trained over several sessions lists them
    (`segments`); its tokens, rate and first loss are the whole stage's only where every session recorded them
    (the trainer's token count starts again at each resume)."""
    metrics = record.get("metrics", {})
    segments = record.get("segments") or []
    figures = {"wall_s": record.get("wall_s"), "host": record.get("host"),
               "bf16": record.get("resolved_config", {}).get("bf16"),
               "resumed_from_kept_checkpoint": record.get("resumed_from_kept_checkpoint", False),
               "segments": segments, "loss": metrics.get("loss"),
               **{key: metrics.get(key) for key in ("num_tokens", "tokens_per_s", "first_loss")}}
    if len(segments) > 1 or figures["resumed_from_kept_checkpoint"]:
        tokens = [segment.get("num_tokens") for segment in segments]
        whole = len(segments) > 1 and None not in tokens
        figures["num_tokens"] = sum(tokens) if whole else None
        figures["tokens_per_s"] = round(sum(tokens) / figures["wall_s"], 1) if whole and figures["wall_s"] else None
        figures["first_loss"] = segments[0].get("first_loss") if segments else None
    return figures


def lineage_of(study: Study, plan: dict[str, Any], stages: dict[str, Any]) -> dict[str, Any]:
    """What kept both splits out of training: the exclusions every pipeline checked, each stage's record of it,
    and the held-out variants of each split against every harness and name training saw."""
    results = {arm: StageResult.from_dict(record) for arm, record in stages.items()}
    trained_hashes = {h for result in results.values() for h in result.harness_hashes}
    exclude = study.data["validation"].exclude
    return {"excluded_eval_sets": {key: len(value) for key, value in exclude.items()},
            "checked_by_pipeline_guard": all(r.data_lineage.get("checked_disjoint") for r in results.values()),
            "skipped_near_duplicates": {split: study.data[split].skipped_near_duplicates for split in SPLITS},
            "stages": {arm: {key: r.data_lineage.get(key) for key in ("cases", "cases_digest", "checked_disjoint")}
                       for arm, r in results.items()},
            "disjoint": {split: disjointness(study.data[split], {"hsa_variant_names": plan.get("hsa_variant_names",
                                                                                                 [])},
                                             trained_hashes)
                         for split in SPLITS}}
