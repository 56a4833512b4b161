"""Experiment (issue 10): fine-tune the MiniLM bi-encoder itself on the quickstart's data and budget.

    python scripts/experiment_biencoder.py --out outputs/experiments/biencoder-nq
    python scripts/bench_quality.py --cosine-model outputs/experiments/biencoder-nq --limit 100 \\
        --json outputs/bench/quality-biencoder.json

The quickstart evaluator is a cross-encoder fine-tuned from the MiniLM bi-encoder's weights, and out
of domain it falls below that bi-encoder used zero-shot (docs/benchmarks.md). This script asks the
question that decides the next recipe: does the bi-encoder, fine-tuned with the quickstart's data
(NQ-open groups of 1 positive + 7 BM25 negatives), steps (200) and batch (3 groups), keep its
zero-shot knowledge and gain in domain? Loss: cross-entropy over each group's cosines times
``--scale`` (the softmax of sentence-transformers' MultipleNegativesRankingLoss, within the group);
mean pooling and unit vectors as the zero-shot model. It writes a model folder that
:class:`data_prep.dense.DenseEncoder` loads, and ``experiment.json`` with the settings, the loss
curve and the dev AUC of the cosine before and after (the dataset's dev pairs).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runnable from a source checkout


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="model folder to write")
    ap.add_argument("--dataset-dir", default="outputs/datasets/nq-open", help="a data_prep build folder")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--groups-per-step", type=int, default=3)
    ap.add_argument("--lr", type=float, default=2e-5)
    ap.add_argument("--scale", type=float, default=20.0)
    ap.add_argument("--max-length", type=int, default=256)
    ap.add_argument("--seed", type=int, default=13)
    args = ap.parse_args(argv)

    import numpy as np
    import torch
    from transformers import AutoModel, AutoTokenizer

    from data_prep.dense import default_minilm_path
    from data_prep.io import read_records
    from data_prep.records import LabelledPair, QueryExample
    from inference.inputs import passage_text
    from inference.metrics import roc_auc

    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    src = default_minilm_path()
    tok = AutoTokenizer.from_pretrained(str(src), local_files_only=True)
    model = AutoModel.from_pretrained(str(src), local_files_only=True)
    task = Path(args.dataset_dir) / "evaluator"
    groups = list(read_records(task / "train.groups.jsonl", QueryExample))
    dev = list(read_records(task / "dev.pairs.jsonl", LabelledPair))

    def embed(texts: list[str]) -> torch.Tensor:
        b = tok(texts, padding=True, truncation=True, max_length=args.max_length, return_tensors="pt")
        h = model(**b).last_hidden_state
        m = b["attention_mask"].unsqueeze(-1).to(h.dtype)
        return torch.nn.functional.normalize((h * m).sum(1) / m.sum(1).clamp(min=1e-9), dim=-1)

    @torch.inference_mode()
    def dev_auc() -> float:
        model.eval()
        sims = []
        for i in range(0, len(dev), 64):
            part = dev[i : i + 64]
            q = embed([p.query for p in part])
            d = embed([passage_text(p.passage) for p in part])
            sims.extend((q * d).sum(-1).tolist())
        return roc_auc(np.array(sims), [p.label for p in dev])

    before = dev_auc()
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    warmup = max(1, args.steps // 10)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min((s + 1) / warmup, max(0.0, (args.steps - s) / max(1, args.steps - warmup))))
    order = list(range(len(groups)))
    rng.shuffle(order)
    losses, t0 = [], time.perf_counter()
    model.train()
    for step in range(args.steps):
        batch = [groups[order[(step * args.groups_per_step + j) % len(order)]] for j in range(args.groups_per_step)]
        q = embed([g.query for g in batch])
        docs = [passage_text(p) for g in batch for p in [g.positives[0], *g.negatives]]
        d = embed(docs).view(len(batch), -1, q.shape[-1])
        logits = args.scale * torch.einsum("bh,bkh->bk", q, d)  # positive at index 0 of each group
        loss = torch.nn.functional.cross_entropy(logits, torch.zeros(len(batch), dtype=torch.long))
        loss.backward()
        opt.step()
        sched.step()
        opt.zero_grad()
        losses.append(loss.item())
        if (step + 1) % 20 == 0:
            print(f"step {step + 1}/{args.steps}: loss {np.mean(losses[-20:]):.4f} ({time.perf_counter() - t0:.0f} s)",
                  flush=True)
    train_s = time.perf_counter() - t0
    after = dev_auc()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    report = {"dev_auc_cosine": {"zero_shot": before, "fine_tuned": after}, "train_s": round(train_s, 1),
              "loss_every_20": [round(float(np.mean(losses[i:i + 20])), 4) for i in range(0, len(losses), 20)],
              "settings": vars(args), "dev_pairs": len(dev), "train_groups": len(groups),
              "command": " ".join(["python", "scripts/experiment_biencoder.py", *(sys.argv[1:] if argv is None else argv)])}
    (out / "experiment.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(report["dev_auc_cosine"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
