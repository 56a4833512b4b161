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
from collections import Counter
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
