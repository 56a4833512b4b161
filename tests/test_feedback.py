"""``python -m data_prep feedback``: user votes merged into labelled pairs (the rule in
``data_prep/feedback.py`` and docs/data.md), through the Python API and ``data_prep.cli.main``.

Queries and passages are real rows of the NQ-open fixture (and of BEIR SciFact for the corpus
lookup); the votes, voters and times are made up, the expected labels computed by hand.
"""

from __future__ import annotations

import gzip
import json
import math

import pytest
from readers_helpers import FIX, rejects_index

from data_prep.cli import main
from data_prep.feedback import MergeRule, merge_feedback, parse_timestamp, parse_vote
from data_prep.io import DataError, read_records
from data_prep.readers.common import stable_id, text_query_id
from data_prep.records import LabelledPair, Passage

NQ_HEAD = FIX / "nq" / "nq-open-oracle.head.jsonl"
SCIFACT = FIX / "beir" / "scifact"
ROWS = [json.loads(x) for x in NQ_HEAD.read_text(encoding="utf-8").splitlines()]
Q = [r["question"] for r in ROWS]  # who got the first nobel prize..., when is the next deadpool..., ...
P = [{"title": r["ctxs"][0]["title"], "text": r["ctxs"][0]["text"]} for r in ROWS]
PID = [stable_id(p["title"], p["text"]) for p in P]
D0, D30, D60 = "2026-11-01T00:00:00Z", "2026-12-01T00:00:00Z", "2026-12-31T00:00:00Z"
D60_EPOCH = 1798675200  # 2026-12-31T00:00:00Z as Unix seconds
VOTES_MSG = "expected up/down, thumbs_up/thumbs_down, +1/-1, 1/-1 or true/false"


def rec(q: int | str, p: int | dict | str | None, vote, ts=None, user=None, **kw) -> dict:
    """A feedback record: query ``Q[q]`` (or the string), passage ``P[p]`` as an object."""
    d: dict = {"query": Q[q] if isinstance(q, int) else q}
    if p is not None:
        d["passage"] = P[p] if isinstance(p, int) else p
    d["vote"] = vote
    if ts is not None:
        d["timestamp"] = ts
    if user is not None:
        d["user_id"] = user
    d.update(kw)
    return d


def write_lines(path, records) -> list[bytes]:
    lines = [(r if isinstance(r, bytes) else (json.dumps(r, ensure_ascii=False) + "\n").encode()) for r in records]
    path.write_bytes(b"".join(lines))
    return lines


def lines(path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]


def one(pairs, q: int, pid: str) -> LabelledPair:
    found = [p for p in pairs if p.query_id == text_query_id(Q[q]) and p.passage.id == pid]
    assert len(found) == 1, [(p.query, p.passage.id) for p in pairs]
    return found[0]


# The recency file: an old up vote against newer down votes (group A), and old down votes against
# newer up votes (group B). The newest timestamp of the file is D60.
RECENCY = [
    rec("Who got the first Nobel Prize in physics", 0, "up", D0, "ua"),  # first spelling of Q[0]
    rec(0, 0, "thumbs_down", D30, "ub"),
    rec("who got the first  nobel prize in physics ", 0, "down", D60_EPOCH, "uc"),  # same query, normalised
    rec(1, 1, -1, D0, "ud"),
    rec(1, 1, False, D0, "ue"),
    rec(1, 1, "DOWN", D0, None, session_id="s-7"),
    rec(1, 1, "+1", "2026-12-31T01:00:00+01:00", "ug"),  # = D60
    rec(1, 1, True, "2026-12-31T00:00:00", "uh"),  # no offset: UTC
]


# ============================================================================================
# the merge rule, through the Python API


