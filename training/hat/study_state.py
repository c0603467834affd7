"""The harness-reading study's committed state: what one session leaves in git for the next, on another machine
where `var/` is gone, to go on where it stopped (`training.hat.study`).

    study.json                                   the study's config and fingerprint (another study is refused)
    precision.json                               the training precision "auto" resolved to on the first host, which
                                                 every later stage keeps (arms compared at equal tokens train alike)
    plan.json                                    the training split: rows, tokens, steps, HSA names seen
    stages/<arm>/adapter/                        a finished stage's LoRA adapter: fp16 safetensors + adapter_config
    stages/<arm>/result.json                     its StageResult (paths relative to its pipeline folder), wall time,
                                                 host and `segments` (each session's share when it was resumed)
    checkpoints/<arm>/checkpoint-<step>/         with --keep-checkpoint, the Trainer checkpoint of a stage cut part
                                                 way, what resuming reads (LoRA r16 on SmolLM2-135M, 4.9 M trained
                                                 parameters: ~59 MB, the fp32 adapter 19.5 MB and Adam's two moments
                                                 39 MB), and `meta.json` (its wall time so far); dropped when the
                                                 stage finishes
    judged/<split>/<arm>/<decoding>/<condition>.json   one judging: per-turn records, wall time, host
    judged/<split>/<arm>/ifeval.json             IFEval prompt-strict verdicts per prompt, wall time, host
    choice.json                                  the recipe choice, made on the validation split, with its reason

Stage adapters are what rebuilds every model: the base with the adapters of an arm's stages merged in order
(`training.default_model.merge_adapters`), the same merge the shipped default gets.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from training.default_model import ADAPTER_FILE, chain_digest, copy_adapter_fp16

ROOT = Path(__file__).resolve().parents[2]


class StudyStateError(RuntimeError):
    pass


def host() -> dict[str, Any]:
    """The machine a part ran on: CPU model, cores, 1-minute load, node name."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "load_1m": round(os.getloadavg()[0], 2), "node": platform.node()}


