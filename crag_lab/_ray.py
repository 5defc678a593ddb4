"""Joining or starting Ray, shared by the Ray executor and the Ray Data index build.

Nothing here imports Ray at module level: `import_ray` does, when a run or a build asks for it, and
says how to install it when it is missing. `init_ray` joins the cluster a user named (or
``RAY_ADDRESS``), else starts a local Ray, and turns "no cluster answers there" into a
`RayUnavailableError` that names the address.

>>> is_ray_address("ray://head:10001"), is_ray_address("http://head")
(True, False)
"""

from __future__ import annotations

import os
import re
from typing import Any

from crag_lab.errors import RayUnavailableError

INSTALL_HINT = "pip install 'crag-lab[scale]' (or: pip install 'ray[data]')"
ADDRESS_FORMS = "'auto', 'ray://HOST:10001', 'HOST:6379'"
_ADDRESS = re.compile(r"^(auto|local|ray://\S+|[\w.\-]+:\d+)$")


def is_ray_address(spec: str) -> bool:
    """Whether ``spec`` is written like a Ray address: ``auto``, ``local``, ``ray://HOST:PORT`` or ``HOST:PORT``."""
    return bool(_ADDRESS.match(spec))


def import_ray(purpose: str) -> Any:
    """The ``ray`` module, or an ``ImportError`` saying that ``purpose`` needs it and how to install it."""
    try:
        import ray
    except ImportError as exc:
        raise ImportError(f"{purpose} needs Ray: {INSTALL_HINT}") from exc
    return ray


def init_ray(purpose: str, address: str | None, *, num_cpus: int | None = None) -> bool:
    """Join ``address`` (None: ``RAY_ADDRESS``, else a new local Ray with ``num_cpus``); True if this call
    started or joined Ray, False if this process already had it (then it is used as it is).

    A cluster that does not answer raises `RayUnavailableError` naming the address.
    """
    ray = import_ray(purpose)
    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS")
    try:
        if address in (None, "local"):
            ray.init(include_dashboard=False, num_cpus=num_cpus)
        else:
            ray.init(address=address)
    except ConnectionError as exc:
        raise RayUnavailableError(
            f"{purpose}: no Ray cluster answers at {address!r} ({type(exc).__name__}: {exc}); start one there "
            f"(`ray start --head`), fix the address or RAY_ADDRESS ({ADDRESS_FORMS}), or give no address for a "
            "local Ray on this machine") from exc
    return True


def threads_if_this_machine(workers: int) -> int | None:
    """The torch threads each of ``workers`` Ray workers should run: this process's when the joined Ray cluster
    is this machine alone and that many workers on that many threads fit its cores, else None (Ray's own: a
    worker given one CPU runs one thread).

    MiniLM's output depends in the last float digits on how many threads share a matrix product (on
    some CPUs). Workers that run the driver's thread count give the driver's floats: a Ray build writes
    the local build's bytes, a Ray run the local run's records (`crag_lab.ray_index.EmbedBatches`,
    `crag_lab.ray_executor.LabWorker`). More workers than that would oversubscribe the cores (two
    workers on two threads each ran at 0.67× one worker on two cores), so they keep one thread each,
    as workers on a cluster of other machines do, and their floats agree with the driver's to rounding.
    """
    import torch

    ray = import_ray("a Ray run or build")
    alive = [node["NodeID"] for node in ray.nodes() if node.get("Alive")]
    threads = int(torch.get_num_threads())
    if alive != [ray.get_runtime_context().get_node_id()] or workers * threads > (os.cpu_count() or 1):
        return None
    return threads
