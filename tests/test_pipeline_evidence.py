"""pipeline.credibility (lookups, registered domains, decay, clipping, calibration) and
pipeline.conflicts / pipeline.quantities (quantity spotting, unit conversion, conflict detection)."""

from __future__ import annotations

import json
from datetime import date

import pytest

from pipeline.conflicts import detect_conflicts, extract_mentions
from pipeline.credibility import CredibilityTable
from pipeline.types import Evidence


# ---------------------------------------------------------------------------------------------
# credibility
# ---------------------------------------------------------------------------------------------


def test_lookup_by_exact_source_then_domain_then_default():
    t = CredibilityTable({"manual-v1.pdf": 0.9, "example.com": 0.7, "forum.vendor.org": 0.3}, default=0.5)
    assert t.credibility("manual-v1.pdf") == 0.9
    assert t.credibility("https://www.example.com/x?y=1") == 0.7
    assert t.credibility("www.example.com") == 0.7
    assert t.credibility("docs.example.com") == 0.7  # a parent domain
    assert t.credibility("https://forum.vendor.org/t/1") == 0.3
    assert t.credibility("https://vendor.org/") == 0.5  # the child's score does not cover the parent
    assert t.credibility("unknown.pdf") == 0.5
    assert t.credibility("") == 0.5


def test_parent_domains_stop_at_the_registered_domain():
    # the Public Suffix List (tldextract's bundled snapshot): co.uk is a suffix, not a parent domain
    t = CredibilityTable({"co.uk": 0.9, "example.com": 0.7}, default=0.5)
    assert t.credibility("news.bbc.co.uk") == 0.5
    assert t.credibility("https://news.bbc.co.uk/news/world") == 0.5
    assert t.credibility("co.uk") == 0.9  # an exact entry still counts
    t = CredibilityTable({"bbc.co.uk": 0.8, "github.io": 0.9}, default=0.5)
    assert t.credibility("https://www.news.bbc.co.uk/x") == 0.8
    assert t.credibility("alice.github.io") == 0.5  # a private suffix: its users' sites are not GitHub's
    # hosts under no known suffix try their parents down to two labels; IP addresses only themselves
    t = CredibilityTable({"wiki.intranet": 0.8, "0.1": 0.9, "10.0.0.1": 0.3}, default=0.5)
    assert t.credibility("http://team.wiki.intranet/page") == 0.8
    assert t.credibility("http://192.168.0.1/") == 0.5 and t.credibility("http://10.0.0.1:8080/") == 0.3


def test_domain_lookups_fetch_nothing(monkeypatch):
    import socket

    from pipeline import credibility

    credibility._suffix_extractor.cache_clear()

    def refuse(*args, **kwargs):
        raise AssertionError("the public suffix list must not be fetched")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    assert CredibilityTable({"bbc.co.uk": 0.8}).credibility("news.bbc.co.uk") == 0.8
    assert credibility.registered_domain("a.b.example.co.uk") == "example.co.uk"


def test_published_dates_iso_and_others():
    from pipeline.credibility import parse_date

    assert parse_date("2024-03-05") == date(2024, 3, 5)
    assert parse_date("2024-03-05T10:00:00Z") == date(2024, 3, 5)
    assert parse_date("2024-03-05 23:30:00+02:00") == date(2024, 3, 5)
    assert parse_date("2024-03") == date(2024, 3, 1) and parse_date("2024") == date(2024, 1, 1)
    assert parse_date("Tue, 05 Mar 2024 10:00:00 GMT") == date(2024, 3, 5)  # RSS / HTTP dates
    assert parse_date("March 5, 2024") == date(2024, 3, 5)
    assert parse_date("March 2024") == date(2024, 3, 1)
    for bad in ("not a date", "March 5", "5", "", None, "2024-13-01"):
        assert parse_date(bad) is None, bad
    with pytest.raises(ValueError, match="now must be"):
        CredibilityTable(now="soon")


def test_clipping_to_the_seed_range():
    t = CredibilityTable({"perfect": 1.0, "useless": 0.0, "fine": 0.6}, default=2.0)
    assert t.credibility("perfect") == 0.95
    assert t.credibility("useless") == 0.1
    assert t.credibility("fine") == 0.6
    assert t.credibility("nobody") == 0.95
    with pytest.raises(ValueError, match="floor"):
        CredibilityTable(floor=0.9, ceiling=0.5)
    with pytest.raises(ValueError, match="must be a number"):
        CredibilityTable({"a": "high"})


