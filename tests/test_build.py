"""``build``: task datasets from query examples made of real NQ-open text (data/sample/nq_open)."""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import random
from pathlib import Path

import pytest

from data_prep import build as B
from data_prep.io import DataError, MissingInputError, read_records, write_jsonl
from data_prep.records import LabelledPair, Passage, QueryExample
from data_prep.stats import LengthHistogram, dataset_stats, format_report, passage_words
from data_prep.text import contains_answer, split_sentences

NQ = Path(__file__).resolve().parents[1] / "data" / "sample" / "nq_open" / "nq-open-oracle.jsonl.gz"
N_QUERIES = 48


@pytest.fixture(scope="module")
def nq_rows() -> list[dict]:
    with gzip.open(NQ, "rt", encoding="utf-8") as f:
        return [json.loads(next(f)) for _ in range(N_QUERIES + 4)]


def _gold(i: int, row: dict) -> Passage:
    ctx = row["ctxs"][0]
    return Passage(id=f"nq-{i}", title=ctx["title"], text=ctx["text"], metadata={"hasanswer": ctx["hasanswer"]})


@pytest.fixture(scope="module")
def examples(nq_rows) -> list[QueryExample]:
    """NQ questions, their gold passage as positive, other questions' gold passages (that do not
    contain the answer) as mined negatives - plus the special cases the builder must handle."""
    pool = [_gold(i, r) for i, r in enumerate(nq_rows)]
    out = []
    for i, r in enumerate(nq_rows[:N_QUERIES]):
        negs = []
        for j in random.Random(i).sample(range(N_QUERIES), N_QUERIES):
            p = pool[j]
            if j != i and not contains_answer(p.full_text(" "), r["answers"]):
                meta = {"rank": len(negs) + 1, "score": round(20 - len(negs) * 0.5, 2), "kind": "hard" if len(negs) < 6 else "easy"}
                negs.append(Passage(p.id, p.text, p.title, meta))
            if len(negs) == 12:
                break
        out.append(QueryExample(f"nq-q{i}", r["question"], [pool[i]], negs, r["answers"], "nq-open"))
    # special cases, each a real NQ question/passage
    r = nq_rows[N_QUERIES]
    out.append(QueryExample("short", r["question"], [pool[N_QUERIES]], out[0].negatives[:3], r["answers"], "nq-open"))
    r = nq_rows[N_QUERIES + 1]
    out.append(QueryExample("nopos", r["question"], [], out[1].negatives[:9], r["answers"], "nq-open"))
    r = nq_rows[N_QUERIES + 2]
    out.append(QueryExample("noans", r["question"], [pool[N_QUERIES + 2]], out[2].negatives, [], "nq-open"))
    r = nq_rows[N_QUERIES + 3]
    rat = pool[N_QUERIES + 3]
    rat = Passage(rat.id, rat.text, rat.title, {"rationale_sentences": [0]})
    out.append(QueryExample("rationale", r["question"], [rat], out[3].negatives, [], "nq-open"))
    return out


@pytest.fixture(scope="module")
def input_file(tmp_path_factory, examples) -> Path:
    path = tmp_path_factory.mktemp("in") / "examples.jsonl"
    write_jsonl(path, examples)
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory, input_file) -> Path:
    out = tmp_path_factory.mktemp("built") / "ds"
    B.build(B.BuildConfig(input=str(input_file), output=str(out), dev_ratio=0.25, seed=13))
    return out


def _read(path: Path, cls=LabelledPair) -> list:
    return list(read_records(path, cls))


def _by_split(out: Path, task: str, kind: str = "pairs", cls=LabelledPair) -> dict[str, list]:
    return {s: _read(out / task / f"{s}.{kind}.jsonl", cls) for s in B.SPLITS}


# ----------------------------------------------------------------------------- split


def test_split_is_by_query_without_overlap(built, examples):
    meta = json.loads((built / "meta.json").read_text())
    ids: dict[str, set[str]] = {}
    for task, kind in [("evaluator", "pairs"), ("evaluator", "groups"), ("answer", "pairs"), ("extractor", "pairs")]:
        cls = QueryExample if kind == "groups" else LabelledPair
        for split, recs in _by_split(built, task, kind, cls).items():
            qids = {r.metadata["query_id"] if cls is QueryExample else r.query_id for r in recs}
            assert all(B.split_of(q, 13, 0.25) == split for q in qids)
            ids.setdefault(split, set()).update(qids)
    assert ids["train"] and ids["dev"] and not ids["train"] & ids["dev"]
    texts = {s: {r.query for r in _read(built / "evaluator" / f"{s}.pairs.jsonl")} for s in B.SPLITS}
    assert not texts["train"] & texts["dev"]
    assert meta["queries"]["train"] + meta["queries"]["dev"] == len(examples)


