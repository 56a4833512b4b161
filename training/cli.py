"""What the three entry scripts share: config, launch check, output locks, data, train, report.

One run writes a training ``output_dir`` and an ``export_dir`` at a time: the main process (rank 0)
takes :class:`data_prep.locking.OutputLock` on both (``<dir>.lock`` beside each) before anything is
written and holds them to the end; the other ranks take no lock and learn the outcome from rank 0,
so a refused launch ends every process with exit code 2 instead of leaving the others waiting.
"""

from __future__ import annotations

import contextlib
import logging
import sys

from .config import TrainConfig, parse_cli

REPORT_KEYS = ("n", "positives", "accuracy", "precision", "recall", "f1", "auc", "ece", "mrr@10", "ndcg@10", "p@1",
               "r@3", "mrr")


def decision_line(decision) -> str:
    d = decision.to_dict()
    if "theta_high" in d:
        return f"thresholds: theta_high={d['theta_high']:.4f} theta_low={d['theta_low']:.4f} ({d['method']})"
    if "threshold" in d:
        return f"threshold: {d['threshold']:.4f} ({d['method']}, rule {d['rule']})"
    ms = "none" if d["min_score"] is None else f"{d['min_score']:.4f}"
    return f"sentences: top_k={d['top_k']} min_score={ms} ({d['method']})"


def lock_outputs(state, stack: contextlib.ExitStack, outputs: dict[str, str]) -> str | None:
    """Lock each output of ``{what: path}`` on the main process, the locks held by ``stack``.

    Returns why the run is refused (the :class:`~data_prep.locking.OutputLockedError` message), or
    ``None``, on every process alike: rank 0 broadcasts it, so the other ranks never wait at a
    barrier for a main process that has stopped. Rank 0 prints the refusal before it tells the
    others: once a rank exits, the launcher may terminate the rest."""
    from accelerate.utils import broadcast_object_list

    from data_prep.locking import OutputLock

    refused = None
    if state.is_main_process:
        for what, path in outputs.items():
            try:
                stack.enter_context(OutputLock(path, what))
            except ValueError as e:  # OutputLockedError (held elsewhere), or a lock file that cannot be created
                refused = str(e)
            except OSError as e:
                refused = f"cannot lock {what} {path}: {e}"
            if refused is not None:
                print(f"error: {refused}", file=sys.stderr, flush=True)
                break
    if state.num_processes > 1:
        refused = broadcast_object_list([refused], from_process=0)[0]
        if refused is not None:
            # every rank has its copy before any exits: a rank that left while another still read
            # the broadcast reset the connection under it (gloo aborts: SIGABRT instead of exit 2)
            import torch.distributed as dist

            state.wait_for_everyone()
            dist.destroy_process_group()
    return refused


def main(argv: list[str], config_cls: type[TrainConfig]) -> int:
    from accelerate import PartialState
    from accelerate.utils import parse_flag_from_env

    from .trainer import check_launch

    # 1. config: recipe + overrides, validated before anything heavy happens
    cfg = parse_cli(argv, config_cls)
    state = PartialState(cpu=parse_flag_from_env("ACCELERATE_USE_CPU"))  # CPU DDP only when asked for
    logging.basicConfig(level=logging.INFO if state.is_main_process else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    check_launch(state)
    with contextlib.ExitStack() as locks:  # one run per output_dir and export_dir (see the module docstring)
        refused = lock_outputs(state, locks, {"output_dir": cfg.output_dir, "export_dir": cfg.export_dir})
        if refused is not None:  # printed by the main process
            return 2
        return _run(cfg, state)


def _run(cfg: TrainConfig, state) -> int:
    """Steps 2-4 of :func:`main`, under its output locks."""
    from .core import train_model
    from .prepare import prepare_dataset

    # 2. data: mined and built once, on the main process
    with state.main_process_first():
        if state.is_main_process:
            prepare_dataset(cfg)

    # 3. train, calibrate, fit the decision, export
    result = train_model(cfg)

    # 4. report
    if state.is_main_process and result.export_dir is not None:
        m = result.dev_metrics
        print(f"\nDev metrics of the {cfg.task.title} (calibrated):")
        for k in REPORT_KEYS:
            if m.get(k) is not None:
                print(f"  {k:>10}: {m[k]:.4f}" if isinstance(m[k], float) else f"  {k:>10}: {m[k]}")
        print(f"  {decision_line(result.manifest.thresholds)}")
        print(f"\nExport: {result.export_dir}")
    return 0
