"""A job that fails says why in words on its page and in its log: training's own refusals as they are, any
other fault named in a sentence (its Python class and repr'd arguments stay in the worker's log)."""

import pytest

from tests.training.jobs_builders import mini_harness, sft, tiny_config
from training import services
from training.models import TrainingJob
from training.results import StageFailed
from training.trajectories import TrajectoryReport
from workspaces.access import Actor

pytestmark = pytest.mark.django_db(transaction=True)  # the job's heartbeat thread has its own connection
SYSTEM = Actor.system("test")


def failing_job(workspace, monkeypatch, exc: Exception) -> TrainingJob:
    def crash(job, reporter, lease):
        raise exc

    monkeypatch.setattr(services, "_run", crash)
    job = services.job_create(actor=SYSTEM, workspace=workspace, name="doomed", config=tiny_config(sft(2)),
                              harness_versions=[mini_harness(workspace).head], simulator={"seed": 1, "size": 2},
                              start=False)
    assert services.job_execute(job_id=job.pk) == "failed"
    return TrainingJob.objects.get(pk=job.pk)


def test_an_unexpected_fault_is_named_in_words_not_python(workspace, monkeypatch):
    job = failing_job(workspace, monkeypatch, KeyError("harnesses"))
    assert job.error == "The training worker hit an unexpected error; the worker process's own log has the details."
    shown = job.error + "\n".join(job.log_tail)
    assert "KeyError" not in shown and "'harnesses'" not in shown


def test_a_stage_that_cannot_run_says_why(workspace, monkeypatch):
    job = failing_job(workspace, monkeypatch, StageFailed("sft: loss is nan at step 3"))
    assert job.error == "sft: loss is nan at step 3"
    assert "failed: sft: loss is nan at step 3" in job.log_tail and "StageFailed" not in "\n".join(job.log_tail)


@pytest.mark.django_db
def test_out_of_memory_and_a_missing_file_are_named():
    assert "ran out of memory" in services.failure_sentence(MemoryError())
    missing = FileNotFoundError(2, "No such file or directory", "/models/base/config.json")
    assert services.failure_sentence(missing) == "A file the job needs is missing: /models/base/config.json."


@pytest.mark.django_db
def test_no_kept_trajectory_is_a_sentence_not_a_dict():
    text = TrajectoryReport(turns=8, kept=0, rejected=6, not_called=2, retried=1,
                            reasons={"missing fact: $71.20": 4, "no reply skill": 2, "x": 1, "y": 1}).nothing_kept()
    assert text == ("0 of 8 turns kept (6 rejected by the judge, 2 answered by an input hook without the model); "
                    "most often: “missing fact: $71.20” (4), “no reply skill” (2), “x” (1).")
    assert "{" not in text
