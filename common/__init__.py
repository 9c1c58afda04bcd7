"""perfcast: performance prediction and configuration for deep-learning jobs on GPU clusters."""

__version__ = "0.1.0"
