"""Real execution of the scheduler's decisions on a Ray cluster.

Jobs are PyTorch training loops run by Ray actors, one per data-parallel worker. A
`TrainingHook` in the loop reports step times and obeys suspend / resume / migrate / resize
at mini-batch boundaries; `RayExecutor` carries out the scheduler core's decisions and keeps
its state in SQLite (`JobStore`) so a restarted scheduler loses no job and runs none twice.
"""
