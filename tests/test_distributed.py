"""Launching through accelerate: real 2-process CPU DDP trains and exports; an inconsistent launch
(processes that did not join one group) is refused with a clear message."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from training_data import make_evaluator_data

ROOT = Path(__file__).resolve().parents[1]
ACCELERATE = str(Path(sys.executable).parent / "accelerate")


def _args(tiny_bert, data, tmp: Path) -> list[str]:
    return ["training/train_evaluator.py", "--model_name_or_path", str(tiny_bert), "--train_file", str(data["train_pairs"]),
            "--dev_file", str(data["dev_pairs"]), "--loss", "bce", "--max_steps", "4", "--eval_steps", "2",
            "--save_steps", "2", "--max_length", "96", "--max_query_length", "24", "--per_device_train_batch_size", "4",
            "--min_dev_pairs", "20", "--output_dir", str(tmp / "run"), "--export_dir", str(tmp / "export")]


def _run(cmd: list[str], extra_env: dict[str, str]) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELERATE_", "WORLD_SIZE", "LOCAL_RANK", "RANK"))}
    env.update({"HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline", "PYTHONUNBUFFERED": "1", **extra_env})
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_evaluator_data(tmp_path_factory.mktemp("ddpdata"))


def test_two_process_cpu_ddp_trains_and_exports(tiny_bert, data, tmp_path):
    cmd = [ACCELERATE, "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
           "--dynamo_backend", "no", *_args(tiny_bert, data, tmp_path)]
    res = _run(cmd, {"ACCELERATE_USE_CPU": "true"})
    assert res.returncode == 0, res.stderr[-3000:]
    man = json.loads((tmp_path / "export" / "evaluator.json").read_text())
    assert man["training"]["world_size"] == 2
    assert man["training"]["global_step"] == 4
    assert man["metrics"]["dev"]["n"] == 80  # gathered across both processes, no duplicates
    state = json.loads((tmp_path / "run" / "checkpoint-4" / "trainer_state.json").read_text())
    # 240 training pairs, 4 per process x 2 processes -> 30 steps an epoch
    assert state["epoch"] == pytest.approx(4 / 30, rel=1e-3)
    assert "Export:" in res.stdout


def test_unsynced_launch_is_refused(tiny_bert, data, tmp_path):
    # --multi_gpu on a machine without GPUs and without ACCELERATE_USE_CPU: two processes that each
    # see a world of one. Training them would give two unsynced copies.
    cmd = [ACCELERATE, "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
           "--dynamo_backend", "no", *_args(tiny_bert, data, tmp_path)]
    res = _run(cmd, {})
    assert res.returncode != 0
    assert "inconsistent launch: the launcher asked for 2 processes but this process sees a world of 1" in res.stderr
    assert "ACCELERATE_USE_CPU=true" in res.stderr
    assert not (tmp_path / "run").exists() and not (tmp_path / "export").exists()
