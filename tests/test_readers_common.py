"""Shared reader machinery: ids, mojibake repair, the streaming JSON-array parser, rejects."""

from __future__ import annotations

import hashlib
import json
import re

import pytest
from readers_helpers import FIX, SAMPLE, rejects_index

from data_prep.io import DataError, MissingInputError, Rejects
from data_prep.readers import files as _files
from data_prep.readers.common import OnceRejects, fix_mojibake, stable_id, text_query_id
from data_prep.readers.files import iter_json_array, iter_json_records

DPR = FIX / "nq" / "dpr-nq.sample.json"


def test_stable_ids_follow_the_documented_formula():
    title, text = "DNA", "Within eukaryotic cells, DNA is organized"
    assert stable_id(title, text) == "h" + hashlib.sha1(f"{title}\n{text}".encode()).hexdigest()[:16]
    assert text_query_id("who") == "q" + hashlib.sha1(b"who").hexdigest()[:16]
    assert stable_id("", text) != stable_id("DNA", text)


def test_fix_mojibake_repairs_the_real_msmarco_sample():
    raw = (SAMPLE / "msmarco" / "triples.train.small.sample.tsv").read_text(encoding="utf-8")
    assert "donâ\x80\x99t" in raw  # the release's mojibake: UTF-8 bytes read as Latin-1
    fixed = fix_mojibake(raw)
    assert "don\u2019t" in fixed and "1\u00bd 8-ounce" in fixed
    assert not re.search("[\x80-\x9f]|Â|â€", fixed)
    assert fixed.count("\n") == raw.count("\n") and fixed.count("\t") == raw.count("\t")


def test_fix_mojibake_handles_cp1252_and_leaves_clean_text_alone():
    assert fix_mojibake("donâ€™t stop") == "don\u2019t stop"  # cp1252 flavour
    assert fix_mojibake("café Röntgen naïve") == "café Röntgen naïve"
    assert fix_mojibake("Ã alone") == "Ã alone"  # not a valid UTF-8 sequence: unchanged


def test_json_array_streams_elements_with_their_start_lines():
    text = DPR.read_text(encoding="utf-8")
    expected = json.loads(text)
    starts = [i + 1 for i, line in enumerate(text.splitlines()) if line == "    {"]
    for chunk in (16, 1000, 1 << 20):  # tiny chunks force every element across buffer refills
        got = list(iter_json_array(DPR, chunk_size=chunk))
        assert [obj for _, obj, _ in got] == expected
        assert [n for n, _, _ in got] == starts
        assert [json.loads(raw) for _, _, raw in got] == expected


def test_json_array_buffer_stays_near_one_element(tmp_path, monkeypatch):
    element = {"question": "q", "answers": ["a"], "positive_ctxs": [{"title": "t", "text": "x" * 2000}]}
    path = tmp_path / "big.json"
    path.write_text(json.dumps([element] * 300, indent=4), encoding="utf-8")
    biggest = 0
    real_fill = _files._ArrayReader.fill

    def spy(self):
        nonlocal biggest
        out = real_fill(self)
        biggest = max(biggest, len(self.buf))
        return out

    monkeypatch.setattr(_files._ArrayReader, "fill", spy)
    assert sum(1 for _ in iter_json_array(path, chunk_size=4096)) == 300
    assert path.stat().st_size > 600_000
    assert biggest < 3 * 4096 + 3 * len(json.dumps(element, indent=4))


def _broken_array(tmp_path):
    elements = json.loads(DPR.read_text(encoding="utf-8"))
    parts = [json.dumps(e, indent=4) for e in elements]
    parts[1] = parts[1].replace('"answers"', '"answers" "oops"', 1)  # invalid JSON inside element 2
    text = "[\n" + ",\n".join(parts) + "\n]\n"
    path = tmp_path / "nq-train.json"
    path.write_text(text, encoding="utf-8")
    start2 = text[: text.index(parts[1])].count("\n") + 1
    return path, parts, start2


def test_json_array_bad_element_strict_names_its_start_line(tmp_path):
    path, _, start2 = _broken_array(tmp_path)
    with pytest.raises(DataError, match=rf"nq-train\.json:{start2}: invalid JSON in the array element starting here"):
        list(iter_json_array(path, chunk_size=64))


