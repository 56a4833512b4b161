"""Ray for the data jobs: the ``--ray ADDRESS`` options, the connection, and tasks run to the end.

``data_prep mine``, ``inference score``, ``training.distill`` and ``pipeline index`` take

    --ray auto | ray://HOST:PORT | local   [--ray-workers N] [--ray-gpus-per-worker G]

- ``auto``: the cluster this machine belongs to (``ray start --head`` on one node,
  ``ray start --address HEAD:6379`` on the others; on KubeRay, the pod's cluster);
- ``ray://HOST:PORT``: a remote cluster through Ray Client;
- ``local``: a cluster started on this machine for the job, with ``--ray-workers`` CPUs.

Without ``--ray`` nothing changes and Ray is not imported (it lives in the ``ray`` extra). The
driver (the process you start) stays the only writer of the output: workers return their results
and the driver writes them, so an output lock held by the driver covers the whole job, and a killed
worker never leaves half a file. Every node needs this package installed (the same version), and
the input paths that workers read (an index folder, an export) must be visible to them, unless an
option ships the data through Ray's object store (``mine --ray-ship-index``).

A worker process that dies (``kill -9``, out of memory, a node that leaves) is retried by Ray
(tasks: ``max_retries``; actors: restarted and their calls retried); an error raised by our code
in a worker is not retried: it reaches the driver as the error itself, not as a Ray stack.
"""

from __future__ import annotations

import argparse
import logging
import os
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

logger = logging.getLogger(__name__)

ADDRESS_HELP = ("run on a Ray cluster: auto (the cluster of `ray start`), ray://HOST:PORT (Ray Client) or local "
                "(a cluster on this machine for the job); needs pip install 'crag-evaluators[ray]'")
MAX_RETRIES = 3  # a worker process lost this many times on one task fails the job


@dataclass(frozen=True)
class RayOptions:
    address: str
    workers: int | None = None  # local: the cluster's CPUs; else: the number of workers (actors) to use
    gpus_per_worker: float = 0.0
    ship_index: bool = False

    def __post_init__(self) -> None:
        if not (self.address in ("auto", "local") or self.address.startswith("ray://")):
            raise ValueError(f"--ray must be auto, local or ray://HOST:PORT, got {self.address!r}")
        if self.workers is not None and self.workers < 1:
            raise ValueError(f"--ray-workers must be >= 1, got {self.workers}")
        if self.gpus_per_worker < 0:
            raise ValueError(f"--ray-gpus-per-worker must be >= 0, got {self.gpus_per_worker}")


def add_ray_args(parser: argparse.ArgumentParser | Any, ship_index: bool = False) -> None:
    """The ``--ray`` options of a command (``ship_index``: ``mine``'s ``--ray-ship-index`` too)."""
    parser.add_argument("--ray", metavar="ADDRESS", default=None, help=ADDRESS_HELP)
    parser.add_argument("--ray-workers", type=int, default=None,
                        help="with --ray: workers (local: the CPUs of the cluster started; default: the cluster's CPUs, "
                        "or its GPUs / --ray-gpus-per-worker)")
    parser.add_argument("--ray-gpus-per-worker", type=float, default=0.0,
                        help="with --ray: GPUs each worker reserves (e.g. 1, or 0.5 to put two on one GPU)")
    if ship_index:
        parser.add_argument("--ray-ship-index", action="store_true",
                            help="with --ray: send the index to the workers through Ray's object store (clusters "
                            "with no disk shared by all nodes); else workers read it from --index-dir")


def ray_options(args: argparse.Namespace) -> RayOptions | None:
    """The command's :class:`RayOptions`, or None without ``--ray`` (then the other Ray flags are refused)."""
    if getattr(args, "ray", None) is None:
        extra = [f for f, v in (("--ray-workers", args.ray_workers), ("--ray-gpus-per-worker", args.ray_gpus_per_worker),
                                ("--ray-ship-index", getattr(args, "ray_ship_index", False))) if v]
        if extra:
            raise ValueError(f"{', '.join(extra)} need --ray ADDRESS")
        return None
    return RayOptions(args.ray, args.ray_workers, args.ray_gpus_per_worker, bool(getattr(args, "ray_ship_index", False)))


def import_ray():
    try:
        import ray
    except ImportError:
        raise ValueError("--ray needs Ray: pip install 'crag-evaluators[ray]' (on every node of the cluster)") from None
    return ray


