"""Answer a query set on a Ray cluster: a pool of actors, each holding one lab, answering shards.

Nothing here imports Ray until a run asks for it (``executor="ray"``), so the default, local path
never loads it. `RayExecutor` starts (or joins) Ray, creates ``workers`` actors, and each actor
rebuilds the driver's lab once from its `crag_lab.lab.LabRecipe` (the same folder, config and
model: `Lab.from_directory` reloads the persisted index and embeds nothing). Questions go out in
small shards through Ray's ``ActorPool``; records come back as each shard finishes and
`crag_lab.journal.run_rows` writes them to the run's journal and puts them back in dataset order.

Faults are Ray's: actors are created with ``max_restarts`` and ``max_task_retries``, so a worker
that dies (killed, out of memory, its node lost) is restarted, rebuilds its lab, and the shard it
held is asked again. A run that is interrupted keeps every finished shard in its journal; run it
again with the same journal and only the missing questions are asked.

Threshold sweeps (`crag_lab.replay.frontier.frontier` with ``executor=``) shard the grid's settings
instead: the compiled rounds go into Ray's object store once, each worker replays a contiguous block
of settings, and the blocks are joined in grid order, equal entry for entry to a local sweep. They
run on the executor's actors when it has some (which hold the cluster's CPUs), else as Ray tasks
(retried when their worker dies).

>>> from crag_lab.ray_executor import resolve_executor
>>> resolve_executor("ray://head:10001").address
'ray://head:10001'
"""

from __future__ import annotations

import math
import os
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

from crag_lab._ray import ADDRESS_FORMS, import_ray, init_ray, is_ray_address, threads_if_this_machine
from crag_lab.config import CragConfig
from crag_lab.journal import AnswerMany
from crag_lab.records import Mode, QueryRecord, QueryRow

__all__ = ["Executor", "RayExecutor", "resolve_executor", "sweep_settings"]



class Executor(Protocol):
    """Where `Lab.run` answers the questions a journal lacks (see `crag_lab.journal.AnswerMany`)."""

    def answer_many(self, lab: Any, *, config: CragConfig, mode: Mode, shadow_grading: bool) -> AnswerMany: ...


def resolve_executor(spec: Executor | str) -> Executor:
    """An executor from what a user wrote: ``"ray"``, a Ray address, or an executor object.

    ``"ray"`` joins the cluster named by ``RAY_ADDRESS`` or starts a local Ray; an address
    (``"auto"``, ``"ray://head:10001"``, ``"10.0.0.5:6379"``) joins that cluster.

    >>> resolve_executor("ray").address is None
    True
    >>> resolve_executor("threads")
    Traceback (most recent call last):
    ...
    ValueError: unknown executor 'threads'; use 'ray', a Ray address ('auto', 'ray://HOST:10001', 'HOST:6379') or a RayExecutor
    """
    if not isinstance(spec, str):
        if not callable(getattr(spec, "answer_many", None)):
            raise TypeError(f"an executor needs an answer_many method; got {type(spec).__name__}")
        return spec
    if spec == "ray":
        return RayExecutor()
    if is_ray_address(spec):
        return RayExecutor(address=spec)
    raise ValueError(f"unknown executor {spec!r}; use 'ray', a Ray address ({ADDRESS_FORMS}) or a RayExecutor")


def _ray() -> Any:
    return import_ray("executor='ray'")


class LabWorker:
    """What each Ray actor holds: one lab, built once, answering shards of questions."""

    def __init__(self, recipe: Callable[[], Any], threads: int | None = None) -> None:
        if threads is not None:  # the driver's torch threads: same machine, same thread count, same records
            import torch

            torch.set_num_threads(threads)
        self.lab = recipe()
        self.answered: list[str] = []

    def answer(self, rows: Sequence[QueryRow], config: CragConfig, mode: Mode, shadow_grading: bool) -> list[QueryRecord]:
        records = [self.lab.record(row, config=config, mode=mode, shadow_grading=shadow_grading) for row in rows]
        self.answered += [row["id"] for row in rows]
        return records

    def status(self) -> dict[str, Any]:
        """This worker's process id, its torch threads and the ids it answered since it (re)started."""
        import torch

        return {"pid": os.getpid(), "threads": int(torch.get_num_threads()), "answered": list(self.answered)}

    def replay(self, rounds: Any, settings: Any) -> dict[str, Any]:
        """A block of a threshold sweep (`replay_block`); the lab is not needed for it."""
        return replay_block(rounds, settings)


def replay_block(rounds: Any, settings: Any) -> dict[str, Any]:
    """`crag_lab.replay._frontier.FrontierRounds.replay` of one block of settings, on a worker."""
    return dict(rounds.replay(settings))


def sweep_settings(executor: Executor | str, rounds: Any, settings: Any) -> dict[str, Any]:
    """A threshold sweep's per (setting, query) arrays, computed by ``executor`` (see `RayExecutor.replay_settings`)."""
    resolved = resolve_executor(executor)
    replay = getattr(resolved, "replay_settings", None)
    if replay is None:
        raise TypeError(f"{type(resolved).__name__} cannot run threshold sweeps (it has no replay_settings method)")
    if isinstance(executor, str):  # made here, so closed here: Ray stops again if this call started it
        with resolved:  # type: ignore[attr-defined]
            return dict(replay(rounds, settings))
    return dict(replay(rounds, settings))


