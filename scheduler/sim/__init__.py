"""The trace-driven, event-driven cluster simulator: the scheduler core's executor for traces."""
