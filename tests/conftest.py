"""Shared fixtures: tiny models built locally (no downloads) and real text from the bundled sample.

* ``tiny_bert`` - a 2-layer BERT with a WordPiece vocabulary made from the sample's words.
* ``tiny_t5`` - a 2-layer T5 with a SentencePiece unigram model trained on the sample's text, so
  that ``true`` and ``false`` are single tokens (as monoT5 needs).
Both are built once per session and saved with ``save_pretrained``.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
NQ_SAMPLE = ROOT / "data" / "sample" / "nq_open" / "nq-open-oracle.jsonl.gz"


def nq_rows(n: int | None = None) -> list[dict]:
    rows = []
    with gzip.open(NQ_SAMPLE, "rt", encoding="utf-8") as f:
        for line in f:
            rows.append(json.loads(line))
            if n is not None and len(rows) >= n:
                break
    return rows


def _sample_texts(n: int = 400) -> list[str]:
    out = []
    for r in nq_rows(n):
        out.append(r["question"])
        out.extend(c["text"] for c in r["ctxs"])
    return out


@pytest.fixture(scope="session")
def sample_texts() -> list[str]:
    return _sample_texts()


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory, sample_texts) -> Path:
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    d = tmp_path_factory.mktemp("tiny-bert")
    words = Counter(w for t in sample_texts for w in re.findall(r"\w+|[^\w\s]", t.lower()))
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [w for w, _ in words.most_common(3000)]
    (d / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    tok = BertTokenizerFast.from_pretrained(str(d))
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=256, num_labels=1)
    BertForSequenceClassification(cfg).save_pretrained(d)
    tok.save_pretrained(d)
    return d


@pytest.fixture(scope="session")
def tiny_t5(tmp_path_factory, sample_texts) -> Path:
    import sentencepiece as spm
    import torch
    from transformers import T5Config, T5ForConditionalGeneration, T5Tokenizer

    d = tmp_path_factory.mktemp("tiny-t5")
    corpus = d / "corpus.txt"
    extra = ["Query: Document: Relevant: true false [SEP]"] * 50
    corpus.write_text("\n".join(sample_texts + extra) + "\n", encoding="utf-8")
    # "▁true" / "▁false" (with the word-start mark) as pieces, as in the real T5 vocabulary: bare
    # "true" symbols tokenise as ["▁", "true"] under transformers >= 5.25.
    spm.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(d / "spiece"), vocab_size=1000, model_type="unigram",
        pad_id=0, eos_id=1, unk_id=2, bos_id=-1, user_defined_symbols=["▁true", "▁false"],
        character_coverage=1.0, minloglevel=2,
    )
    corpus.unlink()
    (d / "spiece.vocab").unlink()
    tok = T5Tokenizer.from_pretrained(str(d), extra_ids=100)
    torch.manual_seed(0)
    cfg = T5Config(vocab_size=len(tok), d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2,
                   num_heads=2, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    T5ForConditionalGeneration(cfg).save_pretrained(d)
    tok.save_pretrained(d)
    return d


# --------------------------------------------------------------------------------------------
# tiny chat LMs (the local labelling backend and the local generator)


def tiny_chat_lm(texts: list[str], vocab_size: int, max_positions: int):
    """A byte-level BPE tokenizer trained on ``texts`` with a minimal chat template, and a seeded
    2-layer Llama sized for it (untrained): ``(tokenizer, model)``."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<pad>", "<s>", "</s>"],
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    fast.chat_template = ("{% for m in messages %}<s>{{ m['role'] }}\n{{ m['content'] }}</s>\n{% endfor %}"
                          "{% if add_generation_prompt %}<s>assistant\n{% endif %}")
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(fast), hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=max_positions,
                      bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id)
    return fast, LlamaForCausalLM(cfg)