def test_decay_toward_the_floor_with_a_fixed_now():
    t = CredibilityTable({"news.example.com": 0.9}, half_life_days=30, now="2024-03-31")
    assert t.credibility("news.example.com") == 0.9  # no date: no decay
    assert t.credibility("news.example.com", "2024-03-31") == pytest.approx(0.9)
    # one half-life: the part above the floor halves (0.1 + 0.8 / 2)
    assert t.credibility("news.example.com", "2024-03-01") == pytest.approx(0.5)
    assert t.credibility("news.example.com", "2024-01-31T08:00:00Z") == pytest.approx(0.1 + 0.8 / 4)
    assert t.credibility("news.example.com", "2030-01-01") == pytest.approx(0.9)  # future: age 0
    assert t.credibility("news.example.com", "not a date") == 0.9
    assert t.credibility("news.example.com", "1990") == pytest.approx(0.1, abs=1e-9)  # very old: the floor
    assert CredibilityTable({"a": 0.9}, now=date(2024, 3, 31)).credibility("a", "2000-01-01") == 0.9  # no half-life


def test_annotate_sets_credibility_on_evidence():
    t = CredibilityTable({"a.pdf": 0.8}, half_life_days=10, now="2024-01-11")
    ev = [Evidence("x", "c1", "a.pdf", 1.0, published="2024-01-01"), Evidence("y", "c2", "b.pdf", 1.0)]
    t.annotate(ev)
    assert ev[0].credibility == pytest.approx(0.45)
    assert ev[1].credibility == 0.5


def test_calibration_on_a_known_case():
    records = [("wiki", True)] * 8 + [("wiki", False)] * 2 + [("forum", False)] * 2 + \
              [{"source": "vendor", "correct": 1}] * 10
    t = CredibilityTable.calibrate(records, prior_strength=5, prior=0.5)
    assert t.credibility("wiki") == pytest.approx((8 + 2.5) / 15)  # 0.7
    assert t.credibility("forum") == pytest.approx(2.5 / 7)  # 0.357...
    assert t.credibility("vendor") == pytest.approx((10 + 2.5) / 15)  # 0.833...
    assert t.default == 0.5
    rep = t.calibration_report["sources"]
    assert rep["wiki"] == {"n": 10, "correct": 8, "accuracy": 0.8, "credibility": pytest.approx(0.7)}
    assert rep["forum"]["n"] == 2 and rep["forum"]["accuracy"] == 0.0
    # no smoothing: raw accuracies, clipped
    raw = CredibilityTable.calibrate(records, prior_strength=0, prior=0.5)
    assert raw.credibility("vendor") == 0.95 and raw.credibility("forum") == 0.1 and raw.credibility("wiki") == 0.8
    # prior=None: the pooled accuracy (18 of 22), also the default for unseen sources
    pooled = CredibilityTable.calibrate(records, prior_strength=5)
    assert pooled.calibration_report["prior"] == pytest.approx(18 / 22)
    assert pooled.credibility("forum") == pytest.approx((0 + 5 * 18 / 22) / 7)
    assert pooled.credibility("never-seen") == pytest.approx(18 / 22)


def test_calibration_rejects_bad_records():
    with pytest.raises(ValueError, match="record 1"):
        CredibilityTable.calibrate([("a", True), ("b", "yes")])
    with pytest.raises(ValueError, match="record 0"):
        CredibilityTable.calibrate([{"src": "a"}])
    with pytest.raises(ValueError, match="at least one record"):
        CredibilityTable.calibrate([])


def test_from_file_json_and_yaml_round_trip(tmp_path):
    t = CredibilityTable({"a.pdf": 0.8, "example.com": 0.6}, default=0.4, half_life_days=90)
    p = tmp_path / "cred.json"
    t.save(p)
    back = CredibilityTable.from_file(p)
    assert back.to_dict() == t.to_dict()
    y = tmp_path / "cred.yaml"
    y.write_text("sources:\n  a.pdf: 0.8\n  example.com: 0.6\ndefault: 0.4\nhalf_life_days: 90\n")
    assert CredibilityTable.from_file(y).to_dict() == t.to_dict()
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"sources": {"a": 0.5}, "defualt": 0.3}))
    with pytest.raises(ValueError, match="unknown keys"):
        CredibilityTable.from_file(bad)
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        CredibilityTable.from_file(bad)
    with pytest.raises(FileNotFoundError):
        CredibilityTable.from_file(tmp_path / "missing.json")


