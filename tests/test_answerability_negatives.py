"""``build --hard-negatives``: answerability negatives of the answer task (answer removed, answer
swapped, question perturbed), made from real SQuAD v1.1 paragraphs (tests/fixtures/squad), NQ-open
gold passages (tests/fixtures/nq) and MS MARCO rows (tests/fixtures/hf_msmarco)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from readers_helpers import FIX, rejects_index

from data_prep import build as B
from data_prep.cli import build_parser, main
from data_prep.io import DataError, read_records, write_jsonl
from data_prep.readers import open_source
from data_prep.records import LabelledPair, Passage, QueryExample
from data_prep.tasks.answerability import (KINDS, SpanPool, answer_occurrences, clean_span, parse_kinds,
                                           question_entities, span_type)
from data_prep.text import contains_answer, normalize_answer

SQUAD = FIX / "squad" / "squad-v1.1.sample.json"
NQ = FIX / "nq" / "nq-open-oracle.head.jsonl"
HF = FIX / "hf_msmarco" / "ms_marco_v2.1.sample.jsonl"
ALL = ("removed", "swapped", "perturbed")


def _examples() -> list[QueryExample]:
    out = []
    for fmt, path in (("squad", SQUAD), ("nq-open", NQ), ("hf-msmarco", HF)):
        out += list(open_source(fmt, input=str(path)).queries())
    return out


@pytest.fixture(scope="module")
def examples() -> list[QueryExample]:
    return _examples()


@pytest.fixture(scope="module")
def input_file(tmp_path_factory, examples) -> Path:
    path = tmp_path_factory.mktemp("in") / "examples.jsonl"
    write_jsonl(path, examples)
    return path


def _build(input_file: Path, out: Path, **kw) -> dict:
    kw.setdefault("dev_ratio", 0.2)
    return B.build(B.BuildConfig(input=str(input_file), output=str(out), tasks=("answer",), **kw))


@pytest.fixture(scope="module")
def built(tmp_path_factory, input_file) -> Path:
    out = tmp_path_factory.mktemp("built") / "ds"
    _build(input_file, out, hard_negatives=ALL)
    return out


def _pairs(out: Path, split: str | None = None) -> list[LabelledPair]:
    splits = [split] if split else list(B.SPLITS)
    return [p for s in splits for p in read_records(out / "answer" / f"{s}.pairs.jsonl", LabelledPair)]


def _generated(out: Path, kind: str, split: str | None = None) -> list[LabelledPair]:
    return [p for p in _pairs(out, split) if p.metadata.get("negative_kind") == KINDS[kind]]


# ----------------------------------------------------------------------------- the generated records


def test_answer_removed_never_holds_a_gold_answer(built, examples):
    by_id = {ex.id: ex for ex in examples}
    removed = _generated(built, "removed")
    assert len(removed) >= 40  # most of the 63 answerable questions
    positives = {(ex.id, p.id): p for ex in examples for p in ex.positives}
    for pair in removed:
        ex = by_id[pair.query_id]
        origin = positives[(ex.id, pair.metadata["origin_id"])]
        assert pair.label == 0.0 and pair.label_source == "answer-match" and pair.metadata["role"] == "generated"
        assert pair.query == ex.query and pair.passage.id == f"{origin.id}#removed"
        assert not contains_answer(pair.passage.full_text(" "), ex.answers)
        # same topic: the kept sentences are the origin's, in order, and none holds an answer
        assert pair.passage.title == origin.title and len(pair.passage.text) >= 100
        assert all(not contains_answer(s, ex.answers) for s in pair.passage.text.split(". "))
        assert pair.passage.metadata["removed_sentences"]
    # the SQuAD paragraphs are shared by several questions: each removal depends on its question
    assert len({p.passage.text for p in removed}) > len({p.passage.metadata["origin_id"] for p in removed})


def test_answer_swapped_states_a_wrong_answer_of_the_same_type(built, examples):
    by_id = {ex.id: ex for ex in examples}
    swapped = _generated(built, "swapped")
    assert len(swapped) >= 15
    positives = {(ex.id, p.id): p for ex in examples for p in ex.positives}
    for pair in swapped:
        ex = by_id[pair.query_id]
        origin = positives[(ex.id, pair.metadata["origin_id"])]
        meta = pair.passage.metadata
        r = meta["replacement"]
        assert pair.label == 0.0 and pair.label_source == "answer-match"
        assert contains_answer(pair.passage.text, [r]) and not contains_answer(pair.passage.full_text(" "), ex.answers)
        assert not contains_answer(r, ex.answers) and not contains_answer(origin.full_text(" "), [r])
        assert span_type(r) == meta["answer_type"] == span_type(meta["replaced"][0])
        assert all(contains_answer(x, ex.answers) for x in meta["replaced"])
        # only the answer changed
        assert pair.passage.text.replace(r, "") != origin.text and len(pair.passage.text) - len(origin.text) == \
            sum(len(r) - len(x) for x in meta["replaced"])
    assert {p.passage.metadata["answer_type"] for p in swapped} >= {"year", "name:n"}


def test_question_perturbed_asks_about_an_entity_the_passage_lacks(built, examples):
    by_id = {ex.id: ex for ex in examples}
    perturbed = _generated(built, "perturbed")
    assert len(perturbed) >= 15
    for pair in perturbed:
        ex = by_id[pair.metadata["origin_query_id"]]
        meta = pair.passage.metadata
        assert pair.query_id == f"{ex.id}#perturbed" and pair.metadata["original_query"] == ex.query
        assert pair.query != ex.query and meta["replacement"] in pair.query and meta["entity"] in ex.query
        assert meta["entity"] not in pair.query
        origin = next(p for p in ex.positives if p.id == meta["origin_id"])
        assert pair.passage.text == origin.text and pair.passage.id == origin.id
        assert contains_answer(origin.full_text(" "), [meta["entity"]])
        assert not contains_answer(origin.full_text(" "), [meta["replacement"]])
        assert span_type(meta["replacement"]) == meta["entity_type"] == span_type(meta["entity"])
        assert pair.label == 0.0 and pair.label_source == "human"
        assert not ex.query.startswith(meta["entity"])  # never the question's first word
    # a perturbed question sits in its original question's split, after that question's pairs
    for split in B.SPLITS:
        pairs = _pairs(built, split)
        for k, pair in enumerate(pairs):
            if pair.metadata.get("negative_kind") == KINDS["perturbed"]:
                orig = pair.metadata["origin_query_id"]
                assert any(p.query_id == orig for p in pairs[:k])
                assert all(p.query_id != orig for p in pairs[k:])


def test_groups_hold_removed_and_swapped_negatives_but_no_perturbed_question(built):
    groups = [g for s in B.SPLITS for g in read_records(built / "answer" / f"{s}.groups.jsonl", QueryExample)]
    kinds = [n.metadata.get("negative_kind") for g in groups for n in g.negatives]
    assert KINDS["removed"] in kinds and KINDS["perturbed"] not in kinds
    assert all("negative_kind" not in p.metadata for g in groups for p in g.positives)
    assert all("#" not in g.metadata["query_id"] for g in groups)


# ----------------------------------------------------------------------------- counts


def test_meta_counts_match_the_files(built, examples):
    meta = json.loads((built / "meta.json").read_text())
    hn = meta["hard_negatives"]
    assert hn["kinds"] == ["answer-removed", "answer-swapped", "question-perturbed"] and hn["per_question"] == 1
    assert meta["parameters"]["hard_negatives"] == list(ALL) and meta["parameters"]["hard_negatives_per_question"] == 1
    answerable = [ex for ex in examples if [a for a in ex.answers if a != "No Answer Present."]]
    for short, kind in KINDS.items():
        for split in B.SPLITS:
            assert hn["made"][kind][split] == len(_generated(built, short, split))
        # per_question 1: each question makes one or is skipped with one reason
        skipped = meta["skipped"].get(kind, {})
        assert hn["made"][kind]["total"] + sum(skipped.values()) == len(answerable) + 1  # + MS MARCO's no-answer one
        assert hn["skipped"][kind] == skipped
        for reason in skipped:
            assert meta["skipped_examples"][f"{kind}:{reason}"]
    assert meta["skipped"]["question-perturbed"]["no-answers"] == 1  # MS MARCO's "No Answer Present."
    # every source gives some: the fixture's MS MARCO answers are sentences of the selected passage
    sources = {p.metadata["source"] for p in _generated(built, "removed")}
    assert sources == {"squad", "nq-open", "hf-msmarco"}
    assert hn["pool"]["year"] > 0 and hn["pool"]["name:n"] > 0


def test_bad_rows_are_counted_and_skipped_never_passed_on(tmp_path, examples):
    squad = [ex for ex in examples if ex.source == "squad"]
    good = squad[0]
    pos = good.positives[0]
    # answer_spans whose offsets do not hold the answer
    shifted = Passage(pos.id, pos.text, pos.title, {**pos.metadata, "answer_spans": [[0, 12]]})
    mismatch = QueryExample("bad-span", good.query, [shifted], [], good.answers, "squad")
    # an answer that is nowhere in the passage (no spans: labelled by containment)
    plain = Passage("p-plain", pos.text, pos.title)
    missing = QueryExample("not-found", good.query, [plain], [], ["Kilimanjaro"], "nq-open")
    # a question without an entity past its first word
    flat = QueryExample("no-entity", "what is atop the main building?", [plain], [], ["golden statue"], "nq-open")
    path = tmp_path / "in.jsonl"
    write_jsonl(path, [good, mismatch, missing, flat])
    meta = _build(path, tmp_path / "out", hard_negatives=ALL, dev_ratio=0.0)
    sk = meta["skipped"]
    for kind in KINDS.values():
        assert sk[kind]["answer-span-mismatch"] == 1 and sk[kind]["answer-not-found"] == 1
        assert meta["skipped_examples"][f"{kind}:answer-span-mismatch"] == ["bad-span"]
    assert sk["question-perturbed"]["no-entity"] == 1
    assert meta["skipped_examples"]["question-perturbed:no-entity"] == ["no-entity"]
    pairs = _pairs(tmp_path / "out")
    made = {(p.metadata.get("origin_query_id", p.query_id), p.metadata["negative_kind"]) for p in pairs
            if p.metadata.get("role") == "generated"}
    assert not {q for q, _ in made} & {"bad-span", "not-found"}
    assert ("no-entity", "question-perturbed") not in made and ("no-entity", "answer-removed") in made
    # the questions' own pairs are still written
    assert {p.query_id for p in pairs} >= {"bad-span", "not-found", "no-entity"}


def test_malformed_answer_spans_are_rejects(tmp_path, examples):
    good = examples[0]
    pos = good.positives[0]
    broken = QueryExample("broken", good.query, [Passage(pos.id, pos.text, pos.title, {"answer_spans": [[5, 99999]]})],
                          [], good.answers, "squad")
    path = tmp_path / "in.jsonl"
    write_jsonl(path, [good, broken])
    with pytest.raises(DataError, match=r"in.jsonl:2: .*answer_spans"):
        _build(path, tmp_path / "strict", hard_negatives=("removed",))
    meta = _build(path, tmp_path / "lenient", hard_negatives=("removed",), skip_bad=True)
    assert meta["rejects"]["by_reason"] == {"invalid-for-build": 1}
    assert rejects_index(tmp_path / "lenient" / "rejects")[0]["line"] == 2
    assert (tmp_path / "lenient" / "rejects" / "in.jsonl.rejected").read_bytes() == path.read_bytes().splitlines(True)[1]


# ----------------------------------------------------------------------------- options


def test_default_output_is_unchanged_when_the_option_is_off(tmp_path, input_file, built):
    off = tmp_path / "off"
    meta = _build(input_file, off)
    assert "hard_negatives" not in meta and "hard_negatives" not in meta["parameters"]
    assert not any(k in KINDS.values() for k in meta["skipped"])
    for split in B.SPLITS:
        plain = (off / "answer" / f"{split}.pairs.jsonl").read_text().splitlines()
        with_hn = (built / "answer" / f"{split}.pairs.jsonl").read_text().splitlines()
        assert plain == [line for line in with_hn if '"role": "generated"' not in line]
        assert all("negative_kind" not in line for line in plain)
    on_params = dict(json.loads((built / "meta.json").read_text())["parameters"])
    on_params.pop("hard_negatives"), on_params.pop("hard_negatives_per_question")
    assert meta["parameters"] == on_params


def test_deterministic_with_the_seed(tmp_path, input_file, built):
    again = tmp_path / "again"
    _build(input_file, again, hard_negatives=ALL)
    for split in B.SPLITS:
        for kind in ("pairs", "groups"):
            name = f"answer/{split}.{kind}.jsonl"
            assert (again / name).read_bytes() == (built / name).read_bytes()
    other = tmp_path / "other"
    _build(input_file, other, hard_negatives=ALL, seed=14, dev_ratio=0.0)
    same_split = tmp_path / "same"
    _build(input_file, same_split, hard_negatives=ALL, dev_ratio=0.0)
    picks = lambda out: [p.passage.metadata["replacement"] for p in _generated(out, "swapped")]  # noqa: E731
    assert picks(other) != picks(same_split)


def test_per_question_cap(tmp_path, input_file):
    meta = _build(input_file, tmp_path / "two", hard_negatives=("swapped", "perturbed"), hard_negatives_per_question=2)
    assert meta["hard_negatives"]["per_question"] == 2
    pairs = _pairs(tmp_path / "two")
    for kind in ("swapped", "perturbed"):
        per_q: dict[str, list] = {}
        for p in pairs:
            if p.metadata.get("negative_kind") == KINDS[kind]:
                per_q.setdefault(p.metadata.get("origin_query_id", p.query_id), []).append(p)
        assert max(len(v) for v in per_q.values()) == 2 and min(len(v) for v in per_q.values()) >= 1
        for v in per_q.values():
            assert len({p.passage.metadata["replacement"] for p in v}) == len(v)
            assert len({p.query_id for p in v} if kind == "perturbed" else {p.passage.id for p in v}) == len(v)
    assert not any(p.metadata.get("negative_kind") == KINDS["removed"] for p in pairs)


def test_cli_option_parses_and_rejects_unknown_kinds(tmp_path, input_file, capsys):
    parser = build_parser()
    args = parser.parse_args(["build", "--input", "x", "--output", "y", "--hard-negatives", "swapped,removed",
                              "--hard-negatives-per-question", "3"])
    assert args.hard_negatives == ("removed", "swapped") and args.hard_negatives_per_question == 3
    assert parser.parse_args(["build", "--input", "x", "--output", "y"]).hard_negatives == ()
    assert parser.parse_args(["build", "--input", "x", "--output", "y", "--hard-negatives", "all"]).hard_negatives == ALL
    with pytest.raises(SystemExit) as e:
        parser.parse_args(["build", "--input", "x", "--output", "y", "--hard-negatives", "removed,shuffled"])
    assert e.value.code == 2
    assert "argument --hard-negatives: unknown hard-negative kind(s) shuffled; choose from removed, swapped, perturbed" \
        in capsys.readouterr().err
    out = tmp_path / "cli"
    assert main(["build", "--input", str(input_file), "--output", str(out), "--tasks", "answer",
                 "--hard-negatives", "removed"]) == 0
    assert json.loads((out / "meta.json").read_text())["hard_negatives"]["kinds"] == ["answer-removed"]
    capsys.readouterr()
    assert main(["build", "--input", str(input_file), "--output", str(tmp_path / "ev"), "--tasks", "evaluator",
                 "--hard-negatives", "removed"]) == 2
    assert "--hard-negatives makes answer-task negatives; --tasks evaluator has no answer task" in capsys.readouterr().err


def test_config_takes_a_list_or_a_comma_string_and_checks_it():
    assert B.BuildConfig(input="i", output="o", hard_negatives=["perturbed", "removed"]).hard_negatives == ("removed", "perturbed")
    assert B.BuildConfig(input="i", output="o", hard_negatives="removed, swapped").hard_negatives == ("removed", "swapped")
    assert B.BuildConfig(input="i", output="o").hard_negatives == ()
    with pytest.raises(ValueError, match="--hard-negatives: unknown hard-negative kind"):
        B.BuildConfig(input="i", output="o", hard_negatives=["removed", "typo"])
    with pytest.raises(ValueError, match="--hard-negatives-per-question must be an integer >= 1"):
        B.BuildConfig(input="i", output="o", hard_negatives=["removed"], hard_negatives_per_question=0)


def test_pair_input_is_refused(tmp_path, built):
    with pytest.raises(ValueError, match="--hard-negatives needs query examples"):
        B.build(B.BuildConfig(input=str(built / "answer" / "train.pairs.jsonl"), output=str(tmp_path / "p"),
                              tasks=("answer",), hard_negatives=("removed",)))


# ----------------------------------------------------------------------------- the rules


def test_span_types():
    assert [span_type(s) for s in ("1858", "May 18, 2018", "September 1831", "the 1970s", "19th century")] == \
        ["year", "date", "month-year", "decade", "century"]
    assert [span_type(s) for s in ("150,782", "8", "two", "2 million", "90%", "$30 million", "128 days")] == \
        ["number:6", "number:1", "number-word", "number-scaled", "percent", "money", "quantity:days"]
    assert [span_type(s) for s in ("Saint Bernadette Soubirous", "the University of Notre Dame", "Beyoncé")] == \
        ["name:n", "name:n", "name:1"]
    assert [span_type(s) for s in ("a golden statue of the Virgin Mary", "J", "19 Management")] == [None, None, None]
    assert clean_span("the Drummers' Circle") == "Drummers' Circle"
    assert parse_kinds("all") == ALL
    with pytest.raises(ValueError, match="unknown hard-negative kind"):
        parse_kinds("removed,nope")


def test_question_entities_skip_the_first_word_and_keep_names_whole():
    ents = question_entities("To whom did the Virgin Mary allegedly appear in 1858 in Lourdes France?")
    assert [(e.text, e.type) for e in ents] == [("Virgin Mary", "name:n"), ("1858", "year"), ("Lourdes France", "name:n")]
    assert [e.text for e in question_entities("Who managed the Destiny's Child group?")] == ["Destiny's Child"]
    assert [e.text for e in question_entities("What's Apple's code name for the newer 8-pin dock connector?")] == ["Apple"]
    assert question_entities("Beyoncé sang what?") == [] and question_entities("what is atop the main building?") == []
    q = "How many people lived in 1,200 homes in May 2010 by the University of Notre Dame's estimate?"
    assert [e.text for e in question_entities(q)] == ["1,200", "May 2010", "University of Notre Dame"]
    for e in ents:
        assert "To whom did the Virgin Mary allegedly appear in 1858 in Lourdes France?"[e.start:e.end] == e.text


def test_answer_occurrences_are_whole_normalised_tokens():
    text = "The first Nobel Prize (1901) went to Wilhelm Conrad Röntgen; Tibetan princes met the Tibet envoy."
    spans = answer_occurrences(text, ["wilhelm conrad röntgen", "Tibet", "the 1901"])
    assert [text[a:b] for a, b in spans] == ["1901", "Wilhelm Conrad Röntgen", "Tibet"]
    assert all(normalize_answer(text[a:b]) in {"wilhelm conrad röntgen", "tibet", "1901"} for a, b in spans)


def test_pool_is_order_independent_and_keeps_common_words_out():
    exs = [ex for ex in _examples() if ex.source == "squad"]
    a, b = SpanPool(cap=5), SpanPool(cap=5)
    for ex in exs:
        a.add_example(ex)
    for ex in reversed(exs):
        b.add_example(ex)
    assert a.sizes() == b.sizes() and all(a.candidates(t) == b.candidates(t) for t in a.sizes())
    assert all(n <= 5 for n in a.sizes().values())
    assert a.is_common("Statue") and not a.is_common("Notre Dame")  # "a golden statue of the Virgin Mary"
    assert all(not a.is_common(s) for s in a.candidates("name:1"))
