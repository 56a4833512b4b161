"""``data_prep.text.sentence_spans``: a deterministic sentence splitter that keeps character offsets
(used to build extractor training data and to serve the key-sentence extractor)."""

from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path

import pytest

from data_prep.text import Sentence, sentence_spans, split_sentences

NQ = Path(__file__).resolve().parents[1] / "data" / "sample" / "nq_open" / "nq-open-oracle.jsonl.gz"


def texts(text: str, **kw) -> list[str]:
    return [s.text for s in sentence_spans(text, **kw)]


def check_offsets(source: str, spans: list[Sentence], max_chars: int | None = 600) -> None:
    """Every invariant a caller may rely on."""
    prev_end = 0
    for s in spans:
        assert source[s.start : s.end] == s.text
        assert s.text and s.text == s.text.strip()
        assert prev_end <= s.start < s.end
        if max_chars is not None:
            assert len(s.text) <= max_chars
        prev_end = s.end
    # nothing but whitespace is ever dropped
    assert "".join("".join(s.text.split()) for s in spans) == "".join(source.split())


# ----------------------------------------------------------------------------- API


def test_sentence_is_a_frozen_dataclass_with_offsets():
    text = "  The first Nobel Prize in Physics was awarded in 1901.  John Bardeen won it twice. "
    spans = sentence_spans(text)
    assert spans == [
        Sentence("The first Nobel Prize in Physics was awarded in 1901.", 2, 55),
        Sentence("John Bardeen won it twice.", 57, 83),
    ]
    assert all(s.forced is False for s in spans)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spans[0].start = 0  # type: ignore[misc]
    check_offsets(text, spans)


def test_split_sentences_is_the_texts_of_sentence_spans():
    text = "Deadpool 2 is scheduled to be released on May 18, 2018.  A sequel, Deadpool 3, is in development."
    assert split_sentences(text) == [s.text for s in sentence_spans(text)] == [
        "Deadpool 2 is scheduled to be released on May 18, 2018.",
        "A sequel, Deadpool 3, is in development.",
    ]


def test_deterministic():
    text = "Dr. Who? Yes. 它很好！It was released in 2019.\nNext line" * 50
    assert sentence_spans(text) == sentence_spans(text) == sentence_spans(str(text))


@pytest.mark.parametrize("bad", [19, 0, -1, 20.5, "600", True])
def test_max_chars_is_validated(bad):
    with pytest.raises(ValueError, match="max_chars"):
        sentence_spans("Some text.", max_chars=bad)


def test_max_chars_edges():
    assert texts("Some text.", max_chars=20) == ["Some text."]
    assert sentence_spans("x" * 5000, max_chars=None) == [Sentence("x" * 5000, 0, 5000)]


def test_text_must_be_a_string():
    with pytest.raises(TypeError):
        sentence_spans(None)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- empty / no boundary


@pytest.mark.parametrize("text", ["", " ", "\n", "\n\n\t  \r\n", "\u3000\u00a0 "])
def test_empty_and_whitespace_only(text):
    assert sentence_spans(text) == []
    assert split_sentences(text) == []


def test_no_boundary_is_one_stripped_sentence():
    text = "  the quick brown fox jumps over the lazy dog without any full stop at all  "
    assert sentence_spans(text) == [Sentence(text.strip(), 2, len(text) - 2)]
    # a final stop, or a stop followed by lower case, is no boundary either
    assert texts("He paid 5 dollars. and then he left.") == ["He paid 5 dollars. and then he left."]


# ----------------------------------------------------------------------------- English


def test_basic_english_boundaries():
    text = "Is it real? It is! The end. 1997 was the year it started. (A new era began.) OK."
    assert texts(text) == [
        "Is it real?",
        "It is!",
        "The end.",
        "1997 was the year it started.",
        "(A new era began.)",
        "OK.",
    ]