def test_json_array_bad_element_skipped_and_kept_unchanged(tmp_path):
    path, parts, start2 = _broken_array(tmp_path)
    with Rejects(skip_bad=True, out_dir=tmp_path / "rej") as rj:
        got = list(iter_json_array(path, rj, chunk_size=64))
    assert len(got) == 2 and rj.counts == {"invalid-json": 1}
    assert (tmp_path / "rej" / "nq-train.json.rejected").read_text(encoding="utf-8") == parts[1] + "\n"
    assert rejects_index(tmp_path / "rej")[0]["line"] == start2


def test_json_array_non_utf8_bytes_rejected_with_raw_bytes(tmp_path):
    good = json.dumps({"question": "a", "answers": []}).encode()
    bad = b'{"question": "caf\xe9", "answers": []}'
    path = tmp_path / "x.json"
    path.write_bytes(b"[\n" + good + b",\n" + bad + b",\n" + good + b"\n]")
    with pytest.raises(DataError, match=r"x\.json:3: invalid UTF-8 byte 0xe9 \(line 3\)"):
        list(iter_json_array(path))
    with Rejects(skip_bad=True, out_dir=tmp_path / "rej") as rj:
        assert len(list(iter_json_array(path, rj))) == 2
    assert rj.counts == {"encoding": 1}
    assert (tmp_path / "rej" / "x.json.rejected").read_bytes() == bad + b"\n"


@pytest.mark.parametrize(
    "content, message",
    [
        (b'[{"a": 1} {"a": 2}]', r"x\.json:1: expected ',' or '\]' after the array element, found '\{'"),
        (b'[{"a": 1},\n{"a": "unterminated', r"x\.json:2: file ends inside this array element"),
        (b'[{"a": 1},\n', r"x\.json:2: file ends inside the JSON array"),
        (b'[{"a": 1}] trailing', r"unexpected data after the closing '\]'"),
        (b"", r"x\.json: empty input file: no records$"),  # the shared empty-file error
        (b" \n\n", r"x\.json: empty input file: no records$"),
        (b"{}", r"x\.json:1: expected a JSON array \('\['\), found '\{'"),
    ],
)
def test_json_array_broken_structure_always_raises(tmp_path, content, message):
    path = tmp_path / "x.json"
    path.write_bytes(content)
    with pytest.raises(DataError, match=message):
        list(iter_json_array(path, Rejects(skip_bad=True)))


def test_json_array_rejects_non_objects(tmp_path):
    path = tmp_path / "x.json"
    path.write_text('[{"a": 1}, 42, "s", {"b": 2}]')
    with pytest.raises(DataError, match=r"x\.json:1: expected a JSON object, got int"):
        list(iter_json_array(path))
    rj = Rejects(skip_bad=True)
    assert [o for _, o, _ in iter_json_array(path, rj, chunk_size=3)] == [{"a": 1}, {"b": 2}]
    assert rj.counts == {"invalid-json": 2}


def test_json_records_picks_array_or_jsonl(tmp_path):
    lines = tmp_path / "x.json"
    lines.write_text('{"a": 1}\n{"a": 2}\n')
    assert [o["a"] for _, o, _ in iter_json_records(lines)] == [1, 2]
    arr = tmp_path / "y.json"
    arr.write_text('\n  [{"a": 1},\n {"a": 2}]')
    assert [(n, o["a"]) for n, o, _ in iter_json_records(arr)] == [(2, 1), (3, 2)]
    with pytest.raises(MissingInputError, match="nope.json"):
        list(iter_json_records(tmp_path / "nope.json"))


def test_once_rejects_counts_a_row_once_however_often_it_is_read(tmp_path):
    inner = Rejects(skip_bad=True, out_dir=tmp_path)
    rj = OnceRejects(inner)
    err = DataError("f.tsv", 3, "duplicate passage id '7'", "duplicate-id")
    rj.reject(err, b"7\tx\n")
    rj.reject(err, b"7\tx\n")
    inner.close()
    assert inner.counts == {"duplicate-id": 1} and rj.summary()["total"] == 1
    assert (tmp_path / "f.tsv.rejected").read_bytes() == b"7\tx\n"
