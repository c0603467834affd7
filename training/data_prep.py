"""Each stage's data, prepared once per job under `artifacts/data/` and reused when the job resumes.

- sft: simulator cases (`data.simulator_seed`, `simulator_cases`, `simulator_rooms`) and imported
  `cases_jsonl` → teacher trajectories under every harness and its HSA variants (`trajectories.py`)
  → `sft.jsonl` (TRL conversational rows with tools) + `sft-report.json`.
- opd: general-instruction prompts (`opd.prompts`, a JSONL file; default the generated pool of
  `training/prompt_pool.py`) less the job's held-out validation prompts (`holdout.py`) → `opd.jsonl` rows
  `{"prompt": [user message]}`.
- rl: simulator cases seeded apart from the SFT ones (`"<seed>/rl"`), each assigned the original
  harness or an HSA variant (`rl.augmented_share`, a stable per-case draw) → `rl.jsonl` episodes
  (the case in that harness's names, the harness index and the HSA seed).

Before anything is generated, the cases (or prompts) are checked against the eval sets the job will
be judged on (`lineage.check_disjoint`), so an overlap fails fast and trains nothing.

One writer: with several training processes only the main one calls `prepare` (`pipeline.run_pipeline`
through `Processes.main_decides`) and the others get its `Prepared`, so a teacher is asked once and no
two processes write the same file.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.augmentation import HsaConfig, augment
from harness.simulator.cases import Case
from harness.spec import HarnessSpec
from training import prompt_pool
from training.case_hashing import case_content_hash, case_hashes
from training.datasets import write_jsonl
from training.lineage import check_disjoint
from training.pipeline_config import PipelineConfig, StageSpec
from training.results import Reporter, StageFailed
from training.trajectories import generate_trajectories, jsonl_cases, simulator_cases


@dataclass
class Prepared:
    path: Path                                    # the stage's JSONL
    case_hashes: dict[str, str]                   # case id → content hash of everything the stage drew on
    sources: list[dict[str, Any]]
    harness_hashes: set[str] = field(default_factory=set)
    report: dict[str, Any] = field(default_factory=dict)


def _save_meta(path: Path, prepared: Prepared) -> None:
    meta = {"case_hashes": prepared.case_hashes, "sources": prepared.sources,
            "harness_hashes": sorted(prepared.harness_hashes), "report": prepared.report}
    temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(meta, sort_keys=True, ensure_ascii=False), encoding="utf-8")
    temporary.replace(path)


def _load_meta(data_path: Path, meta_path: Path) -> Prepared | None:
    if not (data_path.is_file() and meta_path.is_file()):
        return None
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    return Prepared(path=data_path, case_hashes=meta["case_hashes"], sources=meta["sources"],
                    harness_hashes=set(meta["harness_hashes"]), report=meta["report"])


def prepare(stage: StageSpec, config: PipelineConfig, specs: Sequence[HarnessSpec], data_dir: Path,
            reporter: Reporter, *, held_out_prompts: Collection[str] = ()) -> Prepared:
    """The stage's data (module docstring); `held_out_prompts`: content hashes of prompts OPD must leave out."""
    data_dir.mkdir(parents=True, exist_ok=True)
    data_path, meta_path = data_dir / f"{stage.kind}.jsonl", data_dir / f"{stage.kind}-meta.json"
    existing = _load_meta(data_path, meta_path)
    if existing is not None:
        reporter.line(f"{stage.kind}: reusing prepared data ({existing.path.name})")
        return existing
    if stage.kind == "opd":
        prepared = _opd(stage, config, specs, data_path, reporter, held_out=frozenset(held_out_prompts))
    else:
        prepared = {"sft": _sft, "rl": _rl}[stage.kind](stage, config, specs, data_path, reporter)
    _save_meta(meta_path, prepared)
    return prepared


def _sft_cases(config: PipelineConfig) -> tuple[list[Case], list[dict[str, Any]]]:
    data = config.data
    cases: list[Case] = []
    sources: list[dict[str, Any]] = []
    if data.simulator_cases:
        cases += simulator_cases(data.simulator_seed, data.simulator_cases, n_rooms=data.simulator_rooms)
        sources.append({"kind": "simulator", "seed": data.simulator_seed, "cases": data.simulator_cases,
                        "rooms": data.simulator_rooms})
    for path in data.cases_jsonl:
        imported = jsonl_cases(path)
        cases += imported
        sources.append({"kind": "jsonl", "path": str(path), "cases": len(imported),
                        "sha256": hashlib.sha256(Path(path).read_bytes()).hexdigest()})
    return cases, sources