def test_recency_outweighs_the_majority_both_ways():
    pairs, stats = merge_feedback(RECENCY)
    (a,) = [p for p in pairs if p.passage.id == PID[0]]
    # one up 60 days old (w = 0.5 ** 2) against downs 30 days old (0.5) and new (1)
    assert a.label == 0.25 / 1.75
    assert a.query == "Who got the first Nobel Prize in physics"
    assert a.query_id == text_query_id("Who got the first Nobel Prize in physics")
    assert a.label_source == "feedback" and a.passage.title == P[0]["title"] and a.passage.text == P[0]["text"]
    assert a.metadata == {
        "votes_up": 1, "votes_down": 2, "voters": 3, "weight_up": 0.25, "weight_down": 1.5,
        "first_timestamp": D0, "last_timestamp": D60,
    }
    b = one(pairs, 1, PID[1])
    # three downs 60 days old (0.25 each) against two new ups (1 each)
    assert b.label == 2.0 / 2.75
    assert (b.metadata["votes_up"], b.metadata["votes_down"], b.metadata["weight_up"], b.metadata["weight_down"]) == (2, 3, 2.0, 0.75)
    assert [p.passage.id for p in pairs] == [p.passage.id for p in sorted(pairs, key=lambda p: (p.query_id, p.passage.id))]
    assert stats["votes"] == {"read": 8, "from_corrections": 0, "undated": 0, "superseded": 0, "counted": 8, "used": 8}
    assert stats["reference_time"] == D60 and stats["groups"] == 2 and stats["queries"] == 2
    assert stats["pairs"] == {"written": 2, "positive": 1, "negative": 1}

    # without decay the majority wins: 1/3 and 2/5
    flat, _ = merge_feedback(RECENCY, half_life_days=0, min_margin=0.05)
    assert {p.passage.id: p.label for p in flat} == {PID[0]: 1 / 3, PID[1]: 2 / 5}
    assert {p.passage.id: p.label for p in merge_feedback(RECENCY, half_life_days=math.inf, min_margin=0.05)[0]} == {
        PID[0]: 1 / 3, PID[1]: 2 / 5}
    # a shorter half-life: the 60-day-old vote weighs 0.5 ** 6
    short = merge_feedback(RECENCY, half_life_days=10)[0]
    assert {p.passage.id: p.label for p in short} == {
        PID[0]: 0.5 ** 6 / (0.5 ** 6 + (0.5 ** 3 + 1.0)), PID[1]: 2.0 / (2.0 + (0.5 ** 6 * 3))}


def test_a_voters_latest_vote_counts_and_the_rest_are_superseded():
    records = [
        rec(2, 2, "up", "2026-11-30T10:00:00Z", "u1"),
        rec(2, 2, "down", "2026-11-30T12:00:00Z", "u1"),  # u1's latest: the newest of the file
        rec(2, 2, "thumbs_up", None, "u1"),  # undated: older than any dated vote, superseded
        rec(2, 2, "down", "2026-11-30T09:00:00Z", "u2"),
        rec(2, 2, "down", "2026-11-30T11:00:00Z", "u2"),
        rec(2, 2, "up", "2026-11-30T11:00:00Z", None, session_id="s9"),
    ]
    pairs, stats = merge_feedback(records, min_margin=0.1)
    (pair,) = pairs
    w = 0.5 ** ((3600 / 86400) / 30)  # one hour old
    assert pair.label == w / (w + (1.0 + w))
    assert pair.metadata["votes_up"] == 1 and pair.metadata["votes_down"] == 2 and pair.metadata["voters"] == 3
    assert pair.metadata["first_timestamp"] == "2026-11-30T11:00:00Z" and pair.metadata["last_timestamp"] == "2026-11-30T12:00:00Z"
    assert stats["votes"]["superseded"] == 3 and stats["votes"]["counted"] == 3 and stats["votes"]["undated"] == 1
    # same time: the later line wins
    tie = [rec(2, 2, "down", D30, "u1"), rec(2, 2, "up", D30, "u1")]
    assert [p.label for p in merge_feedback(tie)[0]] == [1.0]
    # the same user_id on another passage is another group: not superseded
    other = [rec(2, 2, "down", D30, "u1"), rec(2, 3, "up", D30, "u1")]
    assert merge_feedback(other)[1]["votes"]["superseded"] == 0
    # without user_id or session_id every record is a voter of its own
    anon = [rec(2, 2, "up"), rec(2, 2, "up"), rec(2, 2, "down")]
    (pair,), stats = merge_feedback(anon, min_margin=0.1)
    assert pair.label == 2 / 3 and pair.metadata["voters"] == 3 and stats["votes"]["superseded"] == 0


