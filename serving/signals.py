"""What serving announces for the apps above it to act on: serving imports none of them."""

from django.dispatch import Signal

# A reply served inside an experiment was sampled for live judging (settings.LIVE_JUDGE_RATE); sent after the
# reply's commit with `trace_id` and `experiment_id`. The trace may still be in the buffered writer. The
# evaluation app subscribes (it queues the judge); with no subscriber the sample is simply not judged.
live_trace_sampled = Signal()
