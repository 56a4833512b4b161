"""BM25 engines: bm25s (our index) against rank-bm25's BM25Okapi on the same tokens; index reuse."""

from __future__ import annotations

import json

import numpy as np
import pytest

from data_prep.bm25 import BM25Params, IndexMismatchError, build_csc, okapi_idf, open_index, topk_agreement
from data_prep.corpus_store import CorpusStore, corpus_sha256
from data_prep.records import Passage
from data_prep.tokenization import TokenizerConfig, build_tokenizer
from tests.conftest import nq_rows


@pytest.fixture(scope="module")
def nq_passages() -> list[Passage]:
    """Real text: the gold passages of the first 300 questions of the bundled NQ-open sample."""
    out, seen = [], set()
    for i, r in enumerate(nq_rows(300)):
        c = r["ctxs"][0]
        if c["text"] in seen:
            continue
        seen.add(c["text"])
        out.append(Passage(id=f"p{i}", title=c["title"], text=c["text"]))
    return out


@pytest.fixture(scope="module")
def nq_questions() -> list[str]:
    return [r["question"] for r in nq_rows(300)]


def _zipf_corpus(n_docs=400, vocab=300, seed=0) -> list[Passage]:
    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(vocab)]
    p = 1.0 / np.arange(1, vocab + 1) ** 1.1
    p /= p.sum()
    return [Passage(id=f"d{i}", text=" ".join(rng.choice(words, size=rng.integers(3, 40), p=p))) for i in range(n_docs)]


def test_okapi_idf_matches_rank_bm25():
    from rank_bm25 import BM25Okapi

    docs = [["a", "b"], ["a", "c"], ["a", "b", "d"], ["e"]]
    ref = BM25Okapi(docs)
    df = {"a": 3, "b": 2, "c": 1, "d": 1, "e": 1}
    ours = okapi_idf(np.array(list(df.values())), 4, 0.25)
    np.testing.assert_allclose(ours, [ref.idf[w] for w in df], rtol=1e-12)
    assert ours[0] > 0  # "a" is in 3 of 4 documents: negative idf floored at epsilon * mean


def test_index_scores_equal_bm25okapi_including_epsilon_floor(tmp_path):
    from rank_bm25 import BM25Okapi

    corpus = _zipf_corpus()
    ix = open_index(tmp_path / "ix", lambda: iter(corpus), show_progress=False)
    tok = ix.tokenizer
    tokens = [tok(p.text) for p in corpus]
    ref = BM25Okapi(tokens)
    assert any(ref.idf[w] == ref.epsilon * ref.average_idf for w in ref.idf), "corpus must exercise the floor"
    r = ix.engine.retriever
    for q in (["w0"], ["w0", "w3", "w17"], ["w1", "w1", "w250"]):
        ours = r.get_scores(q)
        np.testing.assert_allclose(ours, ref.get_scores(q), rtol=2e-6, atol=1e-6)


def test_builder_equals_bm25s_own_index_where_no_idf_is_negative():
    """Our vectorised builder writes what bm25s itself builds (method=atire, idf=robertson) when no
    term is in more than half the documents; with such a term bm25s clips its idf to 0 instead of
    BM25Okapi's epsilon floor - the difference our builder removes."""
    import bm25s

    tok = build_tokenizer()
    corpus = [tok(p.text) for p in _zipf_corpus(n_docs=200)]
    ref = bm25s.BM25(method="atire", idf_method="robertson")
    ref.index(corpus, show_progress=False)
    vocab = {t: i for t, i in ref.vocab_dict.items() if t != ""}
    flat = np.array([vocab[t] for d in corpus for t in d], dtype=np.int32)
    lens = np.array([len(d) for d in corpus])
    csc = build_csc(flat, lens, len(vocab), BM25Params())
    df = np.diff(csc["indptr"])
    n = len(corpus)
    ours = bm25s.BM25(method="atire")
    ours.scores, ours.vocab_dict, ours.nonoccurrence_array = csc, vocab, None
    for w in ("w5", "w20", "w120"):
        assert df[vocab[w]] <= n / 2
        np.testing.assert_allclose(ours.get_scores([w]), ref.get_scores([w]), rtol=1e-6)
    common = max(vocab, key=lambda w: df[vocab[w]])
    assert df[vocab[common]] > n / 2
    assert ref.get_scores([common]).max() == 0.0  # bm25s: clipped
    assert ours.get_scores([common]).max() > 0.0  # ours: epsilon * mean idf, as BM25Okapi