def test_undated_votes_weigh_like_the_oldest_dated_one():
    records = [rec(0, 0, "down", D60, "a"), rec(0, 0, "up", D0, "b"), rec(0, 0, "up", None, "c")]
    (pair,), stats = merge_feedback(records, min_margin=0.1)
    assert pair.label == 0.5 / 1.5 and pair.metadata["weight_up"] == 0.5 and pair.metadata["first_timestamp"] == D0
    assert stats["votes"]["undated"] == 1
    # no record dated at all: every weight is 1
    (pair,), stats = merge_feedback([rec(0, 0, "down", user="a"), rec(0, 0, "up", user="b"), rec(0, 0, "up", user="c")],
                                    min_margin=0.1)
    assert pair.label == 2 / 3 and pair.metadata["first_timestamp"] is None and stats["reference_time"] is None


def test_conflicts_min_votes_and_hard_labels():
    records = [
        rec(3, 3, "up", D0, "a"), rec(3, 3, "down", D0, "b"),  # 0.5: a conflict
        rec(1, 1, "up", D0, "a"), rec(1, 1, "up", D0, "b"), rec(1, 1, "down", D0, "c"),  # 2/3: a conflict at 0.2
        rec(0, 0, "up", D0, "a"),  # one voter
    ]
    pairs, stats = merge_feedback(records)
    assert [(p.passage.id, p.label) for p in pairs] == [(PID[0], 1.0)]
    assert stats["conflicts"]["count"] == 2 and stats["dropped"] == {"min_votes": 0, "conflicts": 2}
    assert {(c["passage_id"], c["label"]) for c in stats["conflicts"]["first"]} == {(PID[3], 0.5), (PID[1], 2 / 3)}
    kept, stats = merge_feedback(records, keep_conflicts=True)
    assert {p.passage.id: (p.label, p.metadata.get("conflict")) for p in kept} == {
        PID[0]: (1.0, None), PID[1]: (2 / 3, True), PID[3]: (0.5, True)}
    assert stats["dropped"]["conflicts"] == 0 and stats["conflicts"]["count"] == 2
    # 0.7 is not a conflict at the default margin 0.2, whatever 0.7 - 0.5 gives in floating point
    seven = [rec(0, 0, "up", user=f"u{i}") for i in range(7)] + [rec(0, 0, "down", user=f"d{i}") for i in range(3)]
    assert [p.label for p in merge_feedback(seven)[0]] == [0.7]
    # --min-votes 2 drops the one-voter group before anything else
    pairs, stats = merge_feedback(records, min_votes=2, min_margin=0.1)
    assert {p.passage.id: p.label for p in pairs} == {PID[1]: 2 / 3}
    assert stats["dropped"] == {"min_votes": 1, "conflicts": 1}
    hard, _ = merge_feedback(records, keep_conflicts=True, hard_labels=True)
    assert {p.passage.id: p.label for p in hard} == {PID[0]: 1.0, PID[1]: 1.0, PID[3]: 1.0}
    assert {p.passage.id: p.label for p in merge_feedback(RECENCY, hard_labels=True)[0]} == {PID[0]: 0.0, PID[1]: 1.0}


def test_corrections_give_answers_and_better_passages():
    records = [
        # the Deadpool passage for the Nobel question: down, with the right answer...
        rec(0, 1, "down", D30, "a", correction="Wilhelm Conrad Röntgen"),
        # ...twice, spelled differently (same after SQuAD normalisation): kept once
        rec(0, 1, "down", D30, "b", correction="wilhelm conrad röntgen."),
        # the better passage named by text: an up vote of c at D60 for (Q0, P0)
        rec(0, 2, "down", D60, "c", correction={"passage": P[0]}),
        rec(0, 0, "up", D30, "d"),
        # c's later direct vote on the better passage would supersede it; this earlier one does not
        rec(0, 0, "down", D0, "c"),
    ]
    pairs, stats = merge_feedback(records)
    assert [p.passage.id for p in pairs] == sorted([PID[1], PID[2], PID[0]])
    best = one(pairs, 0, PID[0])
    assert best.label == 1.0 and best.metadata["votes_up"] == 2 and best.metadata["voters"] == 2
    assert best.metadata["last_timestamp"] == D60
    assert all(p.metadata["answers"] == ["Wilhelm Conrad Röntgen"] for p in pairs)
    assert one(pairs, 0, PID[2]).label == 0.0 and one(pairs, 0, PID[1]).metadata["votes_down"] == 2
    assert stats["votes"]["from_corrections"] == 1 and stats["votes"]["superseded"] == 1
    assert stats["votes"]["read"] == 6 and stats["queries_with_answers"] == 1
    # a correction naming a passage of the corpus
    corpus = {"nq-3": Passage(id="nq-3", title=P[3]["title"], text=P[3]["text"])}
    pairs, _ = merge_feedback([rec(3, 0, "down", D0, "a", correction={"passage_id": "nq-3"})], corpus=corpus)
    got = {p.passage.id: (p.passage.title, p.label) for p in pairs}
    assert got == {"nq-3": ("Health (gaming)", 1.0), PID[0]: ("List of Nobel laureates in Physics", 0.0)}


