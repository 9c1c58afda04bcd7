"""The restart bookkeeping (no Ray): failures count in a row until a newer checkpoint, and a
waiting restart can be redirected or called off before it is due."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from perfcast.scheduler.live.restarts import RestartBackoff


@given(st.lists(st.one_of(st.none(), st.integers(0, 3)), min_size=1, max_size=20))
def test_failures_in_a_row_restart_counting_at_each_new_checkpoint(checkpoints):
    backoff = RestartBackoff()
    counts = [backoff.failure("j", at) for at in checkpoints]
    expected, run = [], 0
    for i, at in enumerate(checkpoints):
        run = run + 1 if i > 0 and at == checkpoints[i - 1] else 1
        expected.append(run)
    assert counts == expected
    assert backoff.failure("other", checkpoints[0]) == 1  # per job


def test_a_waiting_restart_is_due_once_and_can_be_redirected_or_called_off():
    backoff = RestartBackoff()
    backoff.schedule("now", 0.0, ((0, 0),), 32)
    backoff.schedule("later", 3600.0, ((0, 1),), 32)
    assert backoff.redirect("now", ((1, 0), (1, 1)), 64)
    ((job_id, restart),) = backoff.due()
    assert job_id == "now" and restart.gpus == ((1, 0), (1, 1)) and restart.global_batch == 64
    assert backoff.due() == [] and not backoff.redirect("now", ((0, 0),), 32)
    assert backoff.cancel("later") and not backoff.cancel("later")
