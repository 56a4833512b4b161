"""Helper scripts under scripts/ (the benchmarks themselves are run, not unit-tested)."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "crag_title_labels.py"


def _pair(qid, title, label, role, pid):
    return {"query_id": qid, "query": f"question {qid}", "label": label, "label_source": "answer-match",
            "passage": {"id": pid, "title": title, "text": f"text of {pid}"}, "metadata": {"role": role}}


def test_crag_title_labels(tmp_path):
    rows = [
        _pair("q1", "Paris", 1.0, "positive", "p1"),      # gold
        _pair("q1", "Paris", 0.0, "negative", "p2"),      # same article, no answer: relevant by title
        _pair("q1", "Lyon", 1.0, "negative", "p3"),       # answer but another article: not relevant
        _pair("q2", "Rome", 0.0, "negative", "p4"),       # no gold passage: query skipped and counted
        _pair("q3", "", 1.0, "positive", "p5"),           # gold without a title: skipped and counted
    ]
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out, stats_path = tmp_path / "out.jsonl", tmp_path / "stats.json"
    run = lambda *extra: subprocess.run([sys.executable, str(SCRIPT), "--input", str(src), "--output", str(out), *extra],
                                        capture_output=True, text=True)
    r = run("--json", str(stats_path))
    assert r.returncode == 0, r.stderr
    got = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(g["passage"]["id"], g["label"], g["label_source"]) for g in got] == [
        ("p1", 1.0, "title-match"), ("p2", 1.0, "title-match"), ("p3", 0.0, "title-match")]
    stats = json.loads(stats_path.read_text())
    assert stats["skipped_queries"] == {"no-gold-passage": 1, "gold-without-title": 1}
    assert stats["label_changes"] == {"0->1": 1, "1->0": 1, "1->1": 1}
    assert (stats["queries"], stats["pairs"], stats["positives"]) == (1, 3, 2)
    # an existing output is refused without --overwrite; a bad row names file and line
    r = run()
    assert r.returncode != 0 and "exists" in r.stderr
    src.write_text(json.dumps(rows[0]) + "\n{not json\n")
    r = run("--overwrite")
    assert r.returncode != 0 and f"{src}:2" in r.stderr and "Traceback" not in r.stderr


# --------------------------------------------------------------------------------------------
# scripts/bench_quality.py on tiny copies of the real held-out sets and a tiny evaluator export


def _quality_data(root: Path) -> tuple[Path, Path]:
    """``data/`` and ``shared/`` folders laid out as data/sample and ../shared/data, with a few rows each."""
    import gzip
    import shutil

    sample = ROOT / "data" / "sample"
    data, shared = root / "data", root / "shared"
    (data / "msmarco").mkdir(parents=True)
    triples = (sample / "msmarco" / "triples.train.small.sample.tsv").read_text(encoding="utf-8").splitlines()
    (data / "msmarco" / "triples.train.small.sample.tsv").write_text("\n".join(triples[:6]) + "\n", encoding="utf-8")
    (data / "flagembedding").mkdir()
    fe = [json.loads(line) for line in (sample / "flagembedding" / "msmarco.jsonl").read_text(encoding="utf-8").splitlines()[:3]]
    rows = "".join(json.dumps({"query": r["query"], "pos": r["pos"], "neg": r["neg"][:4]}) + "\n" for r in fe)
    for name in ("msmarco.jsonl", "reranker_examples.jsonl"):  # the second repeats the first: a duplicate
        (data / "flagembedding" / name).write_text(rows, encoding="utf-8")
    (data / "nq_open").mkdir()  # byte for byte the file the export's manifest says it trained on
    shutil.copy2(sample / "nq_open" / "nq-open-oracle.jsonl.gz", data / "nq_open" / "nq-open-oracle.jsonl.gz")
    with gzip.open(sample / "squad" / "squad-v1.1-train-articles.json.gz", "rt", encoding="utf-8") as f:
        squad = json.load(f)
    squad["data"] = [{**a, "paragraphs": a["paragraphs"][:5]} for a in squad["data"][:2]]
    (data / "squad").mkdir()
    with gzip.open(data / "squad" / "squad-v1.1-train-articles.json.gz", "wt", encoding="utf-8") as f:
        json.dump(squad, f)
    # a BEIR folder (read as "scifact") from real MS MARCO text: 20 queries, their positives judged
    beir = shared / "scifact"
    (beir / "qrels").mkdir(parents=True)
    docs, queries, qrels = {}, {}, ["query-id\tcorpus-id\tscore"]
    for i, line in enumerate(triples[:20]):
        q, pos, neg = line.split("\t")
        docs[f"d{2 * i}"], docs[f"d{2 * i + 1}"] = pos, neg
        queries[f"q{i}"] = q
        qrels.append(f"q{i}\td{2 * i}\t1")
    (beir / "corpus.jsonl").write_text("".join(json.dumps({"_id": k, "title": "", "text": v}) + "\n" for k, v in docs.items()))
    (beir / "queries.jsonl").write_text("".join(json.dumps({"_id": k, "text": v}) + "\n" for k, v in queries.items()))
    (beir / "qrels" / "train.tsv").write_text("\n".join(qrels) + "\n")
    # CRAG's evaluator layout: three SQuAD questions and one NQ-open question (a training query: dropped)
    qa = [(qa["question"], p["context"]) for a in squad["data"] for p in a["paragraphs"] for qa in p["qas"]][:3]
    nq = json.loads(gzip.open(sample / "nq_open" / "nq-open-oracle.jsonl.gz", "rt").readline())
    lines = [f"{q} [SEP] {ctx}\t1\n{q} [SEP] {squad['data'][1]['paragraphs'][0]['context']}\t0" for q, ctx in qa]
    lines.append(f"{nq['question']} [SEP] {nq['ctxs'][0]['text']}\t1")
    (shared / "crag").mkdir()
    (shared / "crag" / "train_popqa.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return data, shared


def _bench_quality_module(monkeypatch):
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_quality", ROOT / "scripts" / "bench_quality.py")
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "bench_quality", bench)  # its dataclasses look their module up
    spec.loader.exec_module(bench)
    return bench


def test_bench_quality_decision_view(monkeypatch):
    """CRAG's decision view: half the queries lose their positives; each query is scored by its best candidate."""
    import numpy as np

    bench = _bench_quality_module(monkeypatch)
    qids, labels, scores = [], [], []
    for i in range(40):  # 1 positive + 2 negatives each; the positive scores above every negative
        for j, y in enumerate((1.0, 0.0, 0.0)):
            qids.append(f"q{i}")
            labels.append(y)
            scores.append(0.9 if y else 0.1 + 0.1 * j)
    qids += ["all-pos", "all-neg"]  # nothing to withhold or nothing to find: left out
    labels += [1.0, 0.0]
    scores += [0.5, 0.5]
    cands, answerable = split = bench.decision_split(qids, labels, seed=13)
    assert len(cands) == 40 and 10 < answerable.sum() < 30  # a hash split, roughly half
    assert bench.decision_split(qids, labels, seed=13)[1].tolist() == answerable.tolist()  # seeded: the same split
    assert bench.decision_split(qids, labels, seed=14)[1].tolist() != answerable.tolist()
    lab = np.asarray(labels)
    for c, a in zip(cands, answerable):  # withheld queries keep their negatives only
        assert (lab[c] == 1).any() == bool(a) and len(c) == (3 if a else 2)
    d = bench.decision_figures(np.asarray(scores), split, theta_high=0.8, theta_low=0.35)
    assert d == {"queries": 40, "answerable": int(answerable.sum()), "auc": 1.0, "correct_when_answerable": 1.0,
                 "incorrect_when_unanswerable": 1.0}
    # a per-query offset from what was retrieved keeps each query's ranking but hides the queries with
    # nothing to find: here every query's best candidate is moved to the same level
    flat = np.asarray(scores, dtype=float)
    for c in cands:
        flat[c] += 0.5 - flat[c].max()
    assert bench.decision_figures(flat, split)["auc"] == 0.5
    assert bench.decision_figures(np.asarray(scores), (cands[:3], np.ones(3, dtype=bool))) == {}  # one kind only