@pytest.mark.parametrize(
    "value, up",
    [("up", True), ("Up", True), (" thumbs_up ", True), ("+1", True), (1, True), (1.0, True), (True, True),
     ("down", False), ("THUMBS_DOWN", False), ("-1", False), (-1, False), (False, False)],
)
def test_accepted_votes(value, up):
    assert parse_vote("f", 1, value) is up


@pytest.mark.parametrize("value", ["maybe", "1", 0, 2, None, "thumbs up", [1]])
def test_other_votes_are_invalid(value):
    with pytest.raises(DataError) as e:
        parse_vote("f.jsonl", 3, value)
    assert str(e.value) == f"f.jsonl:3: invalid vote {value!r}: {VOTES_MSG}" and e.value.kind == "invalid-vote"


def test_timestamps():
    noon = 1796040000.0  # 2026-11-30T12:00:00Z
    for v in ("2026-11-30T12:00:00Z", "2026-11-30T13:00:00+01:00", "2026-11-30T12:00:00", "2026-11-30 12:00:00",
              1796040000, 1796040000.0):
        assert parse_timestamp("f", 1, v) == noon, v
    assert parse_timestamp("f", 1, None) is None
    for v, why in (("yesterday", "expected an ISO 8601 date-time or Unix seconds"),
                   (True, "expected an ISO 8601 date-time or Unix seconds"),
                   (1796040000000, "out of range for Unix seconds (milliseconds?)")):
        with pytest.raises(DataError) as e:
            parse_timestamp("f.jsonl", 2, v)
        assert str(e.value) == f"f.jsonl:2: invalid timestamp {v!r}: {why}" and e.value.kind == "invalid-timestamp"


def test_rule_parameters_are_checked(tmp_path, capsys):
    with pytest.raises(ValueError, match=r"half_life_days must be a number >= 0 \(0 or inf: no decay\), got -1"):
        MergeRule(half_life_days=-1)
    with pytest.raises(ValueError, match="min_votes must be an integer >= 1, got 0"):
        MergeRule(min_votes=0)
    inp = tmp_path / "fb.jsonl"
    write_lines(inp, RECENCY)
    assert main(["feedback", "--input", str(inp), "--output", str(tmp_path / "o.jsonl"), "--min-margin", "0.6"]) == 2
    assert capsys.readouterr().err.strip() == "error: min_margin must be between 0 and 0.5, got 0.6"
    assert not (tmp_path / "o.jsonl").exists()


# ============================================================================================
# the command


def _run(tmp_path, records, *extra, name="feedback.jsonl"):
    inp = tmp_path / name
    if name.endswith(".gz"):
        inp.write_bytes(gzip.compress(b"".join((json.dumps(r) + "\n").encode() for r in records), mtime=0))
    else:
        write_lines(inp, records)
    out = tmp_path / "out" / "pairs.jsonl"
    rc = main(["feedback", "--input", str(inp), "--output", str(out), *extra])
    return rc, inp, out