@pytest.mark.parametrize(
    "text",
    [
        "Mr. Smith and Mrs. Smith met Ms. Jones at the party.",
        "Dr. Watson and Prof. Moriarty never met in person.",
        "The estate passed to John Sr. and then to John Jr. after the war.",
        "The cathedral of St. Paul stands in London.",
        "It was the Celtics vs. Lakers final of 1984.",
        "Bring apples, pears, etc. to the picnic.",
        "Use a solvent, e.g. Acetone, to clean it.",
        "Use a solvent, i.e. Acetone, to clean it.",
        "The song reached No. 1 on the Billboard Hot 100.",
        "See Fig. 3 for the results.",
        "The Acme Ltd. Board approved the merger with Widget Inc. In March.",
        "Ford Motor Co. Chairman Bill Ford spoke.",
        "Gen. Patton, Col. Sanders, Lt. Dan, Sgt. Pepper and Capt. Kirk were invited.",
        "They climbed Mt. Everest in May.",
        "The deadline is Jan. 5, and the next one is Feb. 9 or Dec. 31.",
        "The U.S. Army and the U.K. Government signed it.",
        "The Washington, D.C. Metro opened in 1976.",
        "As Smith et al. (2001) showed, the theory holds.",
        "The city of Rome was the largest city in the world c. 100 BC – c. AD 400.",
        "It was filmed in Sault Ste. Marie, Ontario.",
        "He flew from Minneapolis–St. Paul International Airport.",
    ],
)
def test_no_split_after_abbreviations(text):
    assert texts(text) == [text]


def test_abbreviation_like_words_still_end_sentences():
    # "no." is a word unless a number follows; "May" is a month, not an abbreviation
    assert texts("The answer was no. He refused.") == ["The answer was no.", "He refused."]
    assert texts("It opened in May. The crowds came.") == ["It opened in May.", "The crowds came."]
    # a time zone in capitals is not "est."; "p.m." at the end of a sentence is a boundary
    assert texts("It aired at 9:00 pm EST. Super Channel aired it later.") == [
        "It aired at 9:00 pm EST.",
        "Super Channel aired it later.",
    ]
    assert texts("The show ends at 6 p.m. Monkeys also have a role.") == [
        "The show ends at 6 p.m.",
        "Monkeys also have a role.",
    ]


@pytest.mark.parametrize(
    "text",
    [
        "J. R. R. Tolkien wrote The Hobbit in 1937.",
        "George W. Bush was the 43rd president.",
        "The novel was written by F. Scott Fitzgerald.",
        "Public Law 112 was cited as Pub. L. 112–257 in the act.",
    ],
)
def test_no_split_after_initials(text):
    assert texts(text) == [text]


def test_initials_then_a_real_boundary():
    text = "J. K. Rowling wrote seven books. The first appeared in 1997."
    assert texts(text) == ["J. K. Rowling wrote seven books.", "The first appeared in 1997."]


def test_decimals_and_numbers():
    text = "Pi is about 3.14 and e is 2.718. The budget was 1,000.5 million. It grew 0.5% in 2019."
    assert texts(text) == [
        "Pi is about 3.14 and e is 2.718.",
        "The budget was 1,000.5 million.",
        "It grew 0.5% in 2019.",
    ]
    # a sentence ending in a number, followed by one starting with a number
    assert texts("He was born in 1990. 2000 was a leap year.") == ["He was born in 1990.", "2000 was a leap year."]


def test_urls_emails_and_file_names():
    text = (
        "Visit www.example.com/a.b?x=1 for details. Or see example.com. Then write to "
        "john.doe@example.com. The log is in error.log and config.yaml.bak on the server. "
        "Open https://en.wikipedia.org/wiki/Main_Page?action=edit! Done."
    )
    assert texts(text) == [
        "Visit www.example.com/a.b?x=1 for details.",
        "Or see example.com.",
        "Then write to john.doe@example.com.",
        "The log is in error.log and config.yaml.bak on the server.",
        "Open https://en.wikipedia.org/wiki/Main_Page?action=edit!",
        "Done.",
    ]


def test_ellipses():
    # followed by lower case: inside a sentence; followed by a capital: a boundary
    assert texts("He paused... and then he left the room.") == ["He paused... and then he left the room."]
    assert texts("He paused\u2026 and then he left.") == ["He paused\u2026 and then he left."]
    assert texts("I don't know... Maybe tomorrow. Wait...what?") == ["I don't know...", "Maybe tomorrow.", "Wait...what?"]


