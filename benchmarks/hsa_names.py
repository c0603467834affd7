"""How much HSA's names and descriptions force a model to read: vocabulary size, rename styles, how often a
rewritten description repeats, and how often a skill's catalogue position moves.

Augments the compact demo harness with the default `HsaConfig` for `--variants` seeds and counts:
- the name vocabulary (`harness.augmentation.vocabulary`) and the share of renames whose name carries no
  meaning (opaque, vocabulary, code, mixed, collide), judged by the name not sharing a word with the
  original or any synonym of it;
- rewritten descriptions: for each module, the share of its rewrites that repeat one seen before, and the
  number of distinct texts;
- catalogue order: the share of (variant, original skill) pairs whose position in `<available_skills>`
  (and tools in the tool list) differs from the original harness's.

    .venv/bin/python benchmarks/hsa_names.py [--variants 2000]
"""

import argparse
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", type=int, default=2000)
    args = parser.parse_args()

    from harness.augmentation import HsaConfig, augment, vocabulary
    from harness.augmentation.names import SYNONYMS
    from harness.spec import parse_files, read_dir

    spec = parse_files(read_dir(Path(__file__).resolve().parents[1] / "harness/demo/compact"))
    meaningful = {word for key, values in SYNONYMS.items() for item in (*key, *values)
                  for word in re.findall(r"[a-z]+", item)}
    renames = meaningless = 0
    rewrites: dict[str, list[str]] = defaultdict(list)
    moved = Counter()
    changed = 0  # descriptions that differ from the original's, summed over variants
    seen = Counter()
    skills_before = [s.name for s in spec.skills]
    tools_before = [t.name for t in spec.tools]
    for seed in range(args.variants):
        aug = augment(spec, HsaConfig(), seed)
        for op in aug.mapping.operations:
            if op.op == "rename":
                old, new = op.detail.split(" -> ")
                renames += 1
                own = set(re.findall(r"[a-z]+", old)) | meaningful
                meaningless += not (set(re.findall(r"[a-z]+", new)) & own)
            elif op.op == "rewrite_description":
                rewrites[f"{op.dimension}:{op.target}"].append(op.detail)
        originals = {s.name: s.description for s in spec.skills} | {t.name: t.description for t in spec.tools}
        current = {**{s.name: s.description for s in aug.spec.skills}, **{t.name: t.description for t in aug.spec.tools}}
        renamed_all = {**aug.mapping.skills, **aug.mapping.tools}
        changed += sum(current.get(renamed_all.get(name, name)) != text for name, text in originals.items())
        for kind, before, after, renamed in (
                ("skills", skills_before, [s.name for s in aug.spec.skills], aug.mapping.skills),
                ("tools", tools_before, [t.name for t in aug.spec.tools], aug.mapping.tools)):
            for index, name in enumerate(before):
                seen[kind] += 1
                moved[kind] += after.index(renamed.get(name, name)) != index

    print(f"{args.variants} HSA variants of the compact harness (default HsaConfig)")
    print(f"name vocabulary: {vocabulary.vocabulary_size():,} words ({len(vocabulary.pseudo_words()):,} generated "
          f"pseudo-words + {len(vocabulary.GENERAL_WORDS)} general words), plus letter-digit codes")
    print(f"renames: {renames}, of which {meaningless} ({meaningless / renames:.0%}) share no word with the "
          f"original name or its synonyms")
    total = sum(len(texts) for texts in rewrites.values())
    repeats = sum(len(texts) - len(set(texts)) for texts in rewrites.values())
    print(f"description rewrites: {total} over {len(rewrites)} modules; {repeats} ({repeats / total:.1%}) repeat an "
          f"earlier rewrite of the same module")
    print(f"descriptions that differ from the original per variant: {changed / args.variants:.2f} of "
          f"{len(spec.skills) + len(spec.tools)} (rewritten or masked; noise skills not counted)")
    for module, texts in sorted(rewrites.items()):
        top = Counter(texts).most_common(1)[0][1]
        print(f"  {module:<48} {len(texts):>5} rewrites {len(set(texts)):>5} distinct, most frequent seen {top}x")
    for kind in ("skills", "tools"):
        print(f"catalogue position moved: {kind} {moved[kind] / seen[kind]:.0%} of (variant, {kind[:-1]}) pairs")


if __name__ == "__main__":
    main()