def test_bench_quality_corpus_scores_withhold_the_missed_positives(monkeypatch):
    """In corpus mode the decision view's unanswerable queries are scored without their positives in the corpus."""
    bench = _bench_quality_module(monkeypatch)

    class Model:  # scores each pair by the size of the corpus in force
        reference = None
        calls: list = []

        def use_corpus(self, passages):
            self.reference = None if passages is None else list(passages)
            self.calls.append(self.reference)

        def score(self, pairs):
            return [len(self.reference) / 100 for _ in pairs]

    qids = [f"q{i}" for i in range(20) for _ in range(3)]
    labels = [1.0, 0.0, 0.0] * 20
    pairs = [(q, f"{q}-p{j}") for i, q in enumerate(dict.fromkeys(qids)) for j in range(3)]
    texts = [p for _, p in pairs]
    split = bench.decision_split(qids, labels, seed=13)
    model = Model()
    probs, decision = bench.corpus_scores(model, pairs, texts, labels, split)
    unanswerable = {pairs[c[0]][0] for c, a in zip(*split) if not a}
    assert model.reference is None and model.calls[0] == texts  # back to pair scoring at the end
    assert sorted(set(model.calls[0]) - set(model.calls[1])) == sorted(f"{q}-p0" for q in unanswerable)
    assert (probs == 0.6).all()
    for (q, _), y, d in zip(pairs, labels, decision):  # a withheld positive is not scored in the decision view
        assert d == pytest.approx((60 - len(unanswerable)) / 100 if q in unanswerable and y == 0 else 0.6)


