"""Scheduling DL jobs on GPU clusters from predictions: one loop (admission, policy, placement)
whose decisions an executor carries out, either the trace-driven simulator (`scheduler.sim`)
or the Ray executor (`scheduler.live`)."""
