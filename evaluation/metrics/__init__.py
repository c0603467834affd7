"""Metrics over judged runs: IFEval, judge/human agreement, paired run comparison, robustness rubric. Pure Python."""
