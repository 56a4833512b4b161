"""Compiled BM25 kernels over the bm25s score matrix: the index build, block maxima, and an exact
top-k search with dynamic pruning (MaxScore with block-max bounds).

The score matrix is bm25s's CSC layout, which is a postings file: for term ``t``,
``indices[indptr[t]:indptr[t+1]]`` are the documents that hold it, ascending, and ``data[...]`` their
precomputed BM25 contributions (float32). Nothing at query time needs a term frequency or a length.

**Build** (:func:`build_csc_compiled`): a counting sort instead of a global sort. One pass counts each
term's document frequency, a second writes every (term, document) posting straight to its place, so
the build is linear in the tokens and needs the token ids plus the output (8 bytes a posting), not the
several sorted copies that ``numpy.unique`` / ``argsort`` need. Its arrays equal
:func:`data_prep.bm25.build_csc`'s bit for bit (``tests/test_postings.py``).

**Block maxima** (:func:`block_meta`): each term's postings are cut into blocks of :data:`BLOCK`;
for each block the last document and the largest contribution are kept (8 bytes a block), and
for each term its largest contribution (its upper bound).

**Search** (:func:`search`), document at a time, one query per thread (numba ``prange``):

* the query's terms are sorted by upper bound; with ``theta`` the k-th best score so far, the
  terms whose upper bounds add up to at most ``theta`` are *non-essential* (MaxScore, Turtle and
  Flood 1995): a document that holds only those cannot enter the top k, so candidates come only
  from the other (essential, rarer) terms' postings;
* a candidate's essential contributions are read where the cursors stand; before a non-essential
  term's postings are touched, the bound "essential part + the block maxima of the blocks that
  could hold the document" is checked (block-max, Ding and Suel 2011), then each non-essential term
  is looked up by galloping over the block ends, stopping as soon as the partial score plus what
  is left cannot reach ``theta``;
* a document that survives gets its score summed in query-term order in float32, exactly as the
  exhaustive path sums it, and competes by (score descending, row ascending).

Exactness: every bound is a float64 sum of float32 values, inflated by a relative slack larger than
float32's summation error, so a document is pruned only when its float32 score cannot exceed
``theta``; a document whose score equals ``theta`` comes later in row order than every document in
the heap and so cannot displace one. The top k therefore equals the exhaustive top k under the
same tie rule (:func:`search_exhaustive`, tested), scores included.
"""

from __future__ import annotations

import numpy as np

try:  # the kernels need numba (the ``data`` extra); callers check :data:`AVAILABLE`
    import numba
    from numba import njit, prange

    AVAILABLE = True
except ImportError:  # pragma: no cover - exercised only without the data extra
    AVAILABLE = False

    def njit(*args, **kwargs):  # type: ignore[no-redef]
        def wrap(fn):
            return fn

        return wrap if not (args and callable(args[0])) else args[0]

    prange = range  # type: ignore[assignment]

#: postings per block of the block-max metadata (Lucene and PISA use 128 too)
BLOCK = 128
_EPS32 = 2.0**-23  # float32's relative rounding step
#: lists of at most this many postings or blocks give the first threshold estimate
_ESTIMATE_MAX = 1 << 13


# --------------------------------------------------------------------------------------------
# Build
# --------------------------------------------------------------------------------------------


@njit(cache=True, nogil=True)
def _sort_small(a):
    """Insertion sort in place (a document's tokens: tens of items)."""
    for i in range(1, len(a)):
        x = a[i]
        j = i - 1
        while j >= 0 and a[j] > x:
            a[j + 1] = a[j]
            j -= 1
        a[j + 1] = x


@njit(cache=True, nogil=True)
def _doc_sorted(flat, lo, hi, buf):
    """Document ``flat[lo:hi]``'s token ids, sorted, in ``buf`` (grown when too small)."""
    n = hi - lo
    if len(buf) < n:
        buf = np.empty(2 * n, flat.dtype)
    tok = buf[:n]
    tok[:] = flat[lo:hi]
    if n > 64:
        tok.sort()
    else:
        _sort_small(tok)
    return tok, buf


@njit(cache=True, nogil=True)
def _count_df(flat, starts, n_vocab):
    df = np.zeros(n_vocab, np.int64)
    buf = np.empty(0, flat.dtype)
    for d in range(len(starts) - 1):
        n = starts[d + 1] - starts[d]
        if n == 0:
            continue
        tok, buf = _doc_sorted(flat, starts[d], starts[d + 1], buf)
        df[tok[0]] += 1
        for j in range(1, n):
            if tok[j] != tok[j - 1]:
                df[tok[j]] += 1
    return df