def test_bench_quality_margin_interval(monkeypatch):
    """The margin's interval is a paired bootstrap over queries: a score that is a baseline plus a real
    gain on every query gets an interval above 0; the baseline itself a margin of exactly 0."""
    bench = _bench_quality_module(monkeypatch)
    rng = np.random.default_rng(0)
    qids = [f"q{i}" for i in range(60) for _ in range(8)]
    labels = np.tile(np.r_[1.0, np.zeros(7)], 60)
    base = rng.normal(0, 1, len(labels)) + 0.8 * labels
    better = base + 1.5 * labels
    m = bench.margin_ci(better, {"bm25": base, "minilm_cosine": base + rng.normal(0, 0.01, len(labels))}, labels, qids)
    assert m["clear"] and m["resamples"] == 1000 and m["bm25"]["margin"] > 0
    lo, hi = m["bm25"]["ci95"]
    assert 0 < lo <= m["bm25"]["margin"] <= hi
    same = bench.margin_ci(base, {"bm25": base}, labels, qids)
    assert same["bm25"] == {"margin": 0.0, "ci95": [0.0, 0.0]} and not same["clear"]
    assert bench.margin_ci(base, {"bm25": base}, labels, qids, seed=5) == same  # the draws are seeded
    assert "clear" in bench._margin(m) and bench._margin({}) == "-"