def write_json(path: Path, data: Any) -> None:
    """Write-then-rename: a session cut mid-write never leaves half a record that the next one would trust."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(path.suffix + ".tmp")
    temporary.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(temporary, path)


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def _relative(path: str, folder: Path) -> str:
    """`path` relative to `folder` when it lies inside it (a stage's model), else as it is (a base model's name)."""
    try:
        return str(Path(path).resolve().relative_to(folder.resolve()))
    except ValueError:
        return path


def earlier_segments(meta: dict[str, Any]) -> list[dict[str, Any]]:
    """The sessions a kept checkpoint already holds (a checkpoint kept before segments were recorded: one segment
    with its wall time and host, the rest unknown)."""
    if "segments" in meta:
        return list(meta["segments"])
    if meta.get("wall_s"):
        return [{"steps": None, "wall_s": meta["wall_s"], "host": meta.get("host"), "first_loss": None,
                 "last_loss": None, "num_tokens": None}]
    return []


class StudyState:
    """The state folder (module docstring) and the operations on it."""

    def __init__(self, root: Path, *, commit: bool = False, commit_interval_s: float = 900.0):
        self.root = Path(root)
        self.commit_enabled, self.commit_interval_s = commit, commit_interval_s
        self.last_commit = time.monotonic()

    # -- the study it belongs to
    def claim(self, fingerprint: str, config: dict[str, Any]) -> None:
        """Refuse a folder that holds another study's state; record this one's config the first time."""
        stored = read_json(self.root / "study.json")
        if stored is not None:
            if stored["fingerprint"] != fingerprint:
                raise StudyStateError(f"{self.root} holds another study (its config differs: compare "
                                      f"{self.root / 'study.json'}); use another --state-dir")
            return
        write_json(self.root / "study.json", {"fingerprint": fingerprint, "config": config})

    def pinned_precision(self, resolved: str) -> str:
        """The training precision every stage of this study uses: `resolved` (what "auto" gives on this host) the
        first time, then whatever was pinned then, whichever host a later session runs on."""
        stored = read_json(self.root / "precision.json")
        if stored is not None:
            return stored["precision"]
        write_json(self.root / "precision.json", {"precision": resolved, "host": host()})
        return resolved

    @property
    def plan(self) -> dict[str, Any] | None:
        return read_json(self.root / "plan.json")

    def save_plan(self, plan: dict[str, Any]) -> None:
        if self.plan != plan:
            write_json(self.root / "plan.json", plan)

    # -- trained stages
    def stage_dir(self, arm: str) -> Path:
        return self.root / "stages" / arm

    def stage_record(self, arm: str) -> dict[str, Any] | None:
        if not (self.stage_dir(arm) / "adapter" / ADAPTER_FILE).is_file():
            return None
        return read_json(self.stage_dir(arm) / "result.json")

    def save_stage(self, arm: str, result: dict[str, Any], *, adapter: Path, artifacts_dir: Path,
                   extra: dict[str, Any]) -> None:
        """Keep a finished stage: its adapter as fp16 and its record, the paths made relative to its pipeline
        folder (another machine puts that folder elsewhere)."""
        target = self.stage_dir(arm)
        copy_adapter_fp16(adapter, target / "adapter")
        record = {**result, "path": _relative(result["path"], artifacts_dir),
                  "parent_path": _relative(result["parent_path"], artifacts_dir), **extra}
        write_json(target / "result.json", record)

    def adapters(self, chain: tuple[str, ...]) -> list[Path]:
        """The adapter folders of an arm's stages, in merge order; a stage not kept yet raises."""
        missing = [arm for arm in chain if self.stage_record(arm) is None]
        if missing:
            raise StudyStateError(f"stages not trained yet: {', '.join(missing)}")
        return [self.stage_dir(arm) / "adapter" for arm in chain]

    def model_id(self, arm: str, chain: tuple[str, ...], base: str) -> str:
        """What a judging record says it judged: the base by name, a trained arm by its adapters' hash."""
        if not chain:
            return f"base:{base}"
        return f"{arm}@{chain_digest(self.adapters(chain))[:16]}"

    # -- mid-stage checkpoints
    def kept_checkpoint(self, arm: str) -> Path | None:
        found = sorted((self.root / "checkpoints" / arm).glob("checkpoint-*"),
                       key=lambda p: int(p.name.split("-")[-1]) if p.name.split("-")[-1].isdigit() else -1)
        return found[-1] if found else None

    def keep_checkpoint(self, arm: str, checkpoint: Path, *, wall_s: float, segment: dict[str, Any] | None = None
                        ) -> Path:
        """Copy a Trainer checkpoint into the state (replacing an older one of the stage) with its wall time and
        the sessions that trained it (`segments`, this one's `segment` last)."""
        segments = [*earlier_segments(self.checkpoint_meta(arm)), *([segment] if segment else [])]
        folder = self.root / "checkpoints" / arm
        if folder.exists():
            shutil.rmtree(folder)
        target = folder / checkpoint.name
        # the tokenizer files the trainer saves beside it (3.5 MB for SmolLM2) are not read when resuming
        shutil.copytree(checkpoint, target, ignore=shutil.ignore_patterns("tokenizer*", "*.jinja", "README.md"))
        write_json(folder / "meta.json", {"checkpoint": checkpoint.name, "wall_s": round(wall_s, 1), "host": host(),
                                          "segments": segments})
        return target

    def checkpoint_meta(self, arm: str) -> dict[str, Any]:
        return read_json(self.root / "checkpoints" / arm / "meta.json") or {}

    def drop_checkpoint(self, arm: str) -> None:
        shutil.rmtree(self.root / "checkpoints" / arm, ignore_errors=True)

    # -- judgings
    def judged_path(self, split: str, arm: str, decoding: str, condition: str) -> Path:
        return self.root / "judged" / split / arm / decoding / f"{condition}.json"

    def ifeval_path(self, split: str, arm: str) -> Path:
        return self.root / "judged" / split / arm / "ifeval.json"

    @property
    def choice_path(self) -> Path:
        return self.root / "choice.json"

    def size_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.root.rglob("*") if p.is_file()) if self.root.exists() else 0

    # -- git
    def commit(self, message: str, *, force: bool = False) -> bool:
        """Commit the state folder alone (`git commit -- <folder>`), at most every `commit_interval_s` unless
        forced; only with `commit=True` and a folder inside this checkout. A failure is reported, not raised: the
        files stay for the next commit."""
        if not self.commit_enabled or (not force and time.monotonic() - self.last_commit < self.commit_interval_s):
            return False
        try:
            folder = str(self.root.resolve().relative_to(ROOT))
        except ValueError:
            return False
        git = ["git", "-C", str(ROOT)]
        try:
            subprocess.run([*git, "add", "--all", "--", folder], check=True, capture_output=True, timeout=120)
            staged = subprocess.run([*git, "diff", "--cached", "--quiet", "--", folder], capture_output=True,
                                    timeout=60)
            if staged.returncode == 0:
                return False
            subprocess.run([*git, "commit", "-q", "-m", message, "--", folder], check=True, capture_output=True,
                           timeout=120)
        except (subprocess.SubprocessError, OSError) as error:
            print(f"study: could not commit {folder}: {error}", flush=True)
            return False
        self.last_commit = time.monotonic()
        return True