@njit(cache=True, nogil=True)
def _scatter(flat, starts, indptr, idf, norm, k1p1, indices, data):
    cursor = indptr[:-1].copy()
    buf = np.empty(0, flat.dtype)
    for d in range(len(starts) - 1):
        n = starts[d + 1] - starts[d]
        if n == 0:
            continue
        tok, buf = _doc_sorted(flat, starts[d], starts[d + 1], buf)
        j = 0
        while j < n:
            t = tok[j]
            e = j + 1
            while e < n and tok[e] == t:
                e += 1
            tf = np.float32(e - j)
            # the same float32/float64 steps as data_prep.bm25.build_csc (numpy's promotion rules)
            num = np.float64(tf * k1p1)
            s = idf[t] * num / (np.float64(tf) + norm[d])
            p = cursor[t]
            indices[p] = d
            data[p] = np.float32(s)
            cursor[t] = p + 1
            j = e


def build_csc_compiled(flat_ids: np.ndarray, doc_lens: np.ndarray, n_vocab: int, params) -> dict:
    """:func:`data_prep.bm25.build_csc` by counting sort (same arrays, bit for bit)."""
    from .bm25 import okapi_idf

    flat = np.ascontiguousarray(flat_ids, dtype=np.int32)
    doc_lens = np.asarray(doc_lens, dtype=np.int64)
    n_docs = len(doc_lens)
    starts = np.zeros(n_docs + 1, np.int64)
    np.cumsum(doc_lens, out=starts[1:])
    df = _count_df(flat, starts, n_vocab)
    idf = okapi_idf(df, n_docs, params.epsilon)
    avgdl = float(doc_lens.mean()) if n_docs else 0.0
    norm = params.k1 * (1.0 - params.b + params.b * doc_lens / avgdl) if n_docs else np.zeros(0)
    indptr = np.zeros(n_vocab + 1, dtype=np.int64)
    np.cumsum(df, out=indptr[1:])
    nnz = int(indptr[-1])
    indices = np.empty(nnz, np.int32)
    data = np.empty(nnz, np.float32)
    _scatter(flat, starts, indptr, idf, np.asarray(norm, np.float64), np.float32(params.k1 + 1.0), indices, data)
    return {"data": data, "indices": indices, "indptr": indptr, "num_docs": n_docs}


# --------------------------------------------------------------------------------------------
# Block maxima
# --------------------------------------------------------------------------------------------


@njit(cache=True, parallel=True)
def _block_meta(indptr, indices, data, block):
    n_terms = len(indptr) - 1
    bptr = np.zeros(n_terms + 1, np.int64)
    for t in range(n_terms):
        bptr[t + 1] = bptr[t] + (indptr[t + 1] - indptr[t] + block - 1) // block
    nb = bptr[n_terms]
    blast = np.empty(nb, np.int32)
    bmax = np.empty(nb, np.float32)
    tmax = np.zeros(n_terms, np.float32)
    for t in prange(n_terms):
        lo, hi = indptr[t], indptr[t + 1]
        b = bptr[t]
        top = np.float32(0.0)
        s = lo
        while s < hi:
            e = min(s + block, hi)
            m = data[s]
            for j in range(s + 1, e):
                if data[j] > m:
                    m = data[j]
            blast[b] = indices[e - 1]
            bmax[b] = m
            if m > top:
                top = m
            b += 1
            s = e
        tmax[t] = top
    return bptr, blast, bmax, tmax


def block_meta(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, block: int = BLOCK) -> dict[str, np.ndarray]:
    """``{"bptr", "blast", "bmax", "tmax"}``: term ``t``'s blocks are ``bptr[t]:bptr[t+1]``, block
    ``b`` covers postings ``indptr[t] + (b - bptr[t]) * block`` onwards, ends at document
    ``blast[b]`` and holds contributions of at most ``bmax[b]``; ``tmax[t]`` bounds the whole term."""
    bptr, blast, bmax, tmax = _block_meta(np.asarray(indptr), np.asarray(indices), np.asarray(data), block)
    return {"bptr": bptr, "blast": blast, "bmax": bmax, "tmax": tmax}