def test_engines_agree_on_real_text(tmp_path, nq_passages, nq_questions):
    a = open_index(tmp_path / "ix", lambda: iter(nq_passages), show_progress=False)
    b = open_index(tmp_path / "ix", lambda: iter(nq_passages), engine="rank-bm25", show_progress=False)
    ha, hb = a.search(nq_questions, 20), b.search(nq_questions, 20)
    tie_aware, strict = [], []
    for q, (ra, sa), (rb, sb) in zip(nq_questions, ha, hb):
        full = b.engine.scores(a.tokenizer(q))
        np.testing.assert_allclose(sa, full[ra], rtol=1e-5)  # same scores for the same rows
        tie_aware.append(topk_agreement(ra, rb, full))
        strict.append(topk_agreement(ra, rb))
    assert np.mean(tie_aware) == 1.0
    assert np.mean(strict) >= 0.99
    # the gold passage of a question is usually BM25's top hit over this pool
    top1 = [int(ra[0]) if len(ra) else -1 for ra, _ in ha]
    assert np.mean([a.store[r].title == row["ctxs"][0]["title"] for r, row in zip(top1, nq_rows(300)) if r >= 0]) > 0.5


def test_empty_and_unknown_queries_return_no_hits(tmp_path, nq_passages):
    ix = open_index(tmp_path / "ix", lambda: iter(nq_passages), show_progress=False)
    hits = ix.search(["", "the of and", "zzzqqqxxyy", "Genghis Khan"], 10)
    assert [len(r) for r, _ in hits[:3]] == [0, 0, 0]
    assert len(hits[3][0]) > 0 and np.all(np.diff(hits[3][1]) <= 0)


def test_store_random_access_and_mmap(tmp_path, nq_passages):
    ix = open_index(tmp_path / "ix", lambda: iter(nq_passages), show_progress=False)
    assert len(ix) == len(nq_passages)
    for row in (0, 17, len(nq_passages) - 1):
        assert ix.store[row] == nq_passages[row]
    assert isinstance(ix.engine.retriever.scores["data"], np.memmap)
    assert (tmp_path / "ix" / "corpus.jsonl").exists() and (tmp_path / "ix" / "offsets.npy").exists()
    assert list(CorpusStore(tmp_path / "ix")) == nq_passages


def test_corpus_hash_covers_ids_titles_texts(nq_passages):
    base, n = corpus_sha256(nq_passages)
    assert n == len(nq_passages)
    for change in ({"id": "other"}, {"title": "Other"}, {"text": "other text"}):
        p = Passage(**{**nq_passages[0].to_dict(), **change})
        assert corpus_sha256([p] + nq_passages[1:])[0] != base


def test_index_is_reused_and_refused_when_inputs_differ(tmp_path, nq_passages):
    d = tmp_path / "ix"
    open_index(d, lambda: iter(nq_passages), show_progress=False)
    built = (d / "index.json").stat().st_mtime_ns
    again = open_index(d, lambda: iter(nq_passages), show_progress=False)
    assert "verify_s" in again.info["timings"] and "total_build_s" not in again.info["timings"]
    assert (d / "index.json").stat().st_mtime_ns == built
    with pytest.raises(IndexMismatchError, match="another corpus"):
        open_index(d, lambda: iter(nq_passages[:-1]), show_progress=False)
    with pytest.raises(IndexMismatchError, match="tokenizer"):
        open_index(d, lambda: iter(nq_passages), TokenizerConfig(stem=True), show_progress=False)
    with pytest.raises(IndexMismatchError, match="BM25 parameters"):
        open_index(d, lambda: iter(nq_passages), params=BM25Params(k1=0.9), show_progress=False)
    assert json.loads((d / "index.json").read_text())["n_docs"] == len(nq_passages)


