"""Micro-batching: concurrent prediction requests of a task are answered by one predict call.

A predictor call has a cost whatever the number of rows (contract checks, features, three
LightGBM models), so under load one call per request saturates the CPU. While a call runs, new
requests of the same task (and the same columns) queue; the next call takes them all (up to
`max_rows`), each request one of the `groups` of a `TaskPredictor.predict_interval` call of
records answered as columns, which answers each group as a call of its own would (the test
suite checks that batched and single answers are equal). A lone request is never delayed: it
runs at once. Requests whose client has gone are dropped from the queue before their call.
Rows reach the batch with their JSON types already checked (the typed rows of
`serving/rows.py`); when a combined call still fails on a row, that row's request alone gets
the error and the others are answered by one more call, so a few bad requests never turn a
batch into one call per request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from starlette.concurrency import run_in_threadpool

from perfcast.errors import ContractError
from perfcast.predictor.base import Columns
from perfcast.predictor.tasks import TASK_SPECS
from perfcast.serving.models import ServedModels
from perfcast.serving.settings import MAX_ROWS

BATCHED_TASKS = tuple(name for name, spec in TASK_SPECS.items() if spec.batched)
# Up to this many rows a call runs on the event loop: a few rows' prediction (~1 ms) costs
# less than the hop to a worker thread and back, and both hold the one GIL anyway.
INLINE_ROWS = 32

Rows = list[Mapping[str, object]]  # a request's rows, as parsed JSON objects


@dataclass
class _Item:
    rows: Rows
    future: asyncio.Future
    gone: Callable[[], Awaitable[bool]] | None


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
        self.dropped = 0  # requests dropped because their client had gone

    async def predict(
        self,
        task: str,
        rows: Rows,
        gone: Callable[[], Awaitable[bool]] | None = None,
    ) -> Columns:
        """Predictions for `rows`; `gone()` answers whether the client has left."""
        if task not in self.tasks:
            self.calls += 1
            return await run_in_threadpool(self.models.predict, task, rows, columns=True)
        key = (task, frozenset().union(*rows))
        future = asyncio.get_running_loop().create_future()
        self._pending.setdefault(key, []).append(_Item(rows, future, gone))
        if key not in self._draining:
            self._draining[key] = asyncio.create_task(self._drain(key))
        return await future

    async def _drain(self, key: tuple) -> None:
        try:
            queue = self._pending[key]
            while queue:
                batch = [queue.pop(0)]
                size = len(batch[0].rows)
                while queue and size + len(queue[0].rows) <= self.max_rows:
                    size += len(queue[0].rows)
                    batch.append(queue.pop(0))
                batch = await self._still_wanted(batch)
                if batch:
                    await self._answer(key[0], batch)
        finally:
            # no await since the last emptiness check: nothing can have been queued meanwhile
            del self._draining[key]

    async def _still_wanted(self, batch: list[_Item]) -> list[_Item]:
        wanted = []
        for item in batch:
            if item.future.done() or (item.gone is not None and await item.gone()):
                self.dropped += 1
                item.future.cancel()
                continue
            wanted.append(item)
        return wanted

    async def _answer(self, task: str, batch: list[_Item]) -> None:
        while batch:
            try:
                self.calls += 1
                requests = [i.rows for i in batch]
                inline = sum(map(len, requests)) <= INLINE_ROWS
                if inline:
                    out = self._predict_all(task, requests)
                else:
                    out = await run_in_threadpool(self._predict_all, task, requests)
            except Exception as err:
                culprit = _owner(batch, err)
                if culprit is None:  # no row named: each request alone finds its own error
                    if len(batch) == 1:
                        _settle(batch[0].future, error=err)
                    else:
                        for item in batch:
                            await self._answer(task, [item])
                    return
                _settle(batch[culprit].future, error=_shifted(err, batch, culprit))
                batch = batch[:culprit] + batch[culprit + 1 :]
                continue
            for item, part in zip(batch, out, strict=True):
                _settle(item.future, result=part)
            if inline:  # answered first, then let the loop read what arrived meanwhile
                await asyncio.sleep(0)
            return

    def _predict_all(self, task: str, requests: list[Rows]) -> list[Columns]:
        if len(requests) == 1:
            return [self.models.predict(task, requests[0], columns=True)]
        rows = [row for request in requests for row in request]
        groups = [i for i, request in enumerate(requests) for _ in request]
        out = self.models.predict(task, rows, groups, columns=True)
        parts, start = [], 0
        for request in requests:
            stop = start + len(request)
            parts.append({name: column[start:stop] for name, column in out.items()})
            start = stop
        return parts


def _owner(batch: list[_Item], err: Exception) -> int | None:
    """Index of the request whose row a combined call's ContractError names, if it names one."""
    if not isinstance(err, ContractError) or err.row is None:
        return None
    start = 0
    for i, item in enumerate(batch):
        if err.row <= start + len(item.rows):
            return i
        start += len(item.rows)
    return None


def _shifted(err: Exception, batch: list[_Item], culprit: int) -> Exception:
    """The error as that request alone would have had it: its row counted within it."""
    if len(batch) == 1 or not isinstance(err, ContractError):
        return err
    offset = sum(len(item.rows) for item in batch[:culprit])
    row = err.row - offset
    message = str(err).split("\n")[0].split(": ", 1)[-1]  # drop "row N, column 'x'" (batch rows)
    return ContractError(message, row=row, column=err.column)


def _settle(
    future: asyncio.Future, result: Columns | None = None, error: Exception | None = None
) -> None:
    if future.done():  # the client went away
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