# --------------------------------------------------------------------------------------------
# Search
# --------------------------------------------------------------------------------------------


@njit(cache=True, nogil=True)
def _gallop(arr, lo, hi, target):
    """First position in ``[lo, hi)`` with ``arr[pos] >= target`` (``hi`` if none); ``arr`` ascending."""
    if lo >= hi or arr[lo] >= target:
        return lo
    step = 1
    prev = lo
    pos = lo + 1
    while pos < hi and arr[pos] < target:
        prev = pos
        pos = lo + 2 * step
        step *= 2
    if pos > hi:
        pos = hi
    a, b = prev + 1, pos  # arr[prev] < target; answer in [prev+1, pos]
    while a < b:
        mid = (a + b) >> 1
        if arr[mid] < target:
            a = mid + 1
        else:
            b = mid
    return a


@njit(cache=True, nogil=True)
def _worse(s1, r1, s2, r2):
    """(s1, r1) ranks below (s2, r2): lower score, or the same score and a larger row."""
    return s1 < s2 or (s1 == s2 and r1 > r2)


@njit(cache=True, nogil=True)
def _swap(hs, hr, i, j):
    hs[i], hs[j] = hs[j], hs[i]
    hr[i], hr[j] = hr[j], hr[i]


@njit(cache=True, nogil=True)
def _sift_down(hs, hr, n, i):
    """The k-best heap keeps its worst entry at the root (a min-heap under :func:`_worse`)."""
    while True:
        c = 2 * i + 1
        if c >= n:
            return
        if c + 1 < n and _worse(hs[c + 1], hr[c + 1], hs[c], hr[c]):
            c += 1
        if not _worse(hs[c], hr[c], hs[i], hr[i]):
            return
        _swap(hs, hr, i, c)
        i = c


@njit(cache=True, nogil=True)
def _sift_up(hs, hr, i):
    while i > 0:
        p = (i - 1) >> 1
        if not _worse(hs[i], hr[i], hs[p], hr[p]):
            return
        _swap(hs, hr, i, p)
        i = p


@njit(cache=True, nogil=True)
def _offer(hs, hr, hn, k, sc, d):
    """Offer document ``d`` scoring ``sc`` to the k-best heap of ``hn`` entries; returns the new
    size and whether it entered."""
    if hn < k:
        hs[hn] = sc
        hr[hn] = d
        _sift_up(hs, hr, hn)
        return hn + 1, True
    if _worse(hs[0], hr[0], sc, d):
        hs[0] = sc
        hr[0] = d
        _sift_down(hs, hr, hn, 0)
        return hn, True
    return hn, False


@njit(cache=True, nogil=True)
def _finish(hs, hr, n, out_rows, out_scores):
    """Heap -> output sorted by score descending, then row ascending."""
    # heap sort: repeatedly move the worst to the end
    m = n
    while m > 1:
        _swap(hs, hr, 0, m - 1)
        m -= 1
        _sift_down(hs, hr, m, 0)
    for i in range(n):
        out_rows[i] = hr[i]
        out_scores[i] = hs[i]


@njit(cache=True, nogil=True)
def _out(bound, slack, theta, theta0, full):
    """A document whose score is at most ``bound`` cannot enter the top k: it falls below the
    first estimate, or (heap full) it cannot beat the k-th score."""
    b = bound * slack
    return b < theta0 or (full and b <= theta)