def test_bench_quality(tmp_path, tiny_bert, capsys, monkeypatch):
    import shutil

    from inference.calibration import Calibration
    from inference.decisions import Thresholds
    from inference.manifest import Manifest, ModelInfo
    from inference.modeling import ModelSpec

    export = tmp_path / "export"
    export.mkdir()
    for f in tiny_bert.iterdir():
        if f.is_file():
            shutil.copy2(f, export / f.name)
    training = {"config": {"prepare_data": {"format": "nq-open", "input": "data/sample/nq_open/nq-open-oracle.jsonl.gz"}}}
    Manifest(task="evaluator", model=ModelInfo(backbone=str(tiny_bert), head="cross-encoder"),
             spec=ModelSpec(head="cross-encoder", max_length=96, max_query_length=16),
             calibration=Calibration("platt", 1.0, 0.0), thresholds=Thresholds(0.7, 0.3), training=training,
             name="tiny").write(export)
    data, shared = _quality_data(tmp_path)
    out = tmp_path / "quality.json"
    # in process (the script's main), so the test does not pay transformers' imports a second time
    bench = _bench_quality_module(monkeypatch)
    assert bench.main(["--model", str(export), "--json", str(out), "--limit", "3", "--negatives", "3",
                       "--data-dir", str(data), "--shared-data", str(shared), "--record"]) == 0
    res = json.loads(out.read_text())
    # --record: the figures in the export's manifest and model card, and the export still loads
    held = json.loads((export / "evaluator.json").read_text())["metrics"]["held_out"]
    assert set(held["sets"]) == set(res["sets"]) and held["sets"]["squad"]["auc"] == res["sets"]["squad"]["auc"]
    assert held["excluded"]["nq-open"] == res["excluded"]["nq-open"]["reason"]
    card = (export / "README.md").read_text()
    assert "## Held-out figures" in card and "| set | n | queries | auc | bm25_auc | minilm_cosine_auc |" in card
    assert f"| squad | {res['sets']['squad']['n']} |" in card
    import inference

    assert inference.load(export).manifest.metrics["held_out"] == held
    assert list(res["sets"]) == ["msmarco-triples", "flagembedding-msmarco", "scifact", "squad", "crag-popqa"]
    ex = res["excluded"]
    assert {k: v["kind"] for k, v in ex.items()} == {"flagembedding-nq": "unavailable", "flagembedding-reranker": "duplicate",
                                                     "nq-open": "trained-on"}
    assert "prepare_data.input" in ex["nq-open"]["reason"] and "flagembedding-msmarco" in ex["flagembedding-reranker"]["reason"]
    for name, s in res["sets"].items():
        assert 1 <= s["queries"] <= 3 and 1 <= s["positives"] < s["n"], name
        assert 0.0 <= s["auc"] <= 1.0 and 0.0 <= s["accuracy_at_theta_high"] <= 1.0 and 0.0 <= s["mrr"] <= 1.0, name
        assert set(s["baselines"]) == {"bm25", "minilm_cosine"} and isinstance(s["beats_baselines"], bool), name
        assert s["beats_baselines"] == (s["auc"] > max(b["auc"] for b in s["baselines"].values())), name
        d = s["decision"]  # {} when the hash split left only one kind among so few queries
        assert not d or (d["queries"] <= s["queries"] and 0 < d["answerable"] < d["queries"] and 0 <= d["auc"] <= 1), name
        assert (s["baselines"]["bm25"]["decision_auc"] is None) == (not d), name
        assert s["mode"] == "pairs" and "without_corpus" not in s, name  # a cross-encoder export has no corpus mode
        m = s["margin"]  # {} when a bootstrap draw could not hold both labels
        assert not m or (set(m) == {"resamples", "unit", "bm25", "minilm_cosine", "clear"}
                         and m["clear"] == all(m[k]["ci95"][0] > 0 for k in ("bm25", "minilm_cosine"))), name
    assert res["sets"]["msmarco-triples"]["n"] == 6 and res["sets"]["flagembedding-msmarco"]["n"] == 15  # 3 x (1 + 1), 3 x (1 + 4)
    assert res["sets"]["squad"]["n"] == 12  # 3 x (1 + 3 negatives)
    assert res["sets"]["scifact"]["n"] == 3 + res["set_info"]["scifact"]["mining_counts"]["negatives"] > 3  # BM25-mined
    assert res["set_info"]["crag-popqa"]["training_queries_dropped"] == 1 and res["sets"]["crag-popqa"]["n"] == 6
    assert res["export"]["theta_high"] == 0.7 and res["target_met"] == all(s["beats_baselines"] for s in res["sets"].values())
    assert res["clear_margin"] == all(bool(s["margin"].get("clear")) for s in res["sets"].values())
    assert "target (beats both baselines on every scored set)" in capsys.readouterr().out


def test_bench_grading_summary(monkeypatch):
    """bench_grading's figures from per-claim records: evidence recall and precision over the kept
    chunks of full claims, abstention on removed ones, the decision AUC of the best chunk score."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_grading", ROOT / "scripts" / "bench_grading.py")
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "bench_grading", bench)
    spec.loader.exec_module(bench)

    def rec(action, kept, best):
        return {"m": {"action": action, "kept": kept, "best": best, "ms": 1.0}}

    full = [rec("Correct", [True, False], 0.9), rec("Ambiguous", [False], 0.5), rec("Incorrect", [], 0.2)]
    removed = [rec("Incorrect", [], 0.1), rec("Correct", [False], 0.6)]
    s = bench.summary(full, removed, "m")
    assert s["full"]["actions"] == {"Correct": 1, "Ambiguous": 1, "Incorrect": 1}
    assert s["full"]["evidence_recall"] == pytest.approx(1 / 3) and s["full"]["kept_precision"] == pytest.approx(1 / 3)
    assert s["full"]["abstain_rate"] == pytest.approx(1 / 3) and s["removed"]["abstain_rate"] == 0.5
    assert s["removed"]["kept_chunks_per_claim"] == 0.5
    assert s["decision_auc"] == pytest.approx(4 / 6)  # (0.9, 0.5, 0.2) against (0.1, 0.6)
    halves = [bench.removed_half(f"c{i}", 13) for i in range(400)]
    assert 150 < sum(halves) < 250 and halves == [bench.removed_half(f"c{i}", 13) for i in range(400)]