def test_command_writes_pairs_meta_and_conflicts(tmp_path, capsys):
    conflict = [rec(3, 3, "up", D30, "a"), rec(3, 3, "down", D30, "b")]
    rc, inp, out = _run(tmp_path, RECENCY + conflict, name="feedback.jsonl.gz")
    assert rc == 0
    pairs = list(read_records(out, LabelledPair))
    assert [(p.passage.id, p.label) for p in pairs] == [(p.passage.id, p.label) for p in merge_feedback(RECENCY)[0]]
    assert {p.passage.id: p.label for p in pairs} == {PID[0]: 0.25 / 1.75, PID[1]: 2.0 / 2.75}
    assert [p.to_dict() for p in pairs] == [p.to_dict() for p in merge_feedback(RECENCY + conflict)[0]]
    meta = json.loads((tmp_path / "out" / "pairs.jsonl.meta.json").read_text())
    assert meta["records"] == 10 and meta["written"] == 2 and meta["groups"] == 3
    assert meta["pairs"] == {"written": 2, "positive": 1, "negative": 1}
    assert meta["votes"]["superseded"] == 0 and meta["votes"]["used"] == 8
    assert meta["conflicts"]["count"] == 1 and meta["conflicts"]["first"] == [
        {"query_id": text_query_id(Q[3]), "query": Q[3], "passage_id": PID[3], "label": 0.5}]
    assert meta["dropped"] == {"min_votes": 0, "conflicts": 1}
    assert meta["parameters"] == {"half_life_days": 30.0, "min_margin": 0.2, "min_votes": 1, "keep_conflicts": False,
                                  "hard_labels": False, "skip_bad": False}
    assert meta["rejected"] == {"total": 0, "by_reason": {}} and meta["corpus"] is None
    conflicts_file = tmp_path / "out" / "pairs.jsonl.conflicts.jsonl"
    assert meta["conflicts_file"] == str(conflicts_file)
    (c,) = read_records(conflicts_file, LabelledPair)
    assert (c.query, c.passage.id, c.label, c.metadata["conflict"], c.metadata["votes_up"]) == (Q[3], PID[3], 0.5, True, 1)
    printed = capsys.readouterr().out
    assert f"wrote 2 feedback pairs (1 positive, 1 negative) to {out} from 10 records (10 votes counted, 0 superseded)" in printed
    assert f"1 conflicts (|label - 0.5| < 0.2) not written; listed in {conflicts_file}" in printed

    # the output is refused unless --overwrite
    before = out.read_bytes()
    args = ["feedback", "--input", str(inp), "--output", str(out), "--keep-conflicts"]
    assert main(args) == 2
    assert capsys.readouterr().err.strip() == f"error: output exists: {out} (pass --overwrite to replace it)"
    assert out.read_bytes() == before
    assert main(args + ["--overwrite"]) == 0
    kept = {p.passage.id: (p.label, p.metadata.get("conflict")) for p in read_records(out, LabelledPair)}
    assert kept == {PID[0]: (0.25 / 1.75, None), PID[1]: (2.0 / 2.75, None), PID[3]: (0.5, True)}
    # --min-votes 3: only the two groups of three or more voters; no conflict left, no stale conflicts file
    assert main(["feedback", "--input", str(inp), "--output", str(out), "--min-votes", "3", "--overwrite"]) == 0
    meta = json.loads((tmp_path / "out" / "pairs.jsonl.meta.json").read_text())
    assert meta["dropped"] == {"min_votes": 1, "conflicts": 0} and meta["written"] == 2 and meta["conflicts_file"] is None
    assert not conflicts_file.exists()
    assert "dropped 1 groups with fewer than 3 voters" in capsys.readouterr().out
    # rerun: byte-identical output
    first = out.read_bytes()
    assert main(["feedback", "--input", str(inp), "--output", str(out), "--min-votes", "3", "--overwrite"]) == 0
    assert out.read_bytes() == first


def test_only_conflicts_is_an_error_and_writes_nothing(tmp_path, capsys):
    rc, inp, out = _run(tmp_path, [rec(3, 3, "up", D30, "a"), rec(3, 3, "down", D30, "b")])
    assert rc == 2
    assert capsys.readouterr().err.strip() == (
        f"error: {inp}: no pairs to write (1 groups: 1 conflicts, 0 below --min-votes); pass --keep-conflicts to write the conflicts")
    assert [(p.name, p.stat().st_size) for p in (tmp_path / "out").iterdir()] == [("pairs.jsonl.lock", 0)]  # the lock only


def _corpus(tmp_path):
    path = tmp_path / "corpus.jsonl"
    write_lines(path, [{"id": f"nq-{i}", **P[i]} for i in range(4)])
    return path