def test_split_of_is_seeded_and_near_ratio():
    ids = [f"q{i}" for i in range(4000)]
    dev = [q for q in ids if B.split_of(q, 13, 0.1) == "dev"]
    assert 0.08 < len(dev) / len(ids) < 0.12
    assert dev == [q for q in ids if B.split_of(q, 13, 0.1) == "dev"]
    assert dev != [q for q in ids if B.split_of(q, 14, 0.1) == "dev"]
    assert all(B.split_of(q, 13, 0.0) == "train" for q in ids[:100])


def test_build_is_deterministic_and_independent_of_file_order(tmp_path, input_file, built, examples):
    B.build(B.BuildConfig(input=str(input_file), output=str(tmp_path / "again"), dev_ratio=0.25, seed=13))
    for f in sorted(built.rglob("*.jsonl")) + [built / "stats.json"]:
        assert (tmp_path / "again" / f.relative_to(built)).read_bytes() == f.read_bytes(), f
    shuffled = tmp_path / "shuffled.jsonl"
    lines = input_file.read_text(encoding="utf-8").splitlines(keepends=True)
    random.Random(0).shuffle(lines)
    shuffled.write_text("".join(lines), encoding="utf-8")
    B.build(B.BuildConfig(input=str(shuffled), output=str(tmp_path / "shuf"), dev_ratio=0.25, seed=13))
    for f in built.rglob("*.jsonl"):
        a = sorted(f.read_text(encoding="utf-8").splitlines())
        assert sorted((tmp_path / "shuf" / f.relative_to(built)).read_text(encoding="utf-8").splitlines()) == a, f
    B.build(B.BuildConfig(input=str(input_file), output=str(tmp_path / "seed7"), dev_ratio=0.25, seed=7))
    dev7 = {p.query_id for p in _read(tmp_path / "seed7" / "evaluator" / "dev.pairs.jsonl")}
    dev13 = {p.query_id for p in _read(built / "evaluator" / "dev.pairs.jsonl")}
    assert dev7 != dev13


# ----------------------------------------------------------------------------- evaluator


def test_evaluator_pairs_labels_and_skips(built, examples):
    pairs = [p for s in _by_split(built, "evaluator").values() for p in s]
    by_q: dict[str, list[LabelledPair]] = {}
    for p in pairs:
        by_q.setdefault(p.query_id, []).append(p)
    ex = {e.id: e for e in examples}
    assert "nopos" not in by_q and set(by_q) == set(ex) - {"nopos"}
    for qid, ps in by_q.items():
        pos = [p for p in ps if p.label == 1.0]
        assert [p.passage for p in pos] == ex[qid].positives
        assert [p.passage for p in ps if p.label == 0.0] == ex[qid].negatives
        assert all(p.label_source == "human" for p in ps)
        assert {p.metadata["role"] for p in pos} == {"positive"}
    meta = json.loads((built / "meta.json").read_text())
    assert meta["skipped"]["evaluator"] == {"no-positives": 1}
    assert meta["skipped_examples"]["evaluator:no-positives"] == ["nopos"]


def test_group_shapes_sampling_and_padding(built, examples):
    groups = [g for s in _by_split(built, "evaluator", "groups", QueryExample).values() for g in s]
    ex = {e.id: e for e in examples}
    assert len(groups) == len(examples) - 1  # one positive each; "nopos" has none
    for g in groups:
        src = ex[g.metadata["query_id"]]
        assert g.id == f"{src.id}#g0" and g.positives == src.positives
        assert len(g.negatives) == 7
        assert all(n in src.negatives for n in g.negatives)
        assert not {n.id for n in g.negatives} & {p.id for p in src.positives}
        if src.id == "short":  # 3 negatives: each used once, 4 resampled
            assert g.metadata["padded"] is True and {n.id for n in g.negatives} == {n.id for n in src.negatives}
        else:
            assert g.metadata["padded"] is False and len({n.id for n in g.negatives}) == 7
    meta = json.loads((built / "meta.json").read_text())
    assert meta["groups"]["padded"] == 1
    assert meta["skipped"]["evaluator-groups"] == {"no-positives": 1}


