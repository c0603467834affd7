"""Live A/B experiments of harness versions against the ReAct control.

`assignment` (GrowthBook-compatible hashing and bucketing) and `statistics` (per-arm sufficient statistics,
uplift, SRM, sequential intervals, multiple-comparison corrections, the ship/roll-back decision) are pure
Python (+ scipy): they import no Django. This file imports nothing, so the Django-side modules of this
package load only what they use.
"""