def test_quotes_and_brackets_after_the_full_stop():
    text = (
        'He said "Stop." Then he left. She asked, "Why?" Nobody answered. '
        "The motto was \u201cSola dosis facit venenum.\u201d It means the dose makes the poison. "
        "(See the appendix.) It lists 'every case.' \"Next,\" he said."
    )
    assert texts(text) == [
        'He said "Stop."',
        "Then he left.",
        'She asked, "Why?"',
        "Nobody answered.",
        "The motto was \u201cSola dosis facit venenum.\u201d",
        "It means the dose makes the poison.",
        "(See the appendix.)",
        "It lists 'every case.'",
        '"Next," he said.',
    ]


def test_citation_marks_stay_with_their_sentence():
    assert texts("The prize was first awarded in 1901.[1][2] It is given yearly.") == [
        "The prize was first awarded in 1901.[1][2]",
        "It is given yearly.",
    ]


def test_list_numbers_at_the_start_of_a_line_are_not_sentences():
    text = "Steps:\n1. Mix the flour.\n2. Bake it for 20 minutes. Let it cool."
    assert texts(text) == ["Steps:", "1. Mix the flour.", "2. Bake it for 20 minutes.", "Let it cool."]


# ----------------------------------------------------------------------------- Chinese / Japanese


def test_chinese_punctuation_needs_no_whitespace():
    text = "今天天气很好。我们去公园吧！你去吗？他说：我不去；她说：我去。"
    assert texts(text) == ["今天天气很好。", "我们去公园吧！", "你去吗？", "他说：我不去；", "她说：我去。"]
    assert [(s.start, s.end) for s in sentence_spans(text)] == [(0, 7), (7, 14), (14, 18), (18, 25), (25, 31)]


def test_chinese_closing_quotes_and_brackets_stay_with_the_sentence():
    text = "他说：“你好。”然后走了。（这是真的。）她问：「为什么？」『不知道！』【完】"
    assert texts(text) == ["他说：“你好。”", "然后走了。", "（这是真的。）", "她问：「为什么？」", "『不知道！』", "【完】"]
    # an ASCII quote after 。 closes only an open quote
    assert texts('他说："你好。"然后走了。"下一句。"') == ['他说："你好。"', "然后走了。", '"下一句。"']


def test_japanese():
    assert texts("東京は日本の首都です。人口は約1400万人です！本当？") == ["東京は日本の首都です。", "人口は約1400万人です！", "本当？"]


def test_chinese_ellipsis_and_commas_do_not_split():
    text = "他想了想……还是决定去，虽然下雨了、天也黑了。"
    assert texts(text) == [text]


def test_mixed_chinese_and_english():
    text = "模型E-204的功率是5.5千瓦。It was released in 2019. 它很好！"
    spans = sentence_spans(text)
    assert [s.text for s in spans] == ["模型E-204的功率是5.5千瓦。", "It was released in 2019.", "它很好！"]
    assert [(s.start, s.end) for s in spans] == [(0, 17), (17, 41), (42, 46)]
    check_offsets(text, spans)
    # an English full stop directly followed by Chinese; English abbreviations inside Chinese text
    assert texts("The model shipped in 2019.它很好。Dr. Wang说它很好。") == ["The model shipped in 2019.", "它很好。", "Dr. Wang说它很好。"]


# ----------------------------------------------------------------------------- line breaks


def test_newlines_are_boundaries():
    text = "Title of the page\nFirst line without a stop\n\n\nSecond paragraph. Two sentences\r\nWindows line\u2028and a separator"
    spans = sentence_spans(text)
    assert [s.text for s in spans] == [
        "Title of the page",
        "First line without a stop",
        "Second paragraph.",
        "Two sentences",
        "Windows line",
        "and a separator",
    ]
    check_offsets(text, spans)


def test_newline_splits_even_before_lower_case_and_after_abbreviations():
    assert texts("see Dr.\nsmith is here") == ["see Dr.", "smith is here"]


# ----------------------------------------------------------------------------- over-long sentences


def test_long_sentence_without_punctuation_is_cut_at_whitespace():
    words = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta")
    text = " ".join(words[i % len(words)] for i in range(600))  # ~3,500 characters, no stop
    assert len(text) > 3000
    spans = sentence_spans(text)
    assert len(spans) > 5 and all(s.forced for s in spans)
    check_offsets(text, spans)
    for s in spans:  # never cuts inside a word
        assert s.start == 0 or text[s.start - 1] == " "
        assert s.end == len(text) or text[s.end] == " "
    # pieces are as long as the limit allows: the next word would not have fitted
    for a, b in zip(spans, spans[1:]):
        assert b.start + len(b.text.split()[0]) - a.start > 600