# ---------------------------------------------------------------------------------------------
# conflicts
# ---------------------------------------------------------------------------------------------


def ev(*pairs: tuple[str, str]) -> list[Evidence]:
    return [Evidence(text=t, chunk_id=f"c{i}", source=s, score=1.0) for i, (t, s) in enumerate(pairs)]


def test_every_unit_spelling_converts_to_its_dimension():
    from pipeline.quantities import BASE_UNITS, UNIT_SPELLINGS, to_base

    for spellings, dim, unit, _ in UNIT_SPELLINGS:
        if unit is None:
            assert dim.startswith("currency:"), spellings
            continue
        assert dim in BASE_UNITS, (spellings, dim)
        assert to_base(1.0, unit, dim) > 0 or dim == "temperature", spellings  # pint raises on a wrong dimension


def test_quantities_in_base_units():
    from pipeline.quantities import find_quantities

    got = {q.display: (q.dim, q.value, q.alts) for q in find_quantities(
        "It weighs 1 lb 4 oz, runs at 212 °F on 5 acres, stores 1 GB and costs €1.2 million.")}
    assert got["1 lb 4 oz"][0] == "mass" and got["1 lb 4 oz"][1] == pytest.approx(566.99, abs=0.01)
    assert got["212 °F"][:2] == ("temperature", pytest.approx(100.0))
    assert got["5 acres"][1] == pytest.approx(5 * 4046.8564224)  # the international acre
    assert got["1 GB"] == ("data", 1e9, (pytest.approx(2.0 ** 30),))
    assert got["€1.2 million"] == ("currency:EUR", 1.2e6, ())
    # compounds, also with "and" (which is no range here)
    assert [(q.display, q.value) for q in find_quantities("It died aged 26 years and 9 months; it ran 2 h 30 min.")] == [
        ("26 years and 9 months", pytest.approx(26.75 * 365.25 * 86400)), ("2 h 30 min", 9000.0)]
    # ranges, bounds and lists are spotted but not point values: kept only when asked for
    text = "It weighs between 5 and 7 kg, up to 9 kg; prices: $1, $2 and $5; it weighs 6 kg."
    kept = find_quantities(text, keep_skipped=True)
    assert [(q.display, q.skip) for q in kept] == [("7 kg", True), ("9 kg", True), ("$1", True), ("$2", True),
                                                    ("$5", True), ("6 kg", False)]
    assert [q.display for q in find_quantities(text)] == ["6 kg"]


def test_numbers_with_units_conflict():
    cs = detect_conflicts(ev(("The E-204 weighs 5 kg.", "manual-v1.pdf"), ("E-204 weight: 7 kg", "forum.example.com")))
    assert len(cs) == 1
    c = cs[0]
    assert c.kind == "number" and c.attribute == "weight"
    assert c.values == ["5 kg", "7 kg"] and c.evidence == [0, 1]
    assert c.note == "Sources disagree on weight: 5 kg (manual-v1.pdf) vs 7 kg (forum.example.com)"


@pytest.mark.parametrize("a, b", [
    ("The E-204 weighs 5 kg.", "The E-204 weighs 5000 g."),  # the same value in other units
    ("The E-204 weighs 5 kg.", "The E-204 weighs 11 lb."),  # 4.99 kg: within 1%
    ("The trail is 1 km long.", "The trail is 1000 m long."),
    ("Water boils at 100 °C.", "Water boils at 212 °F."),
    ("The file is 1 GB.", "The file is 1024 MB."),  # binary reading
    ("The E-204 weighs about 5 kg.", "The E-204 weighs 5.3 kg."),  # approximate: 10%
    ("The weight is 5 kg.", "The height is 7 m."),  # different attributes and dimensions
    ("The E-204 weighs 5 kg.", "The X-300 weighs 7 kg."),  # different products
    ("The battery weight is 1 kg.", "The device weight is 5 kg."),  # different parts
    ("The maximum temperature is 60 °C.", "The minimum temperature is -10 °C."),  # different qualifiers
    ("The battery lasts 10 hours.", "Charging takes 2 hours."),
    ("In 2019 the population was 8.5 million.", "In 2023 the population was 8.9 million."),  # different years
    ("It weighs between 5 and 7 kg.", "It weighs 6 kg."),  # a range
    ("It holds up to 10 kg.", "It holds 6 kg."),  # a bound
    ("The E-204 does not weigh 7 kg.", "The E-204 weighs 5 kg."),  # negated
    ("The E-204 costs $300.", "The E-204 costs €350."),  # currencies are never converted
    ("Prices: $1, $2, $5 and $10.", "Prices: $3."),  # a list
])
def test_no_conflict(a, b):
    assert detect_conflicts(ev((a, "a.pdf"), (b, "b.pdf"))) == []


