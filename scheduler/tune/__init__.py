"""perfcast's schedulers for Ray Tune: `from perfcast.scheduler.tune import HyperSched`."""

from perfcast.scheduler.tune.hypersched import HyperSched

__all__ = ["HyperSched"]