def test_failed_build_leaves_no_index(tmp_path):
    def broken():
        yield Passage(id="a", text="alpha")
        raise RuntimeError("reader died")

    with pytest.raises(RuntimeError):
        open_index(tmp_path / "ix", broken, show_progress=False)
    assert not (tmp_path / "ix").exists()
    assert not list(tmp_path.glob(".ix.tmp-*"))


def test_exact_codes_and_chinese_text_are_found(tmp_path):
    corpus = [
        Passage("e204", "设备报错 E-204 表示电源模块过热，请检查风扇。"),
        Passage("e205", "设备报错 E-205 表示电源模块电压过低。"),
        Passage("n204", "仓库里有 204 台设备和 E 型号的电源。"),
        Passage("iso", "本厂已通过 ISO_9001 质量体系认证。"),
        Passage("other", "北京大学位于海淀区，是一所综合性大学。"),
    ]
    ix = open_index(tmp_path / "zh", lambda: iter(corpus), TokenizerConfig(language="zh"), show_progress=False)
    hits = ix.search(["E-204 是什么错误", "ISO_9001 认证", "北京的大学"], 3)
    assert [ix.store[int(r[0])].id for r, _ in hits] == ["e204", "iso", "other"]
    # without code tokens, E-204 is only "e" + "204": the passage that merely has both words wins
    plain = open_index(tmp_path / "plain", lambda: iter(corpus), TokenizerConfig(language="zh", code_tokens=False), show_progress=False)
    rows, _ = plain.search(["E-204"], 3)[0]
    assert plain.store[int(rows[0])].id == "n204"
    rows, scores = ix.search(["E-204"], 3)[0]
    assert ix.store[int(rows[0])].id == "e204" and scores[0] > 2 * scores[1]


def test_index_built_for_rank_bm25_gains_bm25s_arrays_on_reuse(tmp_path, nq_passages, nq_questions):
    ref = open_index(tmp_path / "ix", lambda: iter(nq_passages), engine="rank-bm25", show_progress=False)
    assert not (tmp_path / "ix" / "bm25s").exists()
    fast = open_index(tmp_path / "ix", lambda: iter(nq_passages), show_progress=False)
    assert "bm25s_build_s" in fast.info["timings"] and (tmp_path / "ix" / "bm25s" / "params.index.json").exists()
    for (ra, _), (rb, _) in zip(fast.search(nq_questions[:20], 5), ref.search(nq_questions[:20], 5)):
        assert topk_agreement(ra, rb) >= 0.8


@pytest.mark.parametrize("where", ["store", "arrays"])
def test_disk_full_while_indexing_leaves_no_index(tmp_path, monkeypatch, where):
    import errno

    from data_prep import bm25 as B

    passages = _zipf_corpus(300)
    full = OSError(errno.ENOSPC, "No space left on device")
    if where == "store":
        real_add, n = B.CorpusWriter.add, [0]

        def add(self, p):
            n[0] += 1
            if n[0] > 100:
                raise full
            return real_add(self, p)

        monkeypatch.setattr(B.CorpusWriter, "add", add)
    else:
        monkeypatch.setattr(B.Bm25sEngine, "save", staticmethod(lambda *a, **k: (_ for _ in ()).throw(full)))
    with pytest.raises(OSError, match=r"the disk filled while building the index .*ix.*no index was left"):
        open_index(tmp_path / "ix", lambda: iter(passages), show_progress=False)
    assert not (tmp_path / "ix").exists() and not list(tmp_path.glob(".ix.tmp-*"))
    monkeypatch.undo()
    assert len(open_index(tmp_path / "ix", lambda: iter(passages), show_progress=False)) == 300  # room again: builds


def test_a_killed_build_leaves_a_folder_the_next_build_removes(tmp_path):
    import os

    dead = tmp_path / ".ix.tmp-999999999"  # no such process
    dead.mkdir()
    (dead / "corpus.jsonl").write_text("half")
    live = tmp_path / f".ix.tmp-{os.getppid()}"  # a running process's build is left alone
    live.mkdir()
    open_index(tmp_path / "ix", lambda: iter(_zipf_corpus(50)), show_progress=False)
    assert not dead.exists() and live.exists()
