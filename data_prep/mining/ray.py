"""``data_prep mine --ray``: each shard a Ray task; the driver keeps the index, the spool and the writes.

The driver builds (or reuses) the index, spools the queries and checks the run as without Ray.
Each unfinished shard then goes to a task with its queries (the spool's lines) and the index's
location: the index folder, which every node must see, or with ``--ray-ship-index`` the folder's
files in Ray's object store, written once per node to a temporary folder. A worker process keeps
the index it opened (and the dense model) for its next shards. It returns the shard's lines and
stats; the driver writes them atomically, as the one-process run does, so a rerun after a kill of
the driver runs only the shards not yet written, and the merge is the one-process run's, byte for
byte (a query's negatives depend on nothing but the query, the index and the settings).
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import logging
import os
import shutil
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import numpy as np
from tqdm.auto import tqdm

from ..cluster import RayOptions, connect, n_workers, remote, run_tasks
from ..io import atomic_write, write_json

logger = logging.getLogger(__name__)

_CACHE: dict[str, Any] = {}  # per worker process: the open index and dense model of the job


def default_num_shards(out: Path, opts: RayOptions) -> int:
    """Shards of a Ray run without ``--num-shards``: the count of the run being resumed in
    ``out``, else four per worker (so that a slow or retried shard does not hold the job)."""
    run = out / "run.json"
    if run.exists():
        n = json.loads(run.read_text()).get("params", {}).get("num_shards")
        if n:
            return int(n)
    return 4 * n_workers(connect(opts), opts)


def _index_files(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def _materialise(key: str, ref) -> Path:
    """The shipped index as a folder of this node (written once, renamed into place)."""
    import ray

    target = Path(tempfile.gettempdir()) / f"crag-ray-index-{key}"
    if not (target / "index.json").exists():
        tmp = Path(tempfile.mkdtemp(prefix=f".crag-ray-index-{key}-", dir=target.parent))
        for rel, data in ray.get(ref).items():
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp / rel).write_bytes(data)
        try:
            os.replace(tmp, target)
        except OSError:  # another worker of this node was first
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def _mine_task(where: tuple, backend: str, cfg, lines: bytes) -> tuple[bytes, dict[str, Any]]:
    """One shard in a worker: ``where`` is ``("dir", path)`` or ``("shipped", key, ref)``."""
    from ..bm25 import load_index
    from ..records import QueryExample
    from .run import mine_shard

    key = where[1]
    if _CACHE.get("index_key") != key:
        path = Path(where[1]) if where[0] == "dir" else _materialise(where[1], where[2])
        _CACHE["index"] = load_index(path, backend=backend)
        _CACHE["index_key"] = key
    index = _CACHE["index"]
    index.engine.set_backend(backend)
    encoder = None
    if cfg.dense_model is not None:
        if _CACHE.get("dense_key") != (cfg.dense_model, cfg.dense_batch_size):
            from ..dense import DenseEncoder

            _CACHE["dense"] = DenseEncoder(None if cfg.dense_model == "default" else cfg.dense_model,
                                           batch_size=cfg.dense_batch_size)
            _CACHE["dense_key"] = (cfg.dense_model, cfg.dense_batch_size)
        encoder = _CACHE["dense"]
    queries = (QueryExample.from_dict(json.loads(line)) for line in lines.splitlines())
    timings: Counter = Counter()
    f = io.StringIO()
    import time

    t0 = time.perf_counter()
    stats = mine_shard(f, queries, index, cfg, encoder, timings)
    stats["timings"]["total_s"] = round(time.perf_counter() - t0, 3)
    return f.getvalue().encode("utf-8"), stats


def run_shards(out: Path, work: Path, index, cfg, todo: list[int], n_queries: int, backend: str, opts: RayOptions,
               on_shard_done: Callable[[int], None] | None = None) -> None:
    """Run shards ``todo`` as Ray tasks; the driver writes each as it finishes (one bar for all)."""
    from .run import shard_bounds, shard_paths

    ray = connect(opts)
    if backend == "pruned":
        _ = index.engine.blocks  # written once by the driver, not raced by the workers
    if opts.ship_index:
        files = _index_files(index.dir)
        key = hashlib.sha256(json.dumps(sorted((k, len(v)) for k, v in files.items())).encode()
                             + index.corpus_sha256.encode()).hexdigest()[:16]
        where: tuple = ("shipped", key, ray.put(files))
        del files
        logger.info("index %s shipped through the object store", index.dir)
    else:
        where = ("dir", str(Path(index.dir).resolve()))
    wcfg = dataclasses.replace(cfg, show_progress=False, n_threads=1)
    task = remote(_mine_task, num_cpus=1, num_gpus=opts.gpus_per_worker)
    offsets = np.load(work / "queries.offsets.npy", mmap_mode="r")
    sizes = {i: shard_bounds(n_queries, cfg.num_shards, i) for i in todo}
    bar = tqdm(total=sum(hi - lo for lo, hi in sizes.values()), desc=f"Mine {len(todo)} shards on Ray",
               unit=" queries", disable=not cfg.show_progress)

    def calls():
        with open(work / "queries.jsonl", "rb") as f:
            for i in todo:
                lo, hi = sizes[i]
                f.seek(int(offsets[lo]))
                yield i, (where, backend, wcfg, f.read(int(offsets[hi]) - int(offsets[lo])))

    def done(i: int, result: tuple[bytes, dict[str, Any]]) -> None:
        data, stats = result
        data_path, stats_path = shard_paths(out, i, cfg.num_shards)
        with atomic_write(data_path, "wb") as f:
            f.write(data)
        lo, hi = sizes[i]
        write_json(stats_path, {"shard": i, "queries": [lo, hi], **stats})
        bar.update(hi - lo)
        if on_shard_done is not None:
            on_shard_done(i)

    try:
        run_tasks(task, calls(), done, max_in_flight=2 * n_workers(ray, opts) + 2)
    finally:
        bar.close()