def test_groups_differ_per_positive_and_drop_mode(examples):
    ex = examples[0]
    two = QueryExample(ex.id, ex.query, ex.positives + examples[1].positives, ex.negatives, ex.answers)
    groups, notes = B.evaluator_groups(two, group_size=4, seed=13)
    assert [len(g.negatives) for g in groups] == [3, 3] and not notes
    assert [g.negatives for g in groups] == [g.negatives for g in B.evaluator_groups(two, 4, 13)[0]]
    assert groups[0].negatives != groups[1].negatives
    short = next(e for e in examples if e.id == "short")
    assert B.evaluator_groups(short, 8, 13, "drop") == ([], {"dropped:too-few-negatives": 1})
    none = QueryExample("x", "q", short.positives, [])
    assert B.evaluator_groups(none, 8, 13) == ([], {"dropped:no-negatives": 1})


def test_max_negatives_per_query(tmp_path, input_file, examples):
    out = tmp_path / "cap"
    meta = B.build(B.BuildConfig(str(input_file), str(out), tasks=("evaluator",), max_negatives_per_query=5))
    pairs = _read(out / "evaluator" / "train.pairs.jsonl") + _read(out / "evaluator" / "dev.pairs.jsonl")
    negs: dict[str, list[Passage]] = {}
    for p in pairs:
        if p.label == 0:
            negs.setdefault(p.query_id, []).append(p.passage)
    ex = {e.id: e for e in examples}
    for qid, ns in negs.items():
        assert len(ns) == min(5, len(ex[qid].negatives))
        ranks = [n.metadata["rank"] for n in ns]
        assert ranks == sorted(ranks)  # a sample that keeps rank order
    expected = sum(max(0, len(e.negatives) - 5) for e in examples if e.positives)
    assert meta["dropped_negatives"]["over-max-negatives-per-query"] == expected + 4  # nopos: 9 -> 5
    assert meta["groups"]["padded"] == len(examples) - 1  # 5 < 7 negatives everywhere
    assert not (out / "answer").exists()


# ----------------------------------------------------------------------------- answer


def test_answer_labels_from_answer_match(built, examples):
    pairs = [p for s in _by_split(built, "answer").values() for p in s]
    ex = {e.id: e for e in examples}
    assert {p.query_id for p in pairs} == set(ex) - {"noans", "rationale"}
    for p in pairs:
        assert p.label_source == "answer-match"
        assert p.label == float(contains_answer(p.passage.full_text(" "), ex[p.query_id].answers))
    # NQ gold passages contain the answer; the negatives were chosen not to
    assert all(p.label == 1.0 for p in pairs if p.metadata["role"] == "positive")
    assert all(p.label == 0.0 for p in pairs if p.metadata["role"] == "negative")
    meta = json.loads((built / "meta.json").read_text())
    assert meta["skipped"]["answer"] == {"no-answers": 2}


def test_answer_labels_negative_containing_answer(examples):
    ex = examples[0]
    leak = Passage("leak", f"As reported, the answer is {ex.answers[0]}.", "Leak")
    pairs, skips = B.answer_pairs(QueryExample(ex.id, ex.query, ex.positives, [leak], ex.answers))
    assert not skips and [p.label for p in pairs] == [1.0, 1.0]


def test_answer_labels_from_msmarco_selection(examples):
    ex = examples[5]
    answered = QueryExample("m1", ex.query, ex.positives, ex.negatives[:2], ["A free-text answer that no passage contains."], "hf-msmarco")
    pairs, skips = B.answer_pairs(answered)
    assert not skips
    assert [(p.label, p.label_source) for p in pairs] == [(1.0, "human"), (0.0, "human"), (0.0, "human")]
    for answers in ([], ["No Answer Present."]):
        unanswered = QueryExample("m2", ex.query, ex.positives, ex.negatives[:2], answers, "hf-msmarco")
        assert [p.label for p in B.answer_pairs(unanswered)[0]] == [0.0, 0.0, 0.0]


# ----------------------------------------------------------------------------- extractor


