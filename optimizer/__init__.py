"""Decisions from predictions: one job's best configuration (`configs`), GPUs and batch sizes
for many elastic jobs (`elastic`), and where jobs run, sharing GPUs when it pays
(`placement`)."""
