"""Evaluation: eval sets and runs (Django app) plus the pure judges and metrics (`evaluation.judges`, `evaluation.metrics`)."""