def test_extractor_sentence_labels(built, examples):
    pairs = [p for s in _by_split(built, "extractor").values() for p in s]
    ex = {e.id: e for e in examples}
    assert "noans" not in {p.query_id for p in pairs} and "nopos" not in {p.query_id for p in pairs}
    for p in pairs:
        parent = ex[p.query_id].positives[0]
        k = p.passage.metadata["sentence_index"]
        assert p.passage.id == f"{parent.id}#s{k}"
        assert p.passage.metadata["parent_id"] == parent.id
        assert p.passage.metadata["parent_text"] == parent.text
        assert p.passage.text == split_sentences(parent.text)[k]
        if p.query_id == "rationale":
            assert (p.label, p.label_source) == (float(k == 0), "human")
        else:
            assert p.label == float(contains_answer(p.passage.text, ex[p.query_id].answers))
            assert p.label_source == "answer-match"
    # every passage that produced sentences has at least one labelled 1, and all its sentences
    by_parent: dict[str, list[LabelledPair]] = {}
    for p in pairs:
        by_parent.setdefault(p.passage.metadata["parent_id"], []).append(p)
    for parent_id, ps in by_parent.items():
        assert any(p.label == 1.0 for p in ps)
        assert sorted(p.passage.metadata["sentence_index"] for p in ps) == list(range(len(ps)))
    meta = json.loads((built / "meta.json").read_text())
    assert meta["skipped"]["extractor"]["no-answers-or-rationales"] == 1
    assert meta["skipped"]["extractor"]["no-positives"] == 1


def test_extractor_first_nq_question(nq_rows):
    r = nq_rows[0]  # "who got the first nobel prize in physics" -> Wilhelm Conrad Röntgen
    ex = QueryExample("q", r["question"], [_gold(0, r)], [], r["answers"])
    pairs, skips = B.extractor_pairs(ex)
    assert [p.label for p in pairs][:2] == [1.0, 0.0] and sum(p.label for p in pairs) == 1
    assert pairs[0].passage.text.startswith("The first Nobel Prize in Physics was awarded in 1901")
    assert not skips
    unanswerable = QueryExample("q", r["question"], [_gold(0, r)], [], ["Marie Curie of Mars"])
    assert B.extractor_pairs(unanswerable) == ([], {"passages-without-answer-sentence": 1, "no-answer-sentence": 1})


def test_bad_rationale_is_reported_with_file_and_line(tmp_path, examples):
    ex = examples[3]
    bad = Passage(ex.positives[0].id, ex.positives[0].text, ex.positives[0].title, {"rationale_sentences": [99]})
    path = tmp_path / "bad.jsonl"
    write_jsonl(path, [examples[0], QueryExample("bad", ex.query, [bad], ex.negatives, ex.answers)])
    with pytest.raises(DataError, match=r"bad\.jsonl:2: passage 'nq-3': rationale sentence index 99 is outside"):
        B.build(B.BuildConfig(str(path), str(tmp_path / "out")))
    assert not (tmp_path / "out" / "meta.json").exists() and not list((tmp_path / "out").rglob("*.jsonl"))
    meta = B.build(B.BuildConfig(str(path), str(tmp_path / "out2"), skip_bad=True))
    assert meta["rejects"] == {"total": 1, "by_reason": {"invalid-for-build": 1}, "dir": "rejects"}
    assert (tmp_path / "out2" / "rejects" / "bad.jsonl.rejected").read_bytes() == path.read_bytes().splitlines(True)[1]


# ----------------------------------------------------------------------------- meta, stats, output