def test_conversions_still_catch_real_differences():
    cs = detect_conflicts(ev(("The trail is 1 km long.", "a"), ("The trail is 1200 m long.", "b")))
    assert [c.values for c in cs] == [["1 km", "1200 m"]]
    cs = detect_conflicts(ev(("Switzerland has a population of 8.7 million.", "a"),
                             ("Switzerland has 9.1 million inhabitants.", "b")))
    assert len(cs) == 1 and cs[0].attribute == "population"


def test_quantity_among_other_quantities():
    cs = detect_conflicts(ev(("The E-204 weighs 5 kg and costs $300.", "shop.example.com"),
                             ("The E-204 costs $350, according to the manual.", "manual.pdf")))
    assert len(cs) == 1
    assert cs[0].attribute == "price" and cs[0].values == ["$300", "$350"]


def test_named_values_conflict():
    cs = detect_conflicts(ev(("The capital of Switzerland is Bern.", "a.org"),
                             ("The capital of Switzerland is Zurich.", "b.org")))
    assert len(cs) == 1
    assert cs[0].kind == "value" and cs[0].values == ["Bern", "Zurich"]
    assert cs[0].note == "Sources disagree on capital of Switzerland: Bern (a.org) vs Zurich (b.org)"

    cs = detect_conflicts(ev(("According to the manual, the default password is admin.", "manual.pdf"),
                             ("Default password: 1234", "forum.example.com")))
    assert len(cs) == 1 and cs[0].values == ["admin", "1234"]
    assert "password" in cs[0].attribute

    cs = detect_conflicts(ev(("Default password: admin", "a"), ("Default password: 1234", "b")))
    assert len(cs) == 1 and cs[0].values == ["admin", "1234"]


@pytest.mark.parametrize("a, b", [
    ("The capital of France is Paris.", "The capital of Switzerland is Bern."),  # different subjects
    ("The capital of Switzerland is Bern.", "The capital of Switzerland is BERN"),  # the same value
    ("The capital of Switzerland is Zürich.", "The capital of Switzerland is Zurich."),  # accents folded
    ("Bern is a city.", "Zurich is a city."),
    ("The E-204 is available in Europe.", "The E-204 is sold in Asia."),
    ("The countries are Iraq, Syria and Jordan.", "The countries are Syria, Iraq and Jordan."),  # lists
    ("Note: keep the unit dry.", "Note: clean the filter."),  # not an attribute
    ("She was happy.", "She was sad."),
])
def test_no_named_value_conflict(a, b):
    assert detect_conflicts(ev((a, "a"), (b, "b"))) == []


def test_three_sources_grouped_into_one_conflict():
    cs = detect_conflicts(ev(("The E-204 weighs 5 kg.", "manual-v1.pdf"), ("The E-204 weighs 7 kg.", "forum.example.com"),
                             ("The E-204 weighs 5000 g.", "shop.example.com")))
    assert len(cs) == 1
    c = cs[0]
    assert c.evidence == [0, 1, 2] and c.values == ["5 kg", "7 kg", "5000 g"]
    assert c.note == "Sources disagree on weight: 5 kg (manual-v1.pdf, shop.example.com) vs 7 kg (forum.example.com)"


def test_no_conflict_within_one_evidence_item_or_on_unrelated_text():
    assert detect_conflicts(ev(("The E-204 weighs 5 kg. Some say the E-204 weighs 7 kg.", "a"))) == []
    unrelated = ev(
        ("The E-204 dishwasher shows error E-204 when the drain pump is blocked.", "manual.pdf"),
        ("Bern has been the federal city of Switzerland since 1848.", "wiki"),
        ("The XR-7000 ships with a 2 m hose and a 12 V adapter.", "shop"),
        ("Clean the filter every 30 days.", "forum"),
    )
    assert detect_conflicts(unrelated) == []
    assert detect_conflicts([]) == []


def test_mentions_are_read_from_multi_sentence_evidence():
    ms = extract_mentions(ev(("The E-204 is compact. It weighs 5 kg and draws 2 A.", "a")))
    assert [(m.dim, m.display) for m in ms] == [("mass", "5 kg"), ("current", "2 A")]
    assert ms[0].attrs == ("weight",)