@njit(cache=True, nogil=True)
def _search_one(terms, indptr, indices, data, bptr, blast, bmax, tmax, k, block, out_rows, out_scores):
    """Top ``k`` of one query (``terms``: its known term ids in query order, repeats kept)."""
    n_pos = len(terms)
    # distinct terms with postings, their multiplicity, and each query position's term
    uterm = np.empty(n_pos, np.int64)
    uw = np.zeros(n_pos, np.float64)
    pos_u = np.full(n_pos, -1, np.int64)
    nu = 0
    for p in range(n_pos):
        t = terms[p]
        if indptr[t + 1] == indptr[t]:
            continue
        f = -1
        for j in range(nu):
            if uterm[j] == t:
                f = j
                break
        if f < 0:
            f = nu
            uterm[nu] = t
            nu += 1
        uw[f] += 1.0
        pos_u[p] = f
    if nu == 0:
        return 0
    ub = np.empty(nu, np.float64)
    for j in range(nu):
        ub[j] = uw[j] * np.float64(tmax[uterm[j]])
    order = np.argsort(ub)  # slots by upper bound, ascending
    slot_of = np.empty(nu, np.int64)
    st = np.empty(nu, np.int64)
    sw = np.empty(nu, np.float64)
    cum = np.empty(nu, np.float64)
    cur = np.empty(nu, np.int64)
    end = np.empty(nu, np.int64)
    bcur = np.empty(nu, np.int64)
    bend = np.empty(nu, np.int64)
    acc = 0.0
    for i in range(nu):
        j = order[i]
        slot_of[j] = i
        t = uterm[j]
        st[i] = t
        sw[i] = uw[j]
        acc += ub[j]
        cum[i] = acc
        cur[i] = indptr[t]
        end[i] = indptr[t + 1]
        bcur[i] = bptr[t]
        bend[i] = bptr[t + 1]
    pos_slot = np.full(n_pos, -1, np.int64)
    for p in range(n_pos):
        if pos_u[p] >= 0:
            pos_slot[p] = slot_of[pos_u[p]]
    slack = 1.0 + (n_pos + 4) * _EPS32
    # a first threshold before any document is scored: for a short list holding at least k
    # documents, its k-th largest contribution; those k documents score at least that much, so
    # the final k-th score does too (a bound to beat strictly, since ties may still enter)
    # (each block holds a document scoring its block maximum, so the k-th largest block maximum
    # of a list with at least k blocks bounds it too, at a 128th of the cost)
    theta0 = 0.0
    for i in range(nu):
        n = end[i] - cur[i]
        nb = bend[i] - bcur[i]
        v = 0.0
        if k <= nb <= _ESTIMATE_MAX:
            v = np.float64(np.partition(bmax[bcur[i] : bend[i]], nb - k)[nb - k])
        elif k <= n <= _ESTIMATE_MAX:
            v = np.float64(np.partition(data[cur[i] : end[i]], n - k)[n - k])
        v = sw[i] * v / slack
        if v > theta0:
            theta0 = v
    contrib = np.zeros(nu, np.float32)
    bb = np.zeros(nu, np.float64)
    hs = np.empty(k, np.float32)
    hr = np.empty(k, np.int64)
    hn = 0
    theta = 0.0  # the heap's k-th score once it is full: a bound to beat (ties lose on row)
    fe = 0  # slots [0, fe) are non-essential: their upper bounds together cannot make a document enter
    while fe < nu and cum[fe] * slack < theta0:
        fe += 1
    big = np.int64(1) << 62
    while True:
        d = big
        for i in range(fe, nu):
            if cur[i] < end[i]:
                x = np.int64(indices[cur[i]])
                if x < d:
                    d = x
        if d == big:
            break
        s = 0.0
        for i in range(fe, nu):
            c = np.float32(0.0)
            if cur[i] < end[i] and indices[cur[i]] == d:
                c = data[cur[i]]
                cur[i] += 1
            contrib[i] = c
            s += sw[i] * np.float64(c)
        ok = True
        if fe > 0 and _out(s + cum[fe - 1], slack, theta, theta0, hn == k):
            ok = False  # cannot enter even with every non-essential term at its maximum
        elif fe > 0:
            # block-max bound over the non-essential terms
            bound = s
            for i in range(fe):
                b = _gallop(blast, bcur[i], bend[i], d)
                bcur[i] = b
                v = 0.0
                if b < bend[i]:
                    v = sw[i] * np.float64(bmax[b])
                bb[i] = v
                bound += v
            if _out(bound, slack, theta, theta0, hn == k):
                ok = False
            else:
                rest = bound - s  # block maxima of the slots not looked up yet
                for i in range(fe - 1, -1, -1):
                    if _out(s + rest, slack, theta, theta0, hn == k):
                        ok = False
                        break
                    rest -= bb[i]
                    c = np.float32(0.0)
                    b = bcur[i]
                    if b < bend[i]:
                        t = st[i]
                        lo = indptr[t] + (b - bptr[t]) * block
                        if cur[i] > lo:
                            lo = cur[i]
                        hi = min(indptr[t] + (b - bptr[t] + 1) * block, end[i])
                        q = _gallop(indices, lo, hi, d)
                        cur[i] = q
                        if q < hi and indices[q] == d:
                            c = data[q]
                    contrib[i] = c
                    s += sw[i] * np.float64(c)
        if not ok:
            continue
        sc = np.float32(0.0)
        for p in range(n_pos):
            if pos_slot[p] >= 0:
                sc += contrib[pos_slot[p]]
        if not sc > 0:
            continue
        hn, entered = _offer(hs, hr, hn, k, sc, d)
        if entered and hn == k:
            theta = np.float64(hs[0])
            while fe < nu and _out(cum[fe], slack, theta, theta0, True):
                fe += 1
    _finish(hs, hr, hn, out_rows, out_scores)
    return hn