def test_meta_and_stats_content(built, input_file):
    meta = json.loads((built / "meta.json").read_text())
    stats = json.loads((built / "stats.json").read_text())
    assert meta["input"]["sha256"] == hashlib.sha256(input_file.read_bytes()).hexdigest()
    assert meta["input"]["record_type"] == "query"
    assert meta["parameters"] == {
        "tasks": ["evaluator", "answer", "extractor"], "dev_ratio": 0.25, "seed": 13, "group_size": 8,
        "max_negatives_per_query": None, "short_groups": "pad", "input_type": "query", "skip_bad": False,
        "sentence_max_chars": 600,
    }
    assert meta["records_read"] == N_QUERIES + 4
    for rel, n in meta["files"].items():
        assert len((built / rel).read_text().splitlines()) == n
        task, name = rel.split("/")
        split, kind, _ = name.split(".")
        assert meta["counts"][task][split][kind] == n == stats[task][kind][split]["records"]
    for split in B.SPLITS:
        pairs = _read(built / "evaluator" / f"{split}.pairs.jsonl")
        assert stats["evaluator"]["pairs"][split] == dataset_stats(pairs)
        s = stats["evaluator"]["pairs"][split]
        assert s["positives"] == sum(p.label == 1 for p in pairs) and s["positives"] + s["negatives"] == len(pairs)
        lens = sorted(passage_words(p.passage) for p in pairs)
        assert s["passage_words"]["p90"] == lens[math.ceil(0.9 * len(lens)) - 1]
        assert s["queries"] == len({p.query_id for p in pairs})
    report = format_report(stats)
    assert "evaluator  groups  train" in report and "p50/90/99" in report


def test_dataset_stats_values():
    h = LengthHistogram()
    for x in [5, 1, 3, 2, 4, 10, 7, 8, 9, 6]:
        h.add(x)
    assert (h.percentile(50), h.percentile(90), h.percentile(99)) == (5, 9, 10)
    pairs = [
        LabelledPair("a", "two words", Passage("p1", "one two three"), 1.0, "human"),
        LabelledPair("a", "two words", Passage("p2", "x", title="T"), 0.0, "human"),
        LabelledPair("b", "three words here", Passage("p3", "a b c d e"), 0.5, "llm"),
    ]
    s = dataset_stats(pairs)
    assert (s["records"], s["queries"], s["positives"], s["negatives"]) == (3, 2, 2, 1)
    assert s["mean_label"] == 0.5 and s["label_sources"] == {"human": 2, "llm": 1}
    assert s["query_words"] == {"count": 2, "mean": 2.5, "min": 2, "p50": 2, "p90": 3, "p99": 3, "max": 3}
    assert s["passage_words"]["p50"] == 3 and s["passage_words"]["min"] == 2  # "T x"


def test_refuses_non_empty_output_unless_overwrite(tmp_path, input_file):
    out = tmp_path / "ds"
    B.build(B.BuildConfig(str(input_file), str(out)))
    with pytest.raises(ValueError, match=r"output folder .*ds is not empty; pass --overwrite"):
        B.build(B.BuildConfig(str(input_file), str(out), tasks=("evaluator",)))
    (out / "notes.txt").write_text("mine")
    B.build(B.BuildConfig(str(input_file), str(out), tasks=("evaluator",), overwrite=True))
    assert not (out / "answer").exists() and not (out / "extractor").exists()  # stale tasks removed
    assert (out / "notes.txt").read_text() == "mine"  # other files left alone
    assert json.loads((out / "meta.json").read_text())["parameters"]["tasks"] == ["evaluator"]
    assert not list(out.rglob("*.tmp"))


