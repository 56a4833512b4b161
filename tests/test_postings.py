"""The compiled BM25 kernels: the counting-sort build equals the numpy build bit for bit, and the
pruned top k (MaxScore with block-max bounds) equals the exhaustive top k, scores and tie rule
included, on corpora made to be hard for it (Zipf text, repeated query terms, many exact ties,
tiny blocks); the index directory keeps the block maxima and tokenises in worker processes the
same way it does in one."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("numba")

from data_prep import bm25 as B  # noqa: E402
from data_prep import postings as P  # noqa: E402
from data_prep.bm25 import BM25Params, build_csc, load_index, open_index, topk_equal  # noqa: E402
from data_prep.records import Passage  # noqa: E402


def _zipf_ids(n_docs: int, vocab: int, seed: int, max_len: int = 60, exponent: float = 1.0):
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, vocab + 1) ** exponent
    p /= p.sum()
    lens = rng.integers(1, max_len, n_docs)
    return rng.choice(vocab, lens.sum(), p=p).astype(np.int32), lens, p, rng


def _queries(rng, p, n: int, max_terms: int = 8, repeats: bool = True) -> list[list[int]]:
    out = []
    for _ in range(n):
        q = list(rng.choice(len(p), rng.integers(1, max_terms + 1), p=p))
        if repeats and rng.random() < 0.3:
            q.append(q[0])  # a term twice: its contribution counts twice, as in bm25s and rank-bm25
        out.append([int(t) for t in q])
    return out


@pytest.mark.parametrize("params", [BM25Params(), BM25Params(k1=1.2, b=0.5), BM25Params(k1=0.9, b=0.4, epsilon=0.1)])
def test_counting_sort_build_equals_numpy_build_bit_for_bit(params):
    flat, lens, _, _ = _zipf_ids(3000, 500, seed=1)
    lens[::50] = 0  # empty documents too
    flat = flat[: lens.sum()]
    ref = build_csc(flat, lens, 500, params)
    ours = P.build_csc_compiled(flat, lens, 500, params)
    for key in ("data", "indices", "indptr"):
        assert ours[key].dtype == ref[key].dtype
        assert np.array_equal(ours[key], ref[key]), key
    assert ours["num_docs"] == ref["num_docs"] == 3000


@pytest.mark.parametrize("block", [2, 16, 128])
@pytest.mark.parametrize("k", [1, 7, 100])
def test_pruned_top_k_equals_exhaustive_scores_and_ties(block, k, monkeypatch):
    flat, lens, p, rng = _zipf_ids(4000, 400, seed=block + k)
    csc = P.build_csc_compiled(flat, lens, 400, BM25Params())
    monkeypatch.setattr(P, "BLOCK", block)
    meta = P.block_meta(csc["indptr"], csc["indices"], csc["data"], block)
    qs = _queries(rng, p, 300)
    pruned = P.search(qs, k, csc, meta, n_threads=2)
    exhaustive = P.search_exhaustive(qs, k, csc, n_threads=2)
    for q, a, b in zip(qs, pruned, exhaustive):
        assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]), q


def test_pruned_search_under_massive_ties_keeps_the_lowest_rows():
    """Every document has the same length and one of three words: thousands of exact ties at the cut."""
    n = 6000
    flat = np.tile(np.array([0, 1, 2], np.int32), n // 3)
    lens = np.ones(n, np.int64)
    csc = P.build_csc_compiled(flat, lens, 3, BM25Params())
    meta = P.block_meta(csc["indptr"], csc["indices"], csc["data"], 8)
    for q in ([0], [0, 1], [2, 2, 1]):
        rows, scores = P.search([q], 50, csc, meta)[0]
        ref_rows, ref_scores = P.search_exhaustive([q], 50, csc)[0]
        assert np.array_equal(rows, ref_rows) and np.array_equal(scores, ref_scores)
        assert np.all(np.diff(rows) > 0)  # one score: the 50 lowest rows, ascending


def test_pruned_search_handles_empty_unknown_and_short_queries():
    flat, lens, p, rng = _zipf_ids(500, 50, seed=3)
    csc = P.build_csc_compiled(flat, lens, 60, BM25Params())  # ids 50..59 have no postings
    meta = P.block_meta(csc["indptr"], csc["indices"], csc["data"])
    res = P.search([[], [55], [55, 0], [0]], 1000, csc, meta)
    assert len(res[0][0]) == 0 and len(res[1][0]) == 0
    assert np.array_equal(res[2][0], res[3][0])  # a term with no postings adds nothing
    assert len(res[3][0]) == int(csc["indptr"][1] - csc["indptr"][0])  # k above the hits: every hit


def test_block_maxima_bound_every_posting():
    flat, lens, _, _ = _zipf_ids(2000, 100, seed=4)
    csc = P.build_csc_compiled(flat, lens, 100, BM25Params())
    meta = P.block_meta(csc["indptr"], csc["indices"], csc["data"], 16)
    for t in range(100):
        lo, hi = csc["indptr"][t], csc["indptr"][t + 1]
        for b in range(meta["bptr"][t], meta["bptr"][t + 1]):
            s = lo + (b - meta["bptr"][t]) * 16
            e = min(s + 16, hi)
            assert meta["bmax"][b] == csc["data"][s:e].max() and meta["blast"][b] == csc["indices"][e - 1]
        assert meta["tmax"][t] == (csc["data"][lo:hi].max() if hi > lo else 0)


def _passages(n: int, seed: int = 0) -> list[Passage]:
    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(300)]
    p = 1.0 / np.arange(1, 301)
    p /= p.sum()
    return [Passage(id=f"d{i}", text=" ".join(rng.choice(words, size=rng.integers(3, 30), p=p))) for i in range(n)]


def test_index_pruned_backend_equals_bm25s_exhaustive_up_to_tie_order(tmp_path):
    passages = _passages(3000)
    ix = open_index(tmp_path / "ix", lambda: iter(passages), show_progress=False)
    assert (tmp_path / "ix" / "bm25s" / "blocks.json").exists()  # block maxima written with the index
    queries = [" ".join(p.text.split()[:4]) for p in passages[::15]]
    ix.engine.set_backend("pruned")
    pruned = ix.search(queries, 50)
    for backend in ("numpy", "numba"):
        ix.engine.set_backend(backend)
        other = ix.search(queries, 50)
        assert all(topk_equal(a, b, rel_tol=1e-6) for a, b in zip(pruned, other)), backend


def test_index_without_block_maxima_gains_them_on_first_pruned_search(tmp_path):
    passages = _passages(800)
    open_index(tmp_path / "ix", lambda: iter(passages), show_progress=False)
    for f in (tmp_path / "ix" / "bm25s").glob("blocks.*"):
        f.unlink()  # an index built before the pruned backend existed
    ix = load_index(tmp_path / "ix")
    assert ix.engine.backend == "pruned"
    hits = ix.search(["w1 w2 w50"], 10)
    assert len(hits[0][0]) == 10 and (tmp_path / "ix" / "bm25s" / "blocks.json").exists()
    info = json.loads((tmp_path / "ix" / "bm25s" / "blocks.json").read_text())
    assert info["block"] == P.BLOCK


def test_tokenising_in_worker_processes_builds_the_same_index(tmp_path, monkeypatch):
    passages = _passages(5000, seed=5)
    passages[10] = Passage(id="code", text="error E-204 in v2.1 of ISO_9001")  # the code-token path
    one = open_index(tmp_path / "one", lambda: iter(passages), show_progress=False)
    monkeypatch.setattr(B, "PARALLEL_MIN_DOCS", 300)
    monkeypatch.setattr(B, "TOKENIZE_CHUNK", 97)
    monkeypatch.setattr(B, "_build_workers", lambda: 2)
    merged, real_merge = [], B._TokenSink._merge
    monkeypatch.setattr(B._TokenSink, "_merge", lambda self, r: (merged.append(r[0]), real_merge(self, r)))
    many = open_index(tmp_path / "many", lambda: iter(passages), show_progress=False)
    assert len(merged) == -(-(5000 - 300) // 97) and len(set(merged)) == 2  # every chunk from the 2 workers
    assert one.engine.vocab == many.engine.vocab
    for key in ("data", "indices", "indptr"):
        assert np.array_equal(one.engine.retriever.scores[key], many.engine.retriever.scores[key])
    assert (tmp_path / "one" / "corpus.jsonl").read_bytes() == (tmp_path / "many" / "corpus.jsonl").read_bytes()


def test_resolve_backend():
    assert B.resolve_backend("auto", 10, 10) == "pruned"
    assert B.resolve_backend("auto", 10, 10, exhaustive=True) == "numpy"
    assert B.resolve_backend("auto", 10**5, 10**6, exhaustive=True) == "numba"
    with pytest.raises(ValueError, match="cannot use the pruned"):
        B.resolve_backend("pruned", 1, 1, exhaustive=True)


def test_topk_equal_is_tie_aware():
    a = (np.array([1, 2, 3]), np.array([3.0, 2.0, 1.0]))
    assert topk_equal(a, (np.array([2, 1, 9]), np.array([3.0, 2.0, 1.0]))) is False  # rows above the cut differ
    assert topk_equal(a, (np.array([1, 2, 9]), np.array([3.0, 2.0, 1.0])))  # only the tied cut differs
    assert not topk_equal(a, (np.array([1, 2, 3]), np.array([3.0, 2.0, 1.5])))
