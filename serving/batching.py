"""Micro-batching: concurrent prediction requests of a task are answered by one predict call.

A predictor call costs several milliseconds whatever the number of rows (contract checks,
features, three LightGBM models), so under load one call per request saturates the CPU. While
a call runs, new requests of the same task (and the same columns) queue; the next call takes
them all (up to `max_rows`). A lone request is never delayed: it runs at once. When a combined
call fails (a bad row in one request), each request is retried alone, so every request gets
its own answer or its own error. Only tasks whose rows are predicted independently of each other
are batched (the test suite checks that batched and single answers are equal).
"""

from __future__ import annotations

import asyncio

import pandas as pd
from starlette.concurrency import run_in_threadpool

from perfcast.serving.models import ServedModels
from perfcast.serving.settings import MAX_ROWS

BATCHED_TASKS = ("scaling", "interference")

_Item = tuple[pd.DataFrame, asyncio.Future]


class PredictionBatcher:
    def __init__(
        self,
        models: ServedModels,
        tasks: tuple[str, ...] = BATCHED_TASKS,
        max_rows: int = MAX_ROWS,
    ) -> None:
        self.models, self.tasks, self.max_rows = models, tasks, max_rows
        self._pending: dict[tuple, list[_Item]] = {}
        self._draining: dict[tuple, asyncio.Task] = {}
        self.calls = 0  # predictor calls made, to see batching at work

    async def predict(self, task: str, rows: pd.DataFrame) -> pd.DataFrame:
        if task not in self.tasks:
            self.calls += 1
            return await run_in_threadpool(self.models.predict, task, rows)
        key = (task, tuple(rows.columns))
        future = asyncio.get_running_loop().create_future()
        self._pending.setdefault(key, []).append((rows, future))
        if key not in self._draining:
            self._draining[key] = asyncio.create_task(self._drain(key))
        return await future

    async def _drain(self, key: tuple) -> None:
        try:
            queue = self._pending[key]
            while queue:
                batch = [queue.pop(0)]
                size = len(batch[0][0])
                while queue and size + len(queue[0][0]) <= self.max_rows:
                    size += len(queue[0][0])
                    batch.append(queue.pop(0))
                await self._answer(key[0], batch)
        finally:
            # no await since the last emptiness check: nothing can have been queued meanwhile
            del self._draining[key]

    async def _answer(self, task: str, batch: list[_Item]) -> None:
        frames = [rows for rows, _ in batch]
        try:
            self.calls += 1
            out = await run_in_threadpool(self._predict_all, task, frames)
        except Exception as err:
            if len(batch) == 1:
                _settle(batch[0][1], error=err)
                return
            for item in batch:  # find whose rows failed: each request alone
                await self._answer(task, [item])
            return
        for (_, future), part in zip(batch, out, strict=True):
            _settle(future, result=part)

    def _predict_all(self, task: str, frames: list[pd.DataFrame]) -> list[pd.DataFrame]:
        if len(frames) == 1:
            return [self.models.predict(task, frames[0])]
        out = self.models.predict(task, pd.concat(frames, ignore_index=True))
        parts, start = [], 0
        for frame in frames:
            parts.append(out.iloc[start : start + len(frame)].reset_index(drop=True))
            start += len(frame)
        return parts


def _settle(
    future: asyncio.Future, result: pd.DataFrame | None = None, error: Exception | None = None
) -> None:
    if future.done():  # the client went away
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