def test_passage_ids_resolved_through_a_passage_jsonl_corpus(tmp_path, capsys):
    corpus = _corpus(tmp_path)
    records = [
        {"query": Q[2], "passage_id": "nq-2", "vote": "up", "user_id": "a", "timestamp": D0},
        {"query": Q[2], "passage_id": "nq-3", "vote": "down", "user_id": "a", "timestamp": D0,
         "correction": {"passage_id": "nq-2"}},
        {"query": Q[2], "passage_id": "nq-3", "vote": "down", "user_id": 42, "timestamp": D0},
    ]
    rc, inp, out = _run(tmp_path, records, "--corpus", str(corpus))
    assert rc == 0
    got = {p.passage.id: p for p in read_records(out, LabelledPair)}
    assert sorted(got) == ["nq-2", "nq-3"]
    assert got["nq-2"].passage.title == "Geography of Nigeria" and got["nq-2"].passage.text == P[2]["text"]
    assert got["nq-2"].label == 1.0 and got["nq-2"].metadata["voters"] == 1  # a's vote and correction: one voter
    assert got["nq-3"].label == 0.0 and got["nq-3"].metadata["voters"] == 2
    assert [d["metadata"]["weight_down"] for d in lines(out)] == [0.0, 2.0] and '"weight_down": 0.0,' in out.read_text()
    meta = json.loads((tmp_path / "out" / "pairs.jsonl.meta.json").read_text())
    assert meta["corpus"] == {"path": str(corpus), "format": "passages", "ids_looked_up": 2, "found": 2}
    assert meta["votes"]["superseded"] == 1

    # an id the corpus lacks, and an id without a corpus
    bad = records + [{"query": Q[2], "passage_id": "nq-9", "vote": "up"}]
    rc, inp, out = _run(tmp_path, bad, "--corpus", str(corpus), "--overwrite")
    assert rc == 2
    assert capsys.readouterr().err.strip() == f"error: {inp}:4: passage id 'nq-9' is not in {corpus}"
    rc, inp, out = _run(tmp_path, records, "--overwrite")
    assert rc == 2
    assert capsys.readouterr().err.strip() == (
        f"error: {inp}:1: passage id 'nq-2' cannot be looked up without a corpus (pass --corpus)")
    assert main(["feedback", "--input", str(inp), "--output", str(out), "--corpus-format", "beir", "--overwrite"]) == 2
    assert capsys.readouterr().err.strip() == "error: --corpus-format needs --corpus"


def test_passage_ids_resolved_through_beir_scifact(tmp_path):
    query = "0-dimensional biomaterials lack inductive properties."  # SciFact query 0, qrels: 31715818
    records = [
        {"query": query, "passage_id": "31715818", "vote": "up", "user_id": "a", "timestamp": D0},
        {"query": query, "passage_id": 4983, "vote": "down", "user_id": "a", "timestamp": D0},
    ]
    for corpus in (SCIFACT, SCIFACT / "corpus.jsonl"):  # the folder, or its corpus.jsonl alone
        rc, inp, out = _run(tmp_path, records, "--corpus", str(corpus), "--corpus-format", "beir", "--overwrite")
        assert rc == 0
        got = {p.passage.id: (p.passage.title, p.label) for p in read_records(out, LabelledPair)}
        assert got == {
            "31715818": ("New opportunities: the use of nanotechnologies to manipulate and track stem cells.", 1.0),
            "4983": ("Microstructural development of human newborn cerebral white matter assessed in vivo by diffusion "
                     "tensor magnetic resonance imaging.", 0.0),
        }