def connect(opts: RayOptions):
    """Connect to (or start) the cluster of ``opts``; returns the ``ray`` module. An existing
    connection of this process is reused (a test's cluster, a notebook's ``ray.init``)."""
    ray = import_ray()
    if ray.is_initialized():
        return ray
    quiet = {"include_dashboard": False, "logging_level": logging.WARNING, "log_to_driver": True}
    # the workers of a local cluster inherit this environment; on `ray start` clusters they have the nodes'
    env = {k: v for k, v in os.environ.items() if k.startswith(("HF_", "TRANSFORMERS_", "TOKENIZERS_"))}
    runtime_env = {"env_vars": env} if env else None
    try:
        if opts.address == "local":
            ray.init(address="local", num_cpus=opts.workers or os.cpu_count() or 1, runtime_env=runtime_env, **quiet)
        else:
            ray.init(address=opts.address, runtime_env=runtime_env, **quiet)
    except ConnectionError as e:
        how = ("start one with `ray start --head` (and `ray start --address HEAD:6379` on the other nodes), or use "
               "--ray local" if opts.address == "auto" else "check the address and that the head runs Ray Client")
        how += ("; a cluster with token authentication needs its token here too (RAY_AUTH_TOKEN, or the file "
                "`ray get-auth-token` reads)")
        raise ValueError(f"--ray {opts.address}: no Ray cluster to connect to ({e}); {how}") from None
    resources = ray.cluster_resources()
    logger.info("Ray cluster: %d node(s), %g CPU, %g GPU", len([n for n in ray.nodes() if n.get("Alive")]),
                resources.get("CPU", 0), resources.get("GPU", 0))
    return ray


def n_workers(ray, opts: RayOptions, cpus_per_worker: float = 1.0) -> int:
    """How many workers to run: ``--ray-workers``, else what the cluster's CPUs (or GPUs) hold."""
    if opts.workers is not None:
        return opts.workers
    res = ray.cluster_resources()
    if opts.gpus_per_worker:
        return max(1, int(res.get("GPU", 0) // opts.gpus_per_worker))
    return max(1, int(res.get("CPU", 1) // cpus_per_worker))


def worker_error(e: BaseException) -> BaseException:
    """The error our code raised in a worker, out of Ray's wrappers (RayTaskError, Ray Data's
    UserCodeException); a lost worker or node past its retries stays Ray's own error."""
    ray = import_ray()
    seen = set()
    while id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, ray.exceptions.RayTaskError):
            cause = getattr(e, "cause", None)
            if cause is None or cause is e:
                return e
            e = cause
            continue
        nxt = e.__cause__
        if nxt is not None and type(e).__module__.startswith("ray."):
            e = nxt
            continue
        return e
    return e


def run_tasks(remote_fn, calls: Iterable[tuple[Any, tuple]], on_done: Callable[[Any, Any], None],
              max_in_flight: int | None = None) -> None:
    """Submit ``remote_fn.remote(*args)`` for each ``(key, args)`` of ``calls`` and call
    ``on_done(key, result)`` on the driver as each finishes (in finishing order), keeping at most
    ``max_in_flight`` tasks queued. A task whose worker died is retried by Ray; our code's error is
    raised here as itself (:func:`worker_error`) and the tasks still running are cancelled."""
    ray = import_ray()
    pending: dict[Any, Any] = {}
    calls = iter(calls)

    def fill() -> None:
        while max_in_flight is None or len(pending) < max_in_flight:
            try:
                key, args = next(calls)
            except StopIteration:
                return
            pending[remote_fn.remote(*args)] = key

    fill()
    try:
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            ref = done[0]
            key = pending.pop(ref)
            try:
                result = ray.get(ref)
            except Exception as e:  # noqa: BLE001 - re-raised as the worker's own error
                err = worker_error(e)
                if err is e:
                    raise
                raise err from None
            on_done(key, result)
            fill()
    finally:
        for ref in pending:
            ray.cancel(ref, force=True)


def remote(fn: Callable, num_cpus: float = 1.0, num_gpus: float = 0.0):
    """``fn`` as a Ray task retried when its worker dies (never on our code's errors)."""
    ray = import_ray()
    return ray.remote(num_cpus=num_cpus, num_gpus=num_gpus, max_retries=MAX_RETRIES, retry_exceptions=False)(fn)


def map_batches_ordered(ray, blocks: list, actor_cls, n: int, opts: RayOptions, fn_constructor_args: tuple = (),
                        cpus_per_worker: float = 1.0) -> Iterator[dict]:
    """Ray Data over ``blocks`` (``ray.put`` Arrow tables, in order) through an actor pool of ``n``
    ``actor_cls`` (each built once: it loads its model once), one output batch per input block, in
    the input order. Actors that die are restarted and their batches run again."""
    import ray.data

    ctx = ray.data.DataContext.get_current()
    ctx.execution_options.preserve_order = True
    ctx.enable_progress_bars = False
    ctx.print_on_execution_start = False
    ds = ray.data.from_arrow_refs(blocks).map_batches(
        actor_cls, fn_constructor_args=fn_constructor_args, batch_size=None, batch_format="pyarrow",
        compute=ray.data.ActorPoolStrategy(size=n), num_cpus=cpus_per_worker, num_gpus=opts.gpus_per_worker or None,
    )  # (Ray Data's actors restart without limit and retry their batches: its default, kept)
    try:
        yield from ds.iter_batches(batch_size=None, batch_format="pyarrow")
    except Exception as e:  # noqa: BLE001
        err = worker_error(e)
        if err is e:
            raise
        raise err from None
