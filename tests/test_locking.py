"""One writer per output (data_prep.locking): the lock itself, and every command that writes an
output refused with exit code 2, naming the holder, while another process holds that output.

The holder is a real second process (flock locks are per open file description and released by the
kernel when their process dies); each command is refused before it touches anything, so the holder's
files are compared byte for byte before and after.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from data_prep.locking import OutputLock, OutputLockedError, holder_info, lock_path, locks_output
from tests.conftest import NQ_SAMPLE, nq_rows

ROOT = Path(__file__).resolve().parents[1]
POPQA = ROOT / "tests" / "fixtures" / "crag" / "popqa.sample.jsonl"
HOLDER = (
    "import sys, time\n"
    "from data_prep.locking import OutputLock\n"
    "OutputLock(sys.argv[1], 'output').acquire()\n"
    "print('held', flush=True)\n"
    "time.sleep(300)\n"
)


@contextmanager
def held_by_another_process(output: Path):
    """A child process holding the lock of ``output`` until the block ends; yields its pid."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(output)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.strip() == "held", proc.stderr.read()
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()


def snapshot(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


# ============================================================================================
# the lock


def test_lock_file_is_the_outputs_sibling(tmp_path):
    assert lock_path(tmp_path / "scores.jsonl") == tmp_path / "scores.jsonl.lock"
    assert lock_path(tmp_path / "mined") == tmp_path / "mined.lock"
    assert lock_path(f"{tmp_path}/mined/") == tmp_path / "mined.lock"
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert lock_path(tmp_path / "link" / "x.jsonl") == tmp_path / "real" / "x.jsonl.lock"  # one lock per output


def test_second_process_is_refused_while_held_and_succeeds_after(tmp_path):
    out = tmp_path / "sub" / "out"  # the parent folder is created
    with held_by_another_process(out) as pid:
        info = holder_info(lock_path(out))
        assert info["pid"] == pid and info["host"] and info["started"].endswith("Z") and "-c" in info["argv"]
        with pytest.raises(OutputLockedError) as e:
            OutputLock(out, "mining output").acquire()
        msg = str(e.value)
        assert msg.startswith(f"mining output {out} is being written by another process (pid {pid} on host ")
        assert msg.endswith("; wait for it to finish, or choose another output")
        assert isinstance(e.value, ValueError) and e.value.holder["pid"] == pid
        assert holder_info(lock_path(out))["pid"] == pid  # the refused process left the holder's info alone
    with OutputLock(out) as lock:  # released by the kernel when the holder died
        assert lock.held and holder_info(lock_path(out))["pid"] == os.getpid()
    assert lock_path(out).exists() and lock_path(out).read_bytes() == b""  # released: emptied, not removed


def test_a_holder_in_this_process_refuses_other_processes(tmp_path):
    out = tmp_path / "out.jsonl"
    code = ("import sys\nfrom data_prep.locking import OutputLock, OutputLockedError\n"
            "try:\n    OutputLock(sys.argv[1]).acquire()\nexcept OutputLockedError as e:\n    print(e); sys.exit(3)\n")
    with OutputLock(out):
        r = subprocess.run([sys.executable, "-c", code, str(out)], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert r.returncode == 3 and f"(pid {os.getpid()} on host" in r.stdout, r.stderr
    r = subprocess.run([sys.executable, "-c", code, str(out)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


def test_reentrant_in_one_process(tmp_path):
    out = tmp_path / "mined"
    with OutputLock(out, "mining output"):
        with OutputLock(out, "mining output"):  # a library call under a command holding the same output
            assert holder_info(lock_path(out))["pid"] == os.getpid()
        assert holder_info(lock_path(out))["pid"] == os.getpid()  # still held by the outer one
        r = subprocess.run([sys.executable, "-c", HOLDER, str(out)], cwd=ROOT, capture_output=True, text=True,
                           timeout=60)
        assert r.returncode != 0 and "OutputLockedError" in r.stderr
    assert lock_path(out).read_bytes() == b""
    lock = OutputLock(out)
    lock.acquire()
    with pytest.raises(RuntimeError, match="already acquired"):
        lock.acquire()
    lock.release()
    lock.release()  # a second release is a no-op


def test_a_lock_file_that_cannot_be_created_is_a_clear_error(tmp_path, capsys):
    from data_prep.cli import main

    (tmp_path / "a-file").write_text("")
    out = tmp_path / "a-file" / "out.jsonl"  # its folder is a file
    with pytest.raises(ValueError, match=f"cannot lock output {out}: cannot create {out}.lock"):
        OutputLock(out).acquire()
    assert main(["convert", "--format", "nq-open", "--input", str(NQ_SAMPLE), "--to", "queries", "--output", str(out)]) == 2
    assert capsys.readouterr().err.startswith(f"error: cannot lock converted output {out}: cannot create")


def test_decorator_locks_the_named_argument(tmp_path):
    seen = []

    @locks_output("cfg.output", "dataset")
    def build(cfg, other=None):
        seen.append(holder_info(lock_path(cfg.output)))

    class Cfg:
        output = str(tmp_path / "ds")

    build(Cfg())
    assert seen[0]["pid"] == os.getpid() and seen[0]["what"] == "dataset"
    assert lock_path(tmp_path / "ds").read_bytes() == b""
    with pytest.raises(TypeError, match="has no argument 'args'"):
        locks_output("args.output")(build)


def test_a_killed_holder_is_taken_over_with_a_warning(tmp_path, caplog):
    out = tmp_path / "out.jsonl"
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(out)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    assert holder_info(lock_path(out))["pid"] == proc.pid  # kill -9 leaves the info behind
    with caplog.at_level(logging.WARNING, logger="data_prep.locking"), OutputLock(out):
        assert holder_info(lock_path(out))["pid"] == os.getpid()
    assert f"taking over the lock of {out}: its holder (pid {proc.pid} on host " in caplog.text
    assert "is no longer running" in caplog.text


def test_a_forked_child_does_not_hold_or_release_the_parents_lock(tmp_path):
    out = tmp_path / "out"
    with OutputLock(out):
        pid = os.fork()
        if pid == 0:  # the child: its copy was closed at fork; the lock stays the parent's
            try:
                OutputLock(out).acquire()
                os._exit(0)
            except OutputLockedError:
                os._exit(3)
            except BaseException:
                os._exit(4)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 3
        assert holder_info(lock_path(out))["pid"] == os.getpid()


# ============================================================================================
# every command is refused with exit code 2 while its output is held


def _refused(run, output: Path, work: Path, capsys) -> str:
    """Hold ``output`` in another process, run the command, and check it is refused untouched."""
    with held_by_another_process(output) as pid:
        before = snapshot(work)
        capsys.readouterr()
        rc = run()
        err = capsys.readouterr().err
        assert rc == 2, err
        assert f"{output} is being written by another process (pid {pid} on host " in err, err
        assert "wait for it to finish, or choose another output" in err and "Traceback" not in err
        after = {k: v for k, v in snapshot(work).items() if k in before or not (k.endswith(".lock") and v == b"")}
        assert after == before  # not a byte of the holder's output (or its lock) changed
    return err


@pytest.fixture
def work(tmp_path) -> Path:
    d = tmp_path / "work"
    d.mkdir()
    return d


@pytest.fixture(scope="module")
def nq_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("nq") / "nq.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in nq_rows(150)), encoding="utf-8")
    return path


def _old_folder(out: Path, *names: str) -> None:
    for name in names:
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(f"the holder's {name}\n")


def test_mine_is_refused(work, nq_file, capsys):
    from data_prep.cli import main

    out = work / "mined"
    _old_folder(out, "examples.jsonl", "meta.json", "rejects/rejects.jsonl")  # --overwrite and --skip-bad clear these
    err = _refused(lambda: main(["mine", "--format", "nq-open", "--input", str(nq_file), "--output", str(out),
                                 "--no-progress", "--overwrite", "--skip-bad"]), out, work, capsys)
    assert err.startswith(f"error: mining output {out} is being written")


def test_shards_of_one_folder_lock_themselves_only(work, nq_file, capsys):
    """``--shard i/N`` on several machines at once: each shard has its own lock, so shard 1 runs
    while shard 0 is held, and a second run of shard 0 is refused."""
    from data_prep.cli import main
    from data_prep.mining import lock_target

    out = work / "mined"
    base = ["mine", "--format", "nq-open", "--input", str(nq_file), "--output", str(out), "--no-progress",
            "--num-shards", "2"]
    with held_by_another_process(lock_target(out, (0, 2))) as pid:
        assert main(base + ["--shard", "1/2"]) == 0
        assert main(base + ["--shard", "0/2"]) == 2
        assert f"pid {pid}" in capsys.readouterr().err
    assert main(base + ["--shard", "0/2"]) == 0 and (out / "examples.jsonl").exists()  # the last one merges


def test_build_is_refused(work, tmp_path, capsys):
    from data_prep.cli import main
    from data_prep.readers import open_source

    examples = tmp_path / "examples.jsonl"
    examples.write_text("".join(json.dumps(e.to_dict()) + "\n" for e in list(open_source("nq-open", input=NQ_SAMPLE)
                                                                              .queries())[:20]))
    out = work / "ds"
    _old_folder(out, "stats.json", "evaluator/train.pairs.jsonl")
    _refused(lambda: main(["build", "--input", str(examples), "--output", str(out), "--overwrite"]), out, work, capsys)


def test_label_is_refused(work, tmp_path, capsys):
    from data_prep.cli import main

    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(json.dumps({"query": "who wrote it", "passage": "Someone wrote it."}) + "\n")
    out = work / "labels"
    _old_folder(out, "labels.jsonl", "summary.json")
    _refused(lambda: main(["label", "--input", str(pairs), "--task", "relevance", "--output", str(out),
                           "--backend", "transformers", "--model", str(tmp_path / "no-model"), "--no-progress"]),
             out, work, capsys)


def test_feedback_is_refused(work, tmp_path, capsys):
    from data_prep.cli import main

    inp = tmp_path / "feedback.jsonl"
    inp.write_text(json.dumps({"query": "q", "passage": "p", "vote": "up"}) + "\n")
    out = work / "feedback.pairs.jsonl"
    _old_folder(work, "feedback.pairs.jsonl", "feedback.pairs.jsonl.meta.json")
    _refused(lambda: main(["feedback", "--input", str(inp), "--output", str(out), "--overwrite", "--skip-bad"]),
             out, work, capsys)


def test_convert_is_refused(work, nq_file, capsys):
    from data_prep.cli import main

    out = work / "nq.queries.jsonl"
    _old_folder(work, "nq.queries.jsonl", "nq.queries.jsonl.rejects/rejects.jsonl")
    _refused(lambda: main(["convert", "--format", "nq-open", "--input", str(nq_file), "--to", "queries", "--output",
                           str(out), "--overwrite", "--skip-bad"]), out, work, capsys)


def test_inference_score_is_refused_before_the_model_loads(work, tmp_path, capsys):
    from inference.cli import main

    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(json.dumps({"query": "who wrote it", "passage": "Someone wrote it."}) + "\n")
    out = work / "scores.jsonl"
    _old_folder(work, "scores.jsonl", "scores.jsonl.meta.json", "scores.jsonl.rejects/rejects.jsonl")
    err = _refused(lambda: main(["score", "--model", str(tmp_path / "no-export"), "--input", str(pairs), "--output",
                                 str(out), "--overwrite", "--skip-bad", "--no-progress", "--device", "cpu"]),
                   out, work, capsys)
    assert err.startswith(f"error: scores {out} is being written")


def test_distill_is_refused(work, tmp_path, capsys):
    from training.distill import main

    pairs = tmp_path / "train.pairs.jsonl"
    pairs.write_text("")
    out = work / "distilled.pairs.jsonl"
    _old_folder(work, "distilled.pairs.jsonl", "distilled.pairs.jsonl.meta.json")
    _refused(lambda: main(["--teacher", str(tmp_path / "no-export"), "--input", str(pairs), "--output", str(out),
                           "--overwrite"]), out, work, capsys)


def test_pipeline_index_is_refused(work, capsys):
    from pipeline.cli import main

    out = work / "index"
    _old_folder(out, "index.json", "bm25/corpus.jsonl")
    argv = ["index", "--format", "popqa", "--input", str(POPQA), "--out", str(out), "--overwrite", "--dense-model",
            "none", "--no-progress"]
    err = _refused(lambda: main(argv), out, work, capsys)
    assert err.startswith(f"error: index {out} is being written")
    assert main(argv) == 0  # the holder gone (killed), the same command runs: the lock is taken over
    assert json.loads((out / "index.json").read_text())["n_chunks"] > 0


@pytest.mark.parametrize("held", ["output_dir", "export_dir"])
def test_training_run_is_refused(held, work, tmp_path, capsys):
    from training.cli import main
    from training.config import EvaluatorConfig

    for name in ("train.pairs.jsonl", "dev.pairs.jsonl"):
        (tmp_path / name).write_text("")
    dirs = {"output_dir": work / "run", "export_dir": work / "export"}
    _old_folder(dirs["output_dir"], "checkpoint-4/model.safetensors")
    _old_folder(dirs["export_dir"], "evaluator.json")
    argv = ["--train_file", str(tmp_path / "train.pairs.jsonl"), "--dev_file", str(tmp_path / "dev.pairs.jsonl"),
            "--output_dir", str(dirs["output_dir"]), "--export_dir", str(dirs["export_dir"])]
    err = _refused(lambda: main(argv, EvaluatorConfig), dirs[held], work, capsys)
    assert err.startswith(f"error: {held} {dirs[held]} is being written")
    if held == "export_dir":  # output_dir's lock, taken first, was released
        assert lock_path(dirs["output_dir"]).read_bytes() == b""
    else:  # refused at the first lock: export_dir's was not even tried
        assert not lock_path(dirs["export_dir"]).exists()


# ============================================================================================
# a run killed with SIGKILL: the next one takes its lock over and resumes


KILLED_MINE = """
import os, signal, sys
import data_prep.mining.run as m  # the module whose run_mining calls _run_shard
first = m._run_shard
def run_then_die(*a, **k):  # SIGKILL right after the first shard is written: no cleanup at all
    first(*a, **k)
    os.kill(os.getpid(), signal.SIGKILL)
m._run_shard = run_then_die
from data_prep.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_mine_killed_with_sigkill_is_taken_over_and_resumed(tmp_path, nq_file, caplog):
    from data_prep.cli import main
    from data_prep.mining import shard_paths

    out = tmp_path / "mined"
    argv = ["mine", "--format", "nq-open", "--input", str(nq_file), "--output", str(out), "--no-progress",
            "--num-shards", "2", "--negatives", "4", "--depth", "40", "--window", "2:40"]
    proc = subprocess.run([sys.executable, "-c", KILLED_MINE, *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    left = holder_info(lock_path(out))
    assert left is not None and left["argv"][-len(argv):] == argv  # the dead run's info is still there
    assert shard_paths(out, 0, 2)[0].exists() and not (out / "examples.jsonl").exists()
    stamp = shard_paths(out, 0, 2)[0].stat().st_mtime_ns
    with caplog.at_level(logging.INFO):
        assert main(argv) == 0
    assert f"taking over the lock of {out}: its holder (pid {left['pid']} on host {left['host']}" in caplog.text
    assert "1 shard(s) already finished" in caplog.text
    assert shard_paths(out, 0, 2)[0].stat().st_mtime_ns == stamp  # resumed: shard 0 was not redone
    meta = json.loads((out / "meta.json").read_text())
    assert meta["counts"]["queries"] == len((out / "examples.jsonl").read_text().splitlines()) == 150
    assert lock_path(out).read_bytes() == b""


def test_lock_wait_for_info(tmp_path, monkeypatch):
    """A holder that has the lock but has not written its info yet: the message says where to look."""
    import data_prep.locking as L

    monkeypatch.setattr(L, "INFO_WAIT_S", 0.1)
    path = lock_path(tmp_path / "out")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        code = "import fcntl, os, sys, time\nfd = os.open(sys.argv[1], os.O_RDWR)\nfcntl.flock(fd, fcntl.LOCK_EX)\n" \
               "print('held', flush=True)\ntime.sleep(60)\n"
        proc = subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout.readline().strip() == "held"
            t0 = time.monotonic()
            with pytest.raises(OutputLockedError, match=f"its details are not written yet: see {path}"):
                OutputLock(tmp_path / "out").acquire()
            assert time.monotonic() - t0 < 5
        finally:
            proc.kill()
            proc.wait()
            proc.stdout.close()
    finally:
        os.close(fd)


def test_two_process_launch_is_refused_on_every_rank(tmp_path):
    """Real 2-process CPU DDP: rank 0 is refused the lock, tells rank 1, and both end with exit code 2
    (rank 1 does not wait at a barrier for a main process that stopped); the message is printed once."""
    accelerate = str(Path(sys.executable).parent / "accelerate")
    for name in ("train.pairs.jsonl", "dev.pairs.jsonl"):
        (tmp_path / name).write_text("")
    export = tmp_path / "export"
    cmd = [accelerate, "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
           "--dynamo_backend", "no", "training/train_evaluator.py", "--train_file", str(tmp_path / "train.pairs.jsonl"),
           "--dev_file", str(tmp_path / "dev.pairs.jsonl"), "--output_dir", str(tmp_path / "run"), "--export_dir",
           str(export)]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELERATE_", "WORLD_SIZE", "LOCAL_RANK", "RANK"))}
    env.update({"HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline", "PYTHONUNBUFFERED": "1", "ACCELERATE_USE_CPU": "true"})
    with held_by_another_process(export) as pid:
        res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode != 0
    assert res.stderr.count(f"error: export_dir {export} is being written by another process (pid {pid} on host") == 1
    assert "exitcode  : 2" in res.stderr and "exitcode  : 1" not in res.stderr, res.stderr[-3000:]
    assert lock_path(tmp_path / "run").read_bytes() == b""  # rank 0 took output_dir's first, and released it