class RayExecutor:
    """Shards questions over a pool of Ray actors, each holding the lab rebuilt from its recipe.

    Parameters
    ----------
    address
        A Ray cluster to join (``"auto"``, ``"ray://head:10001"``, ``"head:6379"``); None joins the
        one in ``RAY_ADDRESS`` or starts a local Ray. If Ray is already initialised in this
        process, that is used as it is.
    workers
        Actors in the pool, one CPU each; default every CPU the cluster has.
    shard_size
        Questions per task; default about a quarter of an even share per worker, at most 16 (small
        shards balance the load and lose little when a worker dies).
    max_restarts, max_task_retries
        Ray's fault tolerance: how often a dead actor is restarted and its task asked again.

    The actors live until `close` (or the end of a ``with`` block), so several runs over the same
    lab (modes, configs) share them and the index is loaded once per worker.

    >>> with RayExecutor(workers=2) as ray_pool:  # doctest: +SKIP
    ...     exp = lab.run(questions, executor=ray_pool)
    """

    def __init__(self, address: str | None = None, *, workers: int | None = None, shard_size: int | None = None,
                 max_restarts: int = 3, max_task_retries: int = 3) -> None:
        if workers is not None and workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if shard_size is not None and shard_size < 1:
            raise ValueError(f"shard_size must be >= 1, got {shard_size}")
        self.address = address
        self.workers = workers
        self.shard_size = shard_size
        self.max_restarts = max_restarts
        self.max_task_retries = max_task_retries
        self.actors: list[Any] = []
        self._recipe: Any = None
        self._started_ray = False

    def __repr__(self) -> str:
        return f"RayExecutor(address={self.address!r}, workers={self.workers!r}, actors={len(self.actors)})"

    def __enter__(self) -> RayExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Join or start Ray (nothing if this process already did); `RayUnavailableError` if no cluster answers."""
        if init_ray("executor='ray'", self.address, num_cpus=self.workers):
            self._started_ray = True

    def pool(self, recipe: Callable[[], Any]) -> list[Any]:
        """The actors for ``recipe``, created (each building its lab) on first use or when the recipe changes."""
        if self.actors and recipe == self._recipe:
            return self.actors
        self.stop_actors()
        self.start()
        ray = _ray()
        count = self.workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
        remote = ray.remote(LabWorker).options(num_cpus=1, max_restarts=self.max_restarts,
                                               max_task_retries=self.max_task_retries)
        threads = threads_if_this_machine(count)  # the driver's, where they fit this machine alone (see there)
        self.actors = [remote.remote(recipe, threads) for _ in range(count)]
        self._recipe = recipe
        return self.actors

    def answer_many(self, lab: Any, *, config: CragConfig, mode: Mode, shadow_grading: bool) -> AnswerMany:
        """`AnswerMany` for ``lab``'s questions, on the actor pool (see `crag_lab.journal.run_rows`)."""
        recipe = getattr(lab, "recipe", None)
        if recipe is None:
            raise ValueError("the Ray executor rebuilds the lab on every worker from its folder: make the lab with "
                             "Lab.from_directory(...) (a lab built from tools in memory cannot be sent)")

        def answer_many(todo: Sequence[QueryRow], stop: Callable[[], bool]) -> Iterator[QueryRecord]:
            if not todo:
                return
            from ray.util import ActorPool

            actors = self.pool(recipe)
            size = self.shard_size or max(1, min(16, math.ceil(len(todo) / (4 * len(actors)))))
            shards = deque(list(todo[i:i + size]) for i in range(0, len(todo), size))
            pool = ActorPool(actors)

            def submit() -> None:
                while shards and pool.has_free() and not stop():
                    pool.submit(lambda actor, shard: actor.answer.remote(shard, config, mode, shadow_grading),
                                shards.popleft())

            submit()
            while pool.has_next():
                yield from pool.get_next_unordered()
                submit()

        return answer_many

    def replay_settings(self, rounds: Any, settings: Any, *, blocks: int | None = None) -> dict[str, Any]:
        """Replay ``rounds`` (`crag_lab.replay._frontier.FrontierRounds`) at every one of ``settings``.

        The settings are cut into ``blocks`` contiguous blocks (default four per worker, so a slow
        worker does not hold the rest back) and replayed in parallel: on this executor's actors when
        it has a pool (they hold the cluster's CPUs), else as Ray tasks of one CPU each, retried
        ``max_task_retries`` times when their worker dies. Returns the arrays of a local replay,
        rows in the order of ``settings``.
        """
        import numpy as np

        self.start()
        ray = _ray()
        workers = len(self.actors) or self.workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
        count = max(1, min(len(settings), blocks or 4 * workers))
        parts = [part for part in np.array_split(np.arange(len(settings)), count) if len(part)]
        if not parts:
            return dict(rounds.replay(settings))
        shared = ray.put(rounds)
        if self.actors:
            from ray.util import ActorPool

            pool = ActorPool(self.actors)
            results = list(pool.map(lambda actor, rows: actor.replay.remote(shared, settings.take(rows)), parts))
        else:
            task = ray.remote(replay_block).options(num_cpus=1, max_retries=self.max_task_retries)
            results = ray.get([task.remote(shared, settings.take(rows)) for rows in parts])
        return {name: np.concatenate([r[name] for r in results], axis=0) for name in results[0]}

    def status(self) -> list[dict[str, Any]]:
        """Each actor's `LabWorker.status`: its process id (a new one after a restart) and the ids it answered."""
        return list(_ray().get([actor.status.remote() for actor in self.actors]))

    def stop_actors(self) -> None:
        if self.actors:
            ray = _ray()
            for actor in self.actors:
                ray.kill(actor, no_restart=True)
        self.actors, self._recipe = [], None

    def close(self) -> None:
        """Stop the actors, and Ray itself if this executor started it."""
        self.stop_actors()
        if self._started_ray:
            _ray().shutdown()
            self._started_ray = False