def test_empty_and_missing_input(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n  \n")
    with pytest.raises(DataError, match=r"empty\.jsonl: empty input file"):
        B.build(B.BuildConfig(str(empty), str(tmp_path / "o")))
    with pytest.raises(MissingInputError, match=r"input file not found: .*absent\.jsonl"):
        B.build(B.BuildConfig(str(tmp_path / "absent.jsonl"), str(tmp_path / "o")))
    assert not (tmp_path / "o").exists()


def test_bad_rows_strict_and_skip_bad(tmp_path, examples):
    path = tmp_path / "mixed.jsonl"
    good = [json.dumps(e.to_dict(), ensure_ascii=False) for e in examples[:4]]
    path.write_text("\n".join([good[0], '{"id": "x", "query": ""}', good[1], "{oops", *good[2:]]) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"mixed\.jsonl:2: query example: field 'query' is empty"):
        B.build(B.BuildConfig(str(path), str(tmp_path / "strict")))
    meta = B.build(B.BuildConfig(str(path), str(tmp_path / "skip"), skip_bad=True))
    assert meta["records_read"] == 4
    assert meta["rejects"]["by_reason"] == {"invalid-json": 1, "invalid-record": 1}
    assert (tmp_path / "skip" / "rejects" / "mixed.jsonl.rejected").read_text().splitlines() == ['{"id": "x", "query": ""}', "{oops"]
    allbad = tmp_path / "allbad.jsonl"
    allbad.write_text("{oops\n")
    with pytest.raises(DataError, match=r"allbad\.jsonl: no valid records \(1 rejected"):
        B.build(B.BuildConfig(str(allbad), str(tmp_path / "none"), skip_bad=True))


def test_labelled_pair_input(tmp_path, examples):
    pairs = []
    for e in examples[:20]:
        pairs += B.evaluator_pairs(e)
    pairs[1] = LabelledPair(pairs[1].query_id, pairs[1].query, pairs[1].passage, 0.3, "llm")
    path = tmp_path / "pairs.jsonl"
    write_jsonl(path, pairs)
    out = tmp_path / "out"
    meta = B.build(B.BuildConfig(str(path), str(out), group_size=4))
    assert meta["input"]["record_type"] == "pair" and meta["parameters"]["tasks"] == ["evaluator"]
    got = _read(out / "evaluator" / "train.pairs.jsonl") + _read(out / "evaluator" / "dev.pairs.jsonl")
    assert sorted(json.dumps(p.to_dict(), sort_keys=True) for p in got) == sorted(json.dumps(p.to_dict(), sort_keys=True) for p in pairs)
    groups = _read(out / "evaluator" / "train.groups.jsonl", QueryExample) + _read(out / "evaluator" / "dev.groups.jsonl", QueryExample)
    assert len(groups) == 20 and all(len(g.positives) == 1 and len(g.negatives) == 3 for g in groups)
    meta = B.build(B.BuildConfig(str(path), str(tmp_path / "ans"), tasks=("answer",)))
    assert meta["counts"]["answer"]["train"]["pairs"] + meta["counts"]["answer"]["dev"]["pairs"] == len(pairs)
    with pytest.raises(ValueError, match="extractor task needs query examples"):
        B.build(B.BuildConfig(str(path), str(tmp_path / "ext"), tasks=("extractor",)))


def test_config_validation():
    with pytest.raises(ValueError, match=r"--group-size must be at least 2"):
        B.BuildConfig("i", "o", group_size=1)
    with pytest.raises(ValueError, match=r"--dev-ratio must be in \[0, 1\)"):
        B.BuildConfig("i", "o", dev_ratio=1.0)
    with pytest.raises(ValueError, match=r"unknown task\(s\) rerank"):
        B.BuildConfig("i", "o", tasks=("evaluator", "rerank"))


# ----------------------------------------------------------------------------- CLI


def test_cli(tmp_path, input_file, capsys):
    from data_prep.cli import main

    out = tmp_path / "cli"
    argv = ["build", "--input", str(input_file), "--output", str(out), "--tasks", "evaluator,answer",
            "--dev-ratio", "0.2", "--seed", "5", "--group-size", "4", "--max-negatives-per-query", "6"]
    assert main(argv) == 0
    report = capsys.readouterr().out
    assert "evaluator  pairs   train" in report and "answer" in report and "extractor" not in report
    meta = json.loads((out / "meta.json").read_text())
    assert meta["parameters"]["group_size"] == 4 and meta["parameters"]["seed"] == 5
    assert all(len(g.negatives) == 3 for g in _read(out / "evaluator" / "train.groups.jsonl", QueryExample))
    assert main(argv) == 2
    assert "is not empty; pass --overwrite" in capsys.readouterr().err
    assert main([*argv, "--overwrite"]) == 0
    assert main(["build", "--input", str(tmp_path / "nope.jsonl"), "--output", str(tmp_path / "x")]) == 2
    assert capsys.readouterr().err.strip() == f"error: input file not found: {tmp_path / 'nope.jsonl'}"
    with pytest.raises(SystemExit):
        main(["build", "--input", str(input_file), "--output", str(tmp_path / "y"), "--tasks", "evaluator,bogus"])


def test_unknown_label_source_is_reported_with_file_and_line(tmp_path, examples):
    ex = examples[4]
    bad = QueryExample(ex.id, ex.query, ex.positives, ex.negatives, ex.answers, ex.source, {"label_source": "gold"})
    path = tmp_path / "ls.jsonl"
    write_jsonl(path, [bad])
    with pytest.raises(DataError, match=r"ls\.jsonl:1: passage 'nq-4': label_source 'gold' is not one of human, "):
        B.build(B.BuildConfig(str(path), str(tmp_path / "out")))