GOOD = rec(0, 0, "up", D0, "a")
BAD_ROWS = [
    # (record or raw line, reason, kind)
    ({"passage": P[0], "vote": "up"}, "missing field 'query'", "missing-field"),
    (rec("   ", 0, "up"), "empty query", "empty-query"),
    (rec(0, "", "up"), "empty passage", "empty-passage"),
    (rec(0, {"title": P[0]["title"], "text": " "}, "up"), "empty passage", "empty-passage"),
    (rec(0, {"title": P[0]["title"]}, "up"), "missing field 'passage.text'", "missing-field"),
    (rec(0, ["text"], "up"), "field 'passage' must be a string or an object, got list", "invalid-type"),
    (rec(0, None, "up"), "neither 'passage' nor 'passage_id' given", "missing-passage"),
    (rec(0, 0, None), "missing field 'vote'", "missing-field"),
    (rec(0, 0, "maybe"), f"invalid vote 'maybe': {VOTES_MSG}", "invalid-vote"),
    (rec(0, 0, 0), f"invalid vote 0: {VOTES_MSG}", "invalid-vote"),
    (rec(0, 0, "up", "30/11/2026"), "invalid timestamp '30/11/2026': expected an ISO 8601 date-time or Unix seconds",
     "invalid-timestamp"),
    (rec(0, 0, "up", 1796040000000), "invalid timestamp 1796040000000: out of range for Unix seconds (milliseconds?)",
     "invalid-timestamp"),
    (rec(0, 0, "up", correction=["Röntgen"]),
     "correction must be a string (the answer) or an object with 'passage' or 'passage_id', got list", "invalid-correction"),
    (rec(0, 0, "up", correction=" "), "correction: empty answer", "invalid-correction"),
    (rec(0, 0, "up", correction={"answer": "Röntgen"}),
     "correction: unknown field 'answer' (expected 'passage' or 'passage_id')", "invalid-correction"),
    (rec(0, 0, "up", correction={"passage_id": "nq-1"}),
     "correction: passage id 'nq-1' cannot be looked up without a corpus (pass --corpus)", "invalid-correction"),
    (rec(0, 0, "down", correction={"passage": P[0]}), f"correction: names the passage voted on ({PID[0]!r})",
     "invalid-correction"),
    (rec(0, 0, "up", user_id=["a"]), "field 'user_id' must be a string or integer id", "invalid-type"),
    (b'{"query": "who got the first nobel prize in physics", "vote": "up"\n', "invalid JSON (Expecting ',' delimiter at column 67)",
     "invalid-json"),
]


@pytest.mark.parametrize("bad, reason, kind", BAD_ROWS, ids=[k + ":" + r[:30] for _, r, k in BAD_ROWS])
def test_bad_rows_strict_and_skipped(tmp_path, capsys, bad, reason, kind):
    rc, inp, out = _run(tmp_path, [GOOD, bad, GOOD])
    assert rc == 2
    assert capsys.readouterr().err.strip() == f"error: {inp}:2: {reason}"
    assert [(p.name, p.stat().st_size) for p in (tmp_path / "out").iterdir()] == [("pairs.jsonl.lock", 0)]  # the lock only
    raw = write_lines(inp, [GOOD, bad, GOOD])[1]
    assert main(["feedback", "--input", str(inp), "--output", str(out), "--skip-bad"]) == 0
    rej = tmp_path / "out" / "pairs.jsonl.rejects"
    assert (rej / "feedback.jsonl.rejected").read_bytes() == raw
    assert rejects_index(rej) == [{"file": str(inp), "line": 2, "kind": kind, "reason": reason}]
    meta = json.loads((tmp_path / "out" / "pairs.jsonl.meta.json").read_text())
    assert meta["rejected"] == {"total": 1, "by_reason": {kind: 1}} and meta["rejects_dir"] == str(rej)
    assert meta["records"] == 2 and meta["votes"]["superseded"] == 1 and meta["written"] == 1
    assert f"rejected 1 rows ({kind}: 1); raw rows in {rej}" in capsys.readouterr().out


def test_bad_rows_through_the_api():
    with pytest.raises(DataError) as e:
        merge_feedback([GOOD, rec(0, 0, "sideways")])
    assert str(e.value) == f"<input>:2: invalid vote 'sideways': {VOTES_MSG}"


def test_empty_input_and_all_rejected(tmp_path, capsys):
    inp = tmp_path / "feedback.jsonl"
    inp.write_bytes(b"\n  \n")
    out = tmp_path / "out" / "pairs.jsonl"
    assert main(["feedback", "--input", str(inp), "--output", str(out), "--skip-bad"]) == 2
    assert capsys.readouterr().err.strip() == f"error: {inp}: empty input file: no records"
    assert not out.exists()
    lines_ = write_lines(inp, [rec(0, 0, "maybe"), rec(1, 1, "yes")])
    assert main(["feedback", "--input", str(inp), "--output", str(out), "--skip-bad"]) == 2
    rej = tmp_path / "out" / "pairs.jsonl.rejects"
    assert capsys.readouterr().err.strip() == (
        f"error: {inp}: no valid feedback records (2 rejected: invalid-vote: 2; raw rows in {rej})")
    assert not out.exists() and not (tmp_path / "out" / "pairs.jsonl.meta.json").exists()
    assert (rej / "feedback.jsonl.rejected").read_bytes() == b"".join(lines_)
