"""The data jobs on a Ray cluster: a local cluster of two nodes of one CPU each (Ray's own
``ray.cluster_utils.Cluster``), outputs equal to the one-process runs, worker kills and a node
that leaves survived. ``make test`` runs the small end-to-end case; the rest is ``slow``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")
psutil = pytest.importorskip("psutil")

from data_prep.cluster import RayOptions  # noqa: E402
from data_prep.mining import MiningConfig, run_mining  # noqa: E402
from data_prep.readers import Source  # noqa: E402
from data_prep.records import Passage, QueryExample  # noqa: E402
from tests.conftest import NQ_SAMPLE, nq_rows  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def cluster():
    """Two nodes of one CPU each; this process is the driver (``--ray auto`` reuses it)."""
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    c.add_node(num_cpus=1)
    c.wait_for_nodes()
    ray.init(address=c.address, include_dashboard=False, logging_level="WARNING")
    yield c
    ray.shutdown()
    c.shutdown()


def _nq(n: int) -> tuple[list[Passage], list[QueryExample]]:
    passages, queries, by_text = [], [], {}
    for i, r in enumerate(nq_rows(n)):
        c = r["ctxs"][0]
        if c["text"] not in by_text:
            by_text[c["text"]] = Passage(id=f"p{len(passages)}", title=c["title"], text=c["text"])
            passages.append(by_text[c["text"]])
        queries.append(QueryExample(id=f"q{i}", query=r["question"], positives=[by_text[c["text"]]], answers=r["answers"]))
    return passages, queries


def _source(data) -> Source:
    passages, queries = data
    return Source(name="test", corpus=lambda: iter(passages), queries=lambda: iter(queries))


def _cfg(**kw) -> MiningConfig:
    base = dict(depth=40, window=(2, 40), negatives=4, show_progress=False, batch_size=16)
    base.update(kw)
    return MiningConfig(**base)


def _scores(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _pairs_file(tmp_path: Path, n_queries: int = 60) -> Path:
    from tests.training_data import make_evaluator_data

    return make_evaluator_data(tmp_path / "pairs", n_queries=n_queries, n_dev=10)["train_pairs"]


def _assert_same_scores(a: Path, b: Path) -> None:
    ra, rb = _scores(a), _scores(b)
    assert len(ra) == len(rb) > 0
    for x, y in zip(ra, rb):
        assert (x["index"], x["query_id"], x["passage_id"], x["action"]) == (y["index"], y["query_id"], y["passage_id"],
                                                                            y["action"])
        assert abs(x["score"] - y["score"]) <= 1e-6 and abs(x["raw_score"] - y["raw_score"]) <= 1e-6


def test_mine_and_score_on_two_nodes_equal_one_process(cluster, tmp_path, ce_export):
    """The small end-to-end case of ``make test``: mining (shards as tasks over both nodes) and
    scoring (an actor pool of two) equal the one-process runs."""
    from inference.cli import main as inference_main

    data = _nq(150)
    run_mining(_source(data), tmp_path / "one", _cfg())
    meta = run_mining(_source(data), tmp_path / "ray", _cfg(num_shards=5), ray=RayOptions("auto"))
    assert meta["counts"]["queries"] == 150
    assert (tmp_path / "ray" / "examples.jsonl").read_bytes() == (tmp_path / "one" / "examples.jsonl").read_bytes()
    stats = [json.loads(p.read_text()) for p in sorted((tmp_path / "ray" / "shards").glob("*.stats.json"))]
    assert [s["queries"] for s in stats] == [[0, 30], [30, 60], [60, 90], [90, 120], [120, 150]]

    pairs = _pairs_file(tmp_path)
    base = ["score", "--model", str(ce_export), "--input", str(pairs), "--no-progress"]
    assert inference_main(base + ["--output", str(tmp_path / "one.jsonl")]) == 0
    assert inference_main(base + ["--output", str(tmp_path / "ray.jsonl"), "--ray", "auto", "--ray-workers", "2"]) == 0
    _assert_same_scores(tmp_path / "one.jsonl", tmp_path / "ray.jsonl")
    m1 = json.loads((tmp_path / "one.jsonl.meta.json").read_text())
    m2 = json.loads((tmp_path / "ray.jsonl.meta.json").read_text())
    assert m1["actions"] == m2["actions"] and m1["passages_truncated"] == m2["passages_truncated"]


def test_ray_flags_need_ray_and_lucene_is_refused(tmp_path):
    from data_prep.cli import main

    base = ["mine", "--format", "nq-open", "--input", str(NQ_SAMPLE), "--output", str(tmp_path / "m"), "--no-progress"]
    assert main(base + ["--ray-workers", "2"]) == 2
    assert main(base + ["--ray", "nowhere"]) == 2
    with pytest.raises(ValueError, match="bm25s engine"):
        run_mining(_source(_nq(20)), tmp_path / "r", _cfg(engine="rank-bm25"), ray=RayOptions("auto"))


@pytest.mark.slow
def test_worker_error_is_the_error_not_a_ray_stack(cluster, tmp_path):
    from data_prep.cluster import remote, run_tasks

    def fails(x):
        raise ValueError(f"bad row {x}")

    with pytest.raises(ValueError, match="bad row 3"):
        run_tasks(remote(fails), [(3, (3,))], lambda k, r: None)


@pytest.mark.slow
def test_shipped_index_and_resume_after_the_driver_is_killed(cluster, tmp_path):
    data = _nq(200)
    run_mining(_source(data), tmp_path / "one", _cfg())
    out = tmp_path / "ray"

    class Killed(Exception):
        pass

    def kill_after_two(i):
        if len(list((out / "shards").glob("*.stats.json"))) >= 2:
            raise Killed

    with pytest.raises(Killed):
        run_mining(_source(data), out, _cfg(num_shards=8), ray=RayOptions("auto", ship_index=True),
                   on_shard_done=kill_after_two)
    done_before = {p.name: p.stat().st_mtime_ns for p in (out / "shards").glob("*.stats.json")}
    assert 2 <= len(done_before) < 8
    run_mining(_source(data), out, _cfg(num_shards=8), ray=RayOptions("auto", ship_index=True))
    assert all((out / "shards" / n).stat().st_mtime_ns == t for n, t in done_before.items())  # not run again
    assert (out / "examples.jsonl").read_bytes() == (tmp_path / "one" / "examples.jsonl").read_bytes()


def _kill_first(title: str, stop: threading.Event, killed: list[int]) -> None:
    """SIGKILL the first process whose title shows it running ``title`` (Ray names a busy worker
    ``ray::<function>`` or ``ray::<Actor>.<method>``)."""
    while not stop.is_set():
        for p in psutil.process_iter(["pid", "cmdline"]):
            cmd = " ".join(p.info["cmdline"] or [])
            if cmd.startswith("ray::") and title in cmd and "IDLE" not in cmd:
                os.kill(p.info["pid"], signal.SIGKILL)
                killed.append(p.info["pid"])
                return
        time.sleep(0.05)


def _with_killer(title: str, fn):
    stop, killed = threading.Event(), []
    t = threading.Thread(target=_kill_first, args=(title, stop, killed), daemon=True)
    t.start()
    try:
        result = fn()
    finally:
        stop.set()
        t.join()
    return result, killed


@pytest.mark.slow
def test_mining_worker_killed_mid_task_is_retried(cluster, tmp_path, tiny_bert):
    """A shard's worker killed with SIGKILL while it mines (the dense filter makes shards slow
    enough to catch) is run again: the output equals the one-process run, no row lost or repeated."""
    data = _nq(300)
    cfg = dict(dense_model=str(tiny_bert), dense_batch_size=8)
    run_mining(_source(data), tmp_path / "one", _cfg(**cfg))
    _, killed = _with_killer("_mine_task", lambda: run_mining(_source(data), tmp_path / "ray", _cfg(num_shards=4, **cfg),
                                                                ray=RayOptions("auto")))
    assert killed, "no mining worker was seen running"
    assert (tmp_path / "ray" / "examples.jsonl").read_bytes() == (tmp_path / "one" / "examples.jsonl").read_bytes()


@pytest.mark.slow
def test_scoring_actor_killed_mid_block_is_restarted(cluster, tmp_path, ce_export):
    from inference.cli import main as inference_main

    pairs = _pairs_file(tmp_path, n_queries=600)
    base = ["score", "--model", str(ce_export), "--input", str(pairs), "--no-progress"]
    assert inference_main(base + ["--output", str(tmp_path / "one.jsonl")]) == 0
    rc, killed = _with_killer("BlockScorer)).submit", lambda: inference_main(
        base + ["--output", str(tmp_path / "ray.jsonl"), "--ray", "auto", "--ray-workers", "2"]))
    assert rc == 0 and killed, "no scoring actor was seen running"
    _assert_same_scores(tmp_path / "one.jsonl", tmp_path / "ray.jsonl")


@pytest.mark.slow
def test_a_node_that_leaves_mid_job(tmp_path, tiny_bert):
    """A node removed while it mines (its raylet and workers gone): its shards run again elsewhere."""
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    leaving = c.add_node(num_cpus=1)
    c.wait_for_nodes()
    ray.init(address=c.address, include_dashboard=False, logging_level="WARNING")
    try:
        data = _nq(300)
        cfg = dict(dense_model=str(tiny_bert), dense_batch_size=8)
        run_mining(_source(data), tmp_path / "one", _cfg(**cfg))
        out = tmp_path / "ray"
        removed = []

        def remove_after_first(i):
            if not removed:
                c.remove_node(leaving)
                removed.append(i)

        run_mining(_source(data), out, _cfg(num_shards=6, **cfg), ray=RayOptions("auto"), on_shard_done=remove_after_first)
        assert removed
        assert (out / "examples.jsonl").read_bytes() == (tmp_path / "one" / "examples.jsonl").read_bytes()
    finally:
        ray.shutdown()
        c.shutdown()


@pytest.mark.slow
def test_cli_with_ray_local_and_with_ray_auto_on_a_ray_start_cluster(tmp_path, ce_export, tiny_bert):
    """The four commands as users run them, each with ``--ray local`` and with ``--ray auto``
    against ``ray start``, against the one-process run."""
    import numpy as np

    if ray.is_initialized():
        ray.shutdown()
    # token authentication (on by default for local clusters since Ray 2.59): one token for the
    # cluster and its drivers, as a user sets RAY_AUTH_TOKEN on every node
    env = dict(os.environ, RAY_ADDRESS="", RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=os.urandom(16).hex())
    py = sys.executable
    mine = [py, "-m", "data_prep", "mine", "--format", "nq-open", "--input", str(NQ_SAMPLE), "--no-progress",
            "--negatives", "4"]
    subprocess.run(mine + ["--output", str(tmp_path / "one")], check=True, cwd=ROOT, env=env)
    subprocess.run(mine + ["--output", str(tmp_path / "local"), "--ray", "local", "--ray-workers", "2"], check=True,
                   cwd=ROOT, env=env)
    assert (tmp_path / "local" / "examples.jsonl").read_bytes() == (tmp_path / "one" / "examples.jsonl").read_bytes()
    pairs = _pairs_file(tmp_path)
    score = [py, "-m", "inference", "score", "--model", str(ce_export), "--input", str(pairs), "--no-progress"]
    distill = [py, "-m", "training.distill", "--teacher", str(ce_export), "--input", str(pairs)]
    index = [py, "-m", "pipeline", "index", "--format", "nq-open", "--input", str(NQ_SAMPLE), "--dense-model",
             str(tiny_bert), "--no-progress"]
    def name(cmd: list[str], label: str) -> str:
        return str(tmp_path / f"{cmd[2]}-{label}{'' if cmd is index else '.jsonl'}")

    for cmd, out in ((score, "--output"), (distill, "--output"), (index, "--out")):
        subprocess.run(cmd + [out, name(cmd, "one")], check=True, cwd=ROOT, env=env)
        subprocess.run(cmd + [out, name(cmd, "local"), "--ray", "local", "--ray-workers", "2"], check=True, cwd=ROOT,
                       env=env)

    def same_outputs(label: str) -> None:
        _assert_same_scores(Path(name(score, "one")), Path(name(score, label)))
        a, b = _scores(Path(name(distill, "one"))), _scores(Path(name(distill, label)))
        assert len(a) == len(b) > 0 and all(x["passage"] == y["passage"] for x, y in zip(a, b))
        assert max(abs(x["label"] - y["label"]) for x, y in zip(a, b)) <= 1e-6
        one, other = tmp_path / "pipeline-one", tmp_path / f"pipeline-{label}"
        assert (one / "metadata_map.json").read_bytes() == (other / "metadata_map.json").read_bytes()
        assert np.abs(np.load(one / "dense.npy") - np.load(other / "dense.npy")).max() <= 1e-6

    same_outputs("local")
    ray_bin = str(Path(py).parent / "ray")
    subprocess.run([ray_bin, "start", "--head", "--num-cpus", "2", "--port", "6391", "--include-dashboard", "false"],
                   check=True, env=env, capture_output=True)
    try:
        env_auto = dict(env, RAY_ADDRESS="127.0.0.1:6391")
        subprocess.run(mine + ["--output", str(tmp_path / "auto"), "--ray", "auto"], check=True, cwd=ROOT, env=env_auto)
        assert (tmp_path / "auto" / "examples.jsonl").read_bytes() == (tmp_path / "one" / "examples.jsonl").read_bytes()
        for cmd, out in ((score, "--output"), (distill, "--output"), (index, "--out")):
            subprocess.run(cmd + [out, name(cmd, "auto"), "--ray", "auto"], check=True, cwd=ROOT, env=env_auto)
        same_outputs("auto")
    finally:
        subprocess.run([ray_bin, "stop", "--force"], env=env, capture_output=True)


@pytest.mark.slow
def test_pipeline_index_on_ray_equals_one_process(cluster, tmp_path, tiny_bert):
    """Chunk and strip embedding on an actor pool: the same batches, so the same vectors and the
    same dense search results as the one-process index."""
    import numpy as np

    from pipeline.chunking import chunks_from_source
    from pipeline.index import build_index

    def build(out, **kw):
        chunks = chunks_from_source("nq-open", input=str(NQ_SAMPLE), max_chars=256, overlap=32, unit="chars")
        return build_index(chunks, out, dense_model=str(tiny_bert), strip_words=50, batch_size=64, **kw)

    one = build(tmp_path / "one")
    two = build(tmp_path / "ray", ray=RayOptions("auto", workers=2))
    assert len(one) == len(two) > 1000
    for name in ("dense.npy", "strips.npy"):  # (a worker runs one thread: BLAS may sum in another order)
        a, b = np.load(tmp_path / "one" / name), np.load(tmp_path / "ray" / name)
        assert a.shape == b.shape and np.abs(a - b).max() <= 1e-6, (name, np.abs(a - b).max())
    for q in ("who got the first nobel prize in physics", "when was the eiffel tower built", "largest ocean"):
        assert one.dense_search(q, 10) == two.dense_search(q, 10)


@pytest.mark.slow
def test_distill_on_ray_equals_one_process(cluster, tmp_path, ce_export):
    from training.distill import main as distill_main

    pairs = _pairs_file(tmp_path)
    base = ["--teacher", str(ce_export), "--input", str(pairs)]
    assert distill_main(base + ["--output", str(tmp_path / "one.jsonl")]) == 0
    assert distill_main(base + ["--output", str(tmp_path / "ray.jsonl"), "--ray", "auto", "--ray-workers", "2"]) == 0
    a, b = _scores(tmp_path / "one.jsonl"), _scores(tmp_path / "ray.jsonl")
    assert len(a) == len(b) > 0
    for x, y in zip(a, b):
        assert x["query_id"] == y["query_id"] and x["passage"] == y["passage"]
        assert abs(x["label"] - y["label"]) <= 1e-6
