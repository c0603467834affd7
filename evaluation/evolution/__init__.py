"""Harness evolution: diagnose an eval run's failures, propose harness edits, review them, gate the result.

The pure core (no Django; import-linter enforces it): `signatures` (deterministic failure signatures),
`clusters` (exact groups, then TF-IDF clustering with noise as the long tail, stable ids), `judging`
(judge reasons the trace disproves), `stopping` (continue or stop, with the rule), `proposals` (the
offline rule catalogue), `proposer` (the model-run proposer harness), `patches` (unified diffs),
`validation` (checks before a proposal is shown) and `diagnosis` (all of it for one run).
The Django app (label `evolution`): `models`, `selectors`, `tasks`, `schemas`, `api`, and its writes by job:
`diagnosing` (request and run a diagnosis, over `records` and `calibration`), `decisions` (on proposals),
`rounds` (candidate, eval, gate) and `attribution`, all raising `errors.EvolutionError`; its pages are
`console/views/evolution.py` with templates under `templates/evolution/`.
"""