def test_long_sentence_without_whitespace_is_cut_hard():
    text = "x" * 3000
    spans = sentence_spans(text)
    assert [(s.start, s.end, s.forced) for s in spans] == [(i, i + 600, True) for i in range(0, 3000, 600)]
    check_offsets(text, spans)
    spans = sentence_spans("y" * 1001, max_chars=100)
    assert [len(s.text) for s in spans] == [100] * 10 + [1] and all(s.forced for s in spans)


def test_long_chinese_sentence_is_cut_after_a_comma():
    text = "数据" * 150 + "，" + "很" * 200 + "、" + "好" * 100 + "。"
    spans = sentence_spans(text, max_chars=400)
    assert [(s.start, s.end, s.text[-1], s.forced) for s in spans] == [(0, 301, "，", True), (301, 603, "。", True)]
    check_offsets(text, spans, max_chars=400)
    # the comma inside the window is preferred to a hard cut
    text = "a" * 30 + "," + "b" * 30
    assert texts(text, max_chars=40) == ["a" * 30 + ",", "b" * 30]


def test_hard_cut_keeps_combining_marks_with_their_letter():
    text = "e\u0301" * 30  # é as e + combining acute accent
    spans = sentence_spans(text, max_chars=25)
    check_offsets(text, spans, max_chars=25)
    assert all(not s.text[0] == "\u0301" for s in spans)


def test_only_the_long_sentence_is_forced():
    long = " ".join(["Word"] + ["word"] * 149) + "."  # 750 characters
    text = f"A short one. {long} Another short one."
    spans = sentence_spans(text, max_chars=300)
    assert [s.forced for s in spans] == [False, True, True, True, False]
    assert spans[0].text == "A short one." and spans[-1].text == "Another short one."
    check_offsets(text, spans, max_chars=300)
    assert [s.forced for s in sentence_spans(text, max_chars=None)] == [False, False, False]


def test_enormous_input_stays_linear_enough():
    text = "Dr. Smith met J. R. R. Tolkien at www.example.com/a.b?x=1 at 3.14 p.m. 它很好！Then it ended. " * 5000
    spans = sentence_spans(text)
    assert len(spans) == 15000
    check_offsets(text, spans)


# ----------------------------------------------------------------------------- real passages


def _nq_passages(n: int) -> list[str]:
    with gzip.open(NQ, "rt", encoding="utf-8") as f:
        return [json.loads(next(f))["ctxs"][0]["text"] for _ in range(n)]


def test_offsets_over_real_nq_passages():
    passages = _nq_passages(300)
    assert len(passages) == 300
    multi = 0
    for text in passages:
        spans = sentence_spans(text)
        assert spans, text[:80]
        check_offsets(text, spans)
        assert split_sentences(text) == [s.text for s in spans]
        multi += len(spans) > 1
    assert multi > 250  # real multi-sentence passages, not one blob each


def test_first_nq_passage():
    text = _nq_passages(1)[0]
    got = texts(text)
    assert got[0] == (
        "The first Nobel Prize in Physics was awarded in 1901 to Wilhelm Conrad Röntgen, of Germany, "
        "who received 150,782 SEK, which is equal to 7,731,004 SEK in December 2007."
    )
    assert got[1] == "John Bardeen is the only laureate to win the prize twice—in 1956 and 1972."


def test_invariants_hold_on_random_text():
    import random

    rng = random.Random(1234)
    alphabet = list("aZ9 .!?…,;\n\r\t\"'()[]“”‘’「」。！？；，、中文é\u0301\u00a0\u3000@/-:") + ["Dr", "U.S", "J", "www.x.com", "No", "e.g"]
    for _ in range(2000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 120)))
        max_chars = rng.choice([None, 20, 25, 40, 600])
        spans = sentence_spans(text, max_chars=max_chars)
        check_offsets(text, spans, max_chars=max_chars)
        assert split_sentences(text) == [s.text for s in sentence_spans(text)]
        if max_chars is None:
            assert not any(s.forced for s in spans)