def teach_chat_lm(model, fast, examples: list[tuple[list[dict], str]], steps: int, lr: float = 3e-3) -> None:
    """Train ``model`` (in place, then eval mode) to reply to each chat ``messages`` with its answer
    (loss on the answer tokens only), cycling through ``examples`` for ``steps`` steps."""
    import torch

    seqs = []
    for msgs, answer in examples:
        head = fast(fast.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True),
                    add_special_tokens=False)["input_ids"]
        a = fast(answer + "</s>", add_special_tokens=False)["input_ids"]
        seqs.append((torch.tensor([head + a]), torch.tensor([[-100] * len(head) + a])))
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    for step in range(steps):
        ids, labels = seqs[step % len(seqs)]
        model(input_ids=ids, labels=labels).loss.backward()
        opt.step()
        opt.zero_grad()
    model.eval()


@pytest.fixture(scope="session")
def ce_export(tiny_bert, tmp_path_factory) -> Path:
    """A tiny trained evaluator export (two steps on tiny_bert; as tests/test_inference.py makes them)."""
    from training.config import EvaluatorConfig
    from training.core import train_model
    from training_data import make_evaluator_data

    d = tmp_path_factory.mktemp("ce-export")
    data = make_evaluator_data(d / "data")
    cfg = EvaluatorConfig(model_name_or_path=str(tiny_bert), train_file=str(data["train_pairs"]), dev_file=str(data["dev_pairs"]),
                          output_dir=str(d / "run"), export_dir=str(d / "export"), max_steps=2, eval_steps=0, save_steps=2,
                          max_length=96, max_query_length=24, logging_steps=2, per_device_train_batch_size=8,
                          warmup_ratio=0.0, min_dev_pairs=20, report_to="none")
    return train_model(cfg).export_dir


@pytest.fixture
def trainer_datasets(monkeypatch) -> dict:
    """What training.core hands its trainer: ``{"train": dataset, "eval": dataset}``, filled when a
    test trains (the real PairTrainer runs; only its datasets are recorded)."""
    import training.core as core

    seen: dict = {}

    class Spy(core.PairTrainer):
        def __init__(self, *a, **k):
            seen["train"], seen["eval"] = k["train_dataset"], k["eval_dataset"]
            super().__init__(*a, **k)

    monkeypatch.setattr(core, "PairTrainer", Spy)
    return seen


def write_export(tiny_bert: Path, out: Path, task: str, b: float) -> Path:
    """A real export of ``task`` around tiny_bert whose every score is sigmoid(b) (calibration a = 0)."""
    from inference.calibration import Calibration
    from inference.decisions import SentenceSelection, Threshold, Thresholds
    from inference.manifest import Manifest, ModelInfo
    from inference.modeling import ModelSpec

    decision = {"evaluator": Thresholds(0.7, 0.3), "answer_classifier": Threshold(0.5),
                "extractor": SentenceSelection(top_k=3)}[task]
    out.mkdir(parents=True)
    for f in tiny_bert.iterdir():
        if f.is_file():
            shutil.copy2(f, out / f.name)
    Manifest(task=task, model=ModelInfo(backbone=str(tiny_bert), head="cross-encoder"),
             spec=ModelSpec(head="cross-encoder", max_length=128, max_query_length=16),
             calibration=Calibration("platt", 0.0, b), thresholds=decision, name=out.name).write(out)
    return out


@contextmanager
def live_server(settings, models=None, timeout: float = 30.0):
    """A real ``python -m inference serve`` app (``create_app`` on ``settings``, its exports loaded
    with ``load_models`` unless ``models`` are given) under uvicorn in a daemon thread on a free local
    port; yields its base URL and stops the server on exit."""
    import socket
    import threading
    import time

    import uvicorn

    from inference.serving.app import create_app, load_models

    app = create_app(settings, models=models if models is not None else load_models(settings))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, name=f"live-server-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError("the live server stopped while starting (see its log above)")
        if time.monotonic() > deadline:
            server.should_exit = True
            raise TimeoutError(f"the live server did not start within {timeout}s")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout)