def _sft(stage: StageSpec, config: PipelineConfig, specs: Sequence[HarnessSpec], path: Path,
         reporter: Reporter) -> Prepared:
    cases, sources = _sft_cases(config)
    hashes = case_hashes(cases)
    check_disjoint(hashes, config.data.exclude)
    reporter.line(f"sft: {config.trajectories.teacher} teacher on {len(cases)} cases × {len(specs)} harness(es)")
    trajectories, report = generate_trajectories(cases, specs, config.trajectories)
    if not trajectories:
        raise StageFailed(f"sft: the judge kept no trajectory: {report.nothing_kept()}")
    write_jsonl(path, (t.to_row() for t in trajectories))
    summary = report.to_dict()
    reporter.line(f"sft: kept {summary['kept']} of {summary['turns']} turns "
                  f"({summary['rejected']} rejected by the judge, {summary['retried']} retried, "
                  f"{summary['full_retry_kept']} kept with the full retry)")
    return Prepared(path=path, case_hashes=hashes, sources=sources,
                    harness_hashes={t.harness_hash for t in trajectories}, report=summary)


def _opd(stage: StageSpec, config: PipelineConfig, specs: Sequence[HarnessSpec], path: Path,
         reporter: Reporter, *, held_out: frozenset[str] = frozenset()) -> Prepared:
    opd = stage.config
    # The opd.prompts file or the generated pool, less the validation prompts, then cut to max_prompts.
    offered = prompt_pool.load_prompts(opd.prompts)  # type: ignore[attr-defined]
    kept = [text for text in offered if case_content_hash({"prompt": text}) not in held_out]
    prompts = kept[:opd.max_prompts] if opd.max_prompts else kept  # type: ignore[attr-defined]
    hashes = {f"prompt-{i:05d}": case_content_hash({"prompt": text}) for i, text in enumerate(prompts)}
    check_disjoint(hashes, config.data.exclude)
    write_jsonl(path, ({"prompt": [{"role": "user", "content": text}]} for text in prompts))
    source = opd.prompts or "the generated pool (training/prompt_pool.py, seed 0)"  # type: ignore[attr-defined]
    held = len(offered) - len(kept)
    reporter.line(f"opd: {len(prompts)} general-instruction prompts from {source}"
                  + (f", {held} held out for validation" if held else ""))
    return Prepared(path=path, case_hashes=hashes,
                    sources=[prompt_pool.source_record(opd.prompts, prompts)],  # type: ignore[attr-defined]
                    report={"prompts": len(prompts), "held_out_for_validation": held})


def _rl(stage: StageSpec, config: PipelineConfig, specs: Sequence[HarnessSpec], path: Path,
        reporter: Reporter) -> Prepared:
    rl = stage.config
    seed = f"{config.data.simulator_seed}/rl"
    cases = simulator_cases(seed, rl.cases, n_rooms=config.data.simulator_rooms)  # type: ignore[attr-defined]
    hashes = case_hashes(cases)
    check_disjoint(hashes, config.data.exclude)
    hsa = HsaConfig(**config.trajectories.hsa)
    episodes, harness_hashes, augmented = [], set(), 0
    for index, case in enumerate(cases):
        draw = random.Random(hashlib.sha256(f"{config.seed}:rl:{case.case_id}".encode()).hexdigest())
        harness_index = index % len(specs)
        spec, hsa_seed, episode_case = specs[harness_index], None, case
        if draw.random() < rl.augmented_share:  # type: ignore[attr-defined]
            hsa_seed = draw.randrange(2**31)
            augmentation = augment(spec, hsa, seed=hsa_seed)
            spec, episode_case = augmentation.spec, augmentation.mapping.rewrite_case(case)
            augmented += 1
        harness_hashes.add(spec.content_hash)
        episodes.append({"case": episode_case.to_dict(), "harness_index": harness_index, "hsa_seed": hsa_seed,
                         "harness_hash": spec.content_hash})
    write_jsonl(path, episodes)
    reporter.line(f"rl: {len(episodes)} episodes, {augmented} under an augmented harness")
    return Prepared(path=path, case_hashes=hashes,
                    sources=[{"kind": "simulator", "seed": seed, "cases": len(cases)}],
                    harness_hashes=harness_hashes,
                    report={"episodes": len(episodes), "augmented": augmented, "hsa": dict(config.trajectories.hsa)})