@njit(cache=True, parallel=True)
def _search_many(qptr, qterms, indptr, indices, data, bptr, blast, bmax, tmax, k, block, out_rows, out_scores, out_n):
    for q in prange(len(qptr) - 1):
        out_n[q] = _search_one(
            qterms[qptr[q] : qptr[q + 1]], indptr, indices, data, bptr, blast, bmax, tmax, k, block,
            out_rows[q], out_scores[q],
        )


@njit(cache=True, nogil=True)
def _exhaustive_one(terms, indptr, indices, data, n_docs, k, out_rows, out_scores):
    acc = np.zeros(n_docs, np.float32)
    for p in range(len(terms)):
        t = terms[p]
        for j in range(indptr[t], indptr[t + 1]):
            acc[indices[j]] += data[j]
    hs = np.empty(k, np.float32)
    hr = np.empty(k, np.int64)
    hn = 0
    for d in range(n_docs):
        sc = acc[d]
        if sc > 0:
            hn, _ = _offer(hs, hr, hn, k, sc, d)
    _finish(hs, hr, hn, out_rows, out_scores)
    return hn


@njit(cache=True, parallel=True)
def _exhaustive_many(qptr, qterms, indptr, indices, data, n_docs, k, out_rows, out_scores, out_n):
    for q in prange(len(qptr) - 1):
        out_n[q] = _exhaustive_one(qterms[qptr[q] : qptr[q + 1]], indptr, indices, data, n_docs, k, out_rows[q], out_scores[q])


def _pack(queries):
    lens = np.fromiter((len(q) for q in queries), dtype=np.int64, count=len(queries))
    qptr = np.zeros(len(queries) + 1, np.int64)
    np.cumsum(lens, out=qptr[1:])
    qterms = np.fromiter((t for q in queries for t in q), dtype=np.int64, count=int(qptr[-1]))
    return qptr, qterms


def _readonly(a):
    """A read-only ndarray view: memory-mapped and in-memory arrays then share one compiled
    signature (numba compiles, and caches, one version per array flavour)."""
    if not isinstance(a, np.ndarray):
        return a
    v = a.view(np.ndarray)
    v.flags.writeable = False
    return v


def _run(kernel, queries, k, n_threads, *arrays):
    arrays = tuple(_readonly(a) for a in arrays)
    n = len(queries)
    out_rows = np.zeros((n, max(k, 1)), np.int64)
    out_scores = np.zeros((n, max(k, 1)), np.float32)
    out_n = np.zeros(n, np.int64)
    if n and k > 0:
        qptr, qterms = _pack(queries)
        prev = numba.get_num_threads()
        numba.set_num_threads(max(1, min(n_threads or prev, numba.config.NUMBA_NUM_THREADS)))
        try:
            kernel(qptr, qterms, *arrays, k, *([] if kernel is _exhaustive_many else [BLOCK]), out_rows, out_scores, out_n)
        finally:
            numba.set_num_threads(prev)
    return [(out_rows[i, : out_n[i]].copy(), out_scores[i, : out_n[i]].copy()) for i in range(n)]


def search(queries, k: int, csc: dict, meta: dict, n_threads: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    """Exact top ``k`` per query (lists of term ids, repeats kept) with pruning: per query
    ``(rows, scores)`` by score descending then row ascending, scores > 0 only."""
    arrays = (np.asarray(csc["indptr"]), np.asarray(csc["indices"]), np.asarray(csc["data"]),
              meta["bptr"], meta["blast"], meta["bmax"], meta["tmax"])
    return _run(_search_many, queries, k, n_threads, *arrays)


def search_exhaustive(queries, k: int, csc: dict, n_threads: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    """The same top ``k`` scoring every posting (the reference of :func:`search`)."""
    arrays = (np.asarray(csc["indptr"]), np.asarray(csc["indices"]), np.asarray(csc["data"]), int(csc["num_docs"]))
    return _run(_exhaustive_many, queries, k, n_threads, *arrays)
