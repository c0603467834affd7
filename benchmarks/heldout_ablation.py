"""Which held-out harness edit costs a model most (issue 13: "find out why").

    python benchmarks/heldout_ablation.py                      # the shipped default, its own run's first 60 cases
    python benchmarks/heldout_ablation.py --model-dir var/hat-experiment/hat/stages/00-sft/model \
        --config docs/hat-reproduction.json --cases 100        # an arm of a reproduction run

Judges the same eval cases under the original harness, each held-out edit kind alone and all four at once
(training/hat/ablation.py), and writes docs/heldout-ablation.json and .md (unless --out-* say otherwise). The eval
cases are rebuilt from the run's own experiment config (the manifest's, or --config's), so they are the cases that
run judged; the run refuses when the compact harness is no longer the one that model was trained and judged under.
Resumable: each condition's turns are kept in --workdir.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _config(path: Path | None) -> tuple[dict, str | None]:
    """The run's experiment config and its harness hash: a result JSON's, or the shipped default's manifest."""
    if path is None:
        from training.default_model import manifest

        info = manifest()
        if info is None:
            raise SystemExit("No shipped default model (training/default_model/): name --model-dir and --config.")
        return info["training"]["config"], info["harness"]["content_hash"]
    result = json.loads(path.read_text(encoding="utf-8"))
    return result["config"], result.get("harness", {}).get("content_hash")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model-dir", help="a Hugging Face model directory (default: the shipped default model)")
    parser.add_argument("--config", type=Path, help="the result JSON of the run that trained --model-dir")
    parser.add_argument("--cases", type=int, default=0, help="eval cases judged (0: the run's own eval limit)")
    parser.add_argument("--threads", type=int, default=2, help="llama.cpp threads")
    parser.add_argument("--decoding", choices=("constrained", "free"), default="constrained",
                        help="harness-constrained decoding (as served by default) or free")
    parser.add_argument("--conditions", default="",
                        help="comma-separated subset of the conditions (the original harness is always judged)")
    parser.add_argument("--workdir", default="var/heldout-ablation")
    parser.add_argument("--out-json", default=str(ROOT / "docs" / "heldout-ablation.json"))
    parser.add_argument("--out-md", default=str(ROOT / "docs" / "heldout-ablation.md"))
    parser.add_argument("--notes", help="a Markdown file appended to the page (the reading of the figures)")
    parser.add_argument("--render-only", action="store_true", help="render --out-json again (with --notes)")
    args = parser.parse_args(argv)
    if args.render_only:
        from training.hat.ablation import render_markdown

        result = json.loads(Path(args.out_json).read_text(encoding="utf-8"))
        notes = Path(args.notes).read_text(encoding="utf-8") if args.notes else ""
        Path(args.out_md).write_text(render_markdown(result, command=result["command"], wall_s=result["wall_s"],
                                                     notes=notes), encoding="utf-8")
        return 0
    if bool(args.model_dir) != bool(args.config):
        parser.error("--model-dir and --config go together (the default model brings its own config)")

    from serving.backends.local import LocalBackend
    from training.hat.ablation import CONDITIONS, render_markdown, run_ablation
    from training.hat.evaluate import Capped
    from training.hat.experiment import ExperimentConfig, build_data, teacher_config

    started = time.monotonic()
    raw, trained_hash = _config(args.config)
    fields = {f.name for f in dataclasses.fields(ExperimentConfig)}
    config = ExperimentConfig(**{k: v for k, v in raw.items() if k in fields})
    data = build_data(config)
    if trained_hash and data.spec.content_hash != trained_hash:
        raise SystemExit(f"harness/demo/compact is {data.spec.content_hash[:12]} now; the model was judged under "
                         f"{trained_hash[:12]}: its original-harness figures would not be comparable.")
    if args.model_dir:
        from training.base_models import gguf_path
        from training.gguf_export import export_gguf

        gguf = Path(args.model_dir) / "model.q8_0.gguf"
        if not gguf.is_file():
            export_gguf(args.model_dir, gguf, template=gguf_path())
        model = str(args.model_dir)
    else:
        from training.default_model import build_default_gguf, manifest

        gguf = build_default_gguf(ROOT / "var")
        model = manifest()["name"]
    backend = Capped(LocalBackend(gguf, n_ctx=4096, n_threads=args.threads), config.max_new_tokens)
    result = run_ablation(backend, data, model=model, generator_seed=config.heldout_seed,
                          limit=args.cases or config.eval_limit or config.cases, workdir=Path(args.workdir),
                          deadline_s=config.eval_deadline_s, seed=config.seed,
                          oracle=teacher_config(config), say=print, decoding=args.decoding,
                          judged=[c for c in args.conditions.split(",") if c] or CONDITIONS)
    result["command"] = "python benchmarks/heldout_ablation.py " + " ".join(
        shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    result["config"] = dataclasses.asdict(config)
    result["machine"] = {"cpus": os.cpu_count(), "threads": args.threads}
    result["wall_s"] = round(time.monotonic() - started, 1)
    Path(args.out_json).write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    notes = Path(args.notes).read_text(encoding="utf-8") if args.notes else ""
    markdown = render_markdown(result, command=result["command"], wall_s=result["wall_s"], notes=notes)
    Path(args.out_md).write_text(markdown, encoding="utf-8")
    print(markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
