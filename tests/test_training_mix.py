"""Training on a weighted mix of sources (``train_mix``): the exact per-source counts (with
upsampling), determinism for a seed, dev held out by query, per-source data and dev metrics in the
manifest, soft labels end to end, group-ce over two groups files, and the config's messages."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from data_prep.io import read_records, write_jsonl
from data_prep.records import LabelledPair, QueryExample
from training.config import ConfigError, EvaluatorConfig, build_config
from training.core import train_model
from training.data import MIX_TAG, held_out, load_mix, mix_counts
from training_data import make_evaluator_data

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_evaluator_data(tmp_path_factory.mktemp("mixdata"))


def renamed(records, prefix: str):
    """Records of a source with its own query ids (``prefix`` + id), so a pair's source shows."""
    out = []
    for r in records:
        if isinstance(r, LabelledPair):
            out.append(replace(r, query_id=prefix + r.query_id, metadata=dict(r.metadata)))
        else:
            out.append(replace(r, id=prefix + r.id, metadata=dict(r.metadata)))
    return out


def write(path: Path, records) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_jsonl(path, records)
    return str(path)


@pytest.fixture(scope="module")
def sources(data, tmp_path_factory):
    """human: 240 train / 80 dev pairs (60 + 20 queries); llm: 40 pairs of 10 other queries with soft
    labels and its own dev file; built: a `data_prep build`-shaped folder."""
    d = tmp_path_factory.mktemp("mixsources")
    train = list(read_records(data["train_pairs"], LabelledPair))
    dev = list(read_records(data["dev_pairs"], LabelledPair))
    llm = renamed(train[:40], "llm-")
    for i, p in enumerate(llm):
        p.label = (0.333, 0.667, 1.0, 0.0)[i % 4]
        p.label_source = "llm"
    built = d / "built"
    write(built / "evaluator" / "train.pairs.jsonl", renamed(train[40:120], "b-"))
    write(built / "evaluator" / "dev.pairs.jsonl", renamed(dev[:40], "b-"))
    (built / "meta.json").write_text(json.dumps({"counts": {"evaluator": {"train": 80, "dev": 40}}}))
    return {
        "human_train": str(data["train_pairs"]), "human_dev": str(data["dev_pairs"]),
        "llm_train": write(d / "llm.pairs.jsonl", llm),
        "llm_dev": write(d / "llm.dev.pairs.jsonl", renamed(dev[40:], "llm-")),
        "built": str(built), "dir": d,
    }


def mix_cfg(model, tmp: Path, train_mix, **kw) -> EvaluatorConfig:
    base = dict(model_name_or_path=str(model), train_mix=train_mix, output_dir=str(tmp / "run"),
                export_dir=str(tmp / "export"), max_steps=2, eval_steps=0, save_steps=2, learning_rate=2e-3,
                max_length=96, max_query_length=24, logging_steps=1, per_device_train_batch_size=8,
                warmup_ratio=0.0, min_dev_pairs=20)
    base.update(kw)
    return EvaluatorConfig(**base)


def key(p: LabelledPair) -> tuple[str, str]:
    return p.query_id, p.passage.id


# --------------------------------------------------------------------------------------------
# the mixing rule


def test_mix_counts_and_upsampling(sources, tmp_path):
    assert mix_counts([120, 40], [1, 1], 200) == [100, 100]
    assert mix_counts([120, 40], [2, 1], 100) == [67, 33]
    assert mix_counts([120, 40], [3, 1]) == [120, 40]  # default mix_size: the sum of the sizes
    mix = [{"name": "human", "file": sources["human_train"], "dev_file": sources["human_dev"], "weight": 1,
            "max_examples": 120},
           {"name": "llm", "file": sources["llm_train"], "dev_file": sources["llm_dev"], "weight": 1.0}]
    m = load_mix(mix_cfg("m", tmp_path, mix, mix_size=200, loss="soft-bce"))
    human, llm = m.sources
    assert (len(human.examples), human.examples_read, human.taken) == (120, 240, 100)
    assert (len(llm.examples), llm.taken, llm.repeats) == (40, 100, 2.5)
    assert len(m.examples) == 200
    by_source = Counter("llm" if p.query_id.startswith("llm-") else "human" for p in m.examples)
    assert by_source == {"human": 100, "llm": 100}
    # human: a sample without replacement of its 120 capped pairs
    human_keys = [key(p) for p in m.examples if not p.query_id.startswith("llm-")]
    assert len(set(human_keys)) == 100 and set(human_keys) <= {key(p) for p in human.examples}
    # llm (40 pairs): every pair twice, plus 20 of them a third time
    uses = Counter(key(p) for p in m.examples if p.query_id.startswith("llm-"))
    assert len(uses) == 40 and Counter(uses.values()) == {2: 20, 3: 20}
    # the mix is shuffled: the sources are interleaved, not one block after the other
    first = ["llm" if p.query_id.startswith("llm-") else "human" for p in m.examples[:100]]
    assert 20 < first.count("llm") < 80
    # dev: both dev files, each pair tagged with its source
    assert len(m.dev_pairs) == 80 + 40
    assert Counter(p.metadata[MIX_TAG] for p in m.dev_pairs) == {"human": 80, "llm": 40}
    # default mix_size with weights 3:1: 160 examples, 120 + 40
    m = load_mix(mix_cfg("m", tmp_path, [{**mix[0], "weight": 3}, mix[1]], loss="soft-bce"))
    assert [s.taken for s in m.sources] == [120, 40] and len(m.examples) == 160


def test_mix_is_deterministic_for_a_seed(sources, tmp_path):
    mix = [{"name": "human", "file": sources["human_train"], "dev_file": sources["human_dev"], "weight": 2},
           {"name": "llm", "file": sources["llm_train"], "weight": 1}]

    def order(seed):
        return [key(p) for p in load_mix(mix_cfg("m", tmp_path, mix, mix_size=150, seed=seed, loss="mse")).examples]

    a = order(13)
    assert a == order(13)
    b = order(14)
    assert b != a and Counter(q.startswith("llm-") for q, _ in b) == Counter(q.startswith("llm-") for q, _ in a)


def test_dev_ratio_holds_out_whole_queries(sources, tmp_path):
    mix = [{"name": "human", "file": sources["human_train"], "dev_ratio": 0.3},
           {"name": "llm", "file": sources["llm_train"], "dev_file": sources["llm_dev"]}]
    m = load_mix(mix_cfg("m", tmp_path, mix, loss="soft-bce"))
    human = m.sources[0]
    all_q = {p.query_id for p in read_records(sources["human_train"], LabelledPair)}
    dev_q = {p.query_id for p in human.dev_pairs}
    train_q = {p.query_id for p in human.examples}
    assert dev_q == {q for q in all_q if held_out(q, 0.3)} and 8 <= len(dev_q) <= 30
    assert not dev_q & train_q and dev_q | train_q == all_q and human.held_out_queries == len(dev_q)
    # every pair of a held-out query is in dev (4 per query), none in the mixed training set
    assert len(human.dev_pairs) == 4 * len(dev_q)
    assert not dev_q & {p.query_id for p in m.examples}
    assert {p.metadata[MIX_TAG] for p in human.dev_pairs} == {"human"}
    # the split depends on the query id only: another seed or another source order keeps it
    m2 = load_mix(mix_cfg("m", tmp_path, mix[::-1], loss="soft-bce", seed=99))
    assert {p.query_id for p in m2.sources[1].dev_pairs} == dev_q


def test_dev_ratio_on_a_dataset_dir_leaves_its_dev_split_untouched(sources, tmp_path):
    """A built dataset's dev split can be kept as a test set: dev_ratio holds dev out of its train split."""
    m = load_mix(mix_cfg("m", tmp_path, [{"name": "built", "dataset_dir": sources["built"], "dev_ratio": 0.3}],
                         loss="soft-bce"))
    src = m.sources[0]
    folder = Path(sources["built"]) / "evaluator"
    train_q = {p.query_id for p in read_records(folder / "train.pairs.jsonl", LabelledPair)}
    test_q = {p.query_id for p in read_records(folder / "dev.pairs.jsonl", LabelledPair)}
    dev_q = {p.query_id for p in src.dev_pairs}
    assert dev_q == {q for q in train_q if held_out(q, 0.3)} and dev_q and src.held_out_queries == len(dev_q)
    assert not dev_q & {p.query_id for p in src.examples} and src.dev_file is None
    # the dataset's own dev split is neither trained on nor used as dev
    assert not test_q & ({p.query_id for p in m.examples} | {p.query_id for p in m.dev_pairs})


# --------------------------------------------------------------------------------------------
# training on a mix


def test_mix_trains_and_records_sources_in_the_manifest(tiny_bert, sources, tmp_path):
    # feedback: thumbs-up only, in training and in dev (its dev pairs have one class)
    fb = [p for p in read_records(sources["human_train"], LabelledPair) if p.label == 1.0][:20]
    fb_train = write(tmp_path / "fb.jsonl", renamed(fb[:15], "fb-"))
    fb_dev = write(tmp_path / "fb.dev.jsonl", renamed(fb[15:], "fbdev-"))
    mix = [{"name": "human", "file": sources["human_train"], "dev_file": sources["human_dev"], "weight": 2},
           {"name": "built", "dataset_dir": sources["built"], "weight": 1, "max_examples": 50},
           {"name": "llm", "file": sources["llm_train"], "dev_ratio": 0.5, "weight": 1},
           {"name": "feedback", "file": fb_train, "dev_file": fb_dev, "weight": 0.5}]
    res = train_model(mix_cfg(tiny_bert, tmp_path, mix, loss="soft-bce", mix_size=180))
    man = json.loads((res.export_dir / "evaluator.json").read_text())
    data = man["training"]["data"]
    srcs = data["sources"]
    assert list(srcs) == ["human", "built", "llm", "feedback"]
    assert [srcs[n]["examples_taken"] for n in srcs] == [80, 40, 40, 20]  # 180 * (2, 1, 1, .5) / 4.5
    assert data["train_examples"] == 180 and data["mix_size"] == 180
    assert srcs["human"]["examples_available"] == 240 and srcs["human"]["repeats"] == pytest.approx(80 / 240)
    assert srcs["built"]["examples_read"] == 80 and srcs["built"]["examples_available"] == 50
    assert srcs["feedback"]["examples_available"] == 15 and srcs["feedback"]["repeats"] == pytest.approx(20 / 15)
    assert srcs["human"]["weight"] == 2.0 and srcs["human"]["share"] == pytest.approx(2 / 4.5)
    from inference.manifest import file_sha256

    assert srcs["human"]["train_sha256"] == file_sha256(sources["human_train"])
    assert srcs["human"]["dev_sha256"] == file_sha256(sources["human_dev"])
    assert srcs["built"]["train_file"].endswith("built/evaluator/train.pairs.jsonl")
    assert srcs["built"]["dev_file"].endswith("built/evaluator/dev.pairs.jsonl") and "meta_sha256" in srcs["built"]
    assert srcs["llm"]["dev_ratio"] == 0.5 and srcs["llm"]["held_out_queries"] > 0 and "dev_file" not in srcs["llm"]
    llm_q = {p.query_id for p in read_records(sources["llm_train"], LabelledPair)}
    n_llm_dev = 4 * sum(held_out(q, 0.5) for q in llm_q)
    assert srcs["llm"]["examples_available"] == 40 - n_llm_dev
    assert {n: srcs[n]["dev_pairs"] for n in srcs} == {"human": 80, "built": 40, "llm": n_llm_dev, "feedback": 5}
    # the pooled dev pairs calibrate and tune the decision
    assert data["dev_pairs"] == man["calibration"]["dev_pairs"] == man["metrics"]["dev"]["n"] == 125 + n_llm_dev
    # dev metrics per source: the task's pair metrics on each source's dev pairs; one-class sources noted
    by = man["metrics"]["dev_by_source"]
    assert set(by) == {"human", "built", "llm"}
    assert by["human"]["n"] == 80 and by["human"]["positives"] == 20 and by["built"]["n"] == 40
    for m in by.values():
        assert {"auc", "f1", "precision", "recall", "ece", "actions"} <= set(m)
    assert by["llm"]["n"] == n_llm_dev
    assert "all positive" in man["metrics"]["dev_by_source_skipped"]["feedback"]
    card = (res.export_dir / "README.md").read_text()  # the model card names the sources and their dev metrics
    assert "## Dev metrics by training source" in card and "| human | 80 | 20 |" in card
    assert "human: " in card and "each source's dev split" in card and "`None`" not in card


@pytest.mark.parametrize("loss", ["soft-bce", "mse"])
def test_soft_labels_train_end_to_end(tiny_bert, sources, tmp_path, trainer_datasets, loss):
    seen = trainer_datasets
    mix = [{"name": "human", "file": sources["human_train"], "dev_file": sources["human_dev"], "weight": 1},
           {"name": "llm", "file": sources["llm_train"], "dev_ratio": 0.4, "weight": 1}]
    cfg = mix_cfg(tiny_bert, tmp_path, mix, loss=loss, mix_size=160)
    res = train_model(cfg)
    expected = Counter(p.label for p in load_mix(cfg).examples)
    got = Counter(seen["train"].labels)
    assert got == expected and got[0.333] > 0 and got[0.667] > 0  # the soft values, not rounded
    # soft dev labels: calibration fitted on them, metrics binarised at 0.5
    assert {0.333, 0.667} & set(seen["eval"].labels)
    man = json.loads((res.export_dir / "evaluator.json").read_text())
    assert man["training"]["config"]["loss"] == loss
    n_soft_pos = sum(1 for y in seen["eval"].labels if y >= 0.5)
    assert man["metrics"]["dev"]["positives"] == n_soft_pos
    assert man["thresholds"]["theta_low"] <= man["thresholds"]["theta_high"]


def test_group_ce_over_two_groups_files(tiny_bert, data, tmp_path):
    groups = list(read_records(data["train_groups"], QueryExample))
    a = write(tmp_path / "a.groups.jsonl", renamed(groups[:30], "a-"))
    b_groups = renamed(groups[30:], "b-")
    for g in b_groups:  # named like `data_prep build` groups: <query id>#g<i>, the query id in metadata
        g.metadata["query_id"] = g.id
        g.id = g.id + "#g0"
    b = write(tmp_path / "b.groups.jsonl", b_groups)
    mix = [{"name": "a", "file": a, "dev_file": str(data["dev_pairs"]), "weight": 1},
           {"name": "b", "file": b, "dev_ratio": 0.3, "weight": 3}]
    cfg = mix_cfg(tiny_bert, tmp_path, mix, loss="group-ce", group_size=4, per_device_train_batch_size=4, mix_size=40)
    m = load_mix(cfg)
    assert [s.taken for s in m.sources] == [10, 30] and all(isinstance(g, QueryExample) for g in m.examples)
    held = {g.metadata["query_id"] for g in b_groups if held_out(g.metadata["query_id"], 0.3)}
    b_dev = m.sources[1].dev_pairs
    assert held and {p.query_id for p in b_dev} == held and len(b_dev) == 4 * len(held)
    assert Counter(p.label for p in b_dev) == {1.0: len(held), 0.0: 3 * len(held)}
    assert not held & {g.metadata.get("query_id") for g in m.examples}
    res = train_model(cfg)
    man = json.loads((res.export_dir / "evaluator.json").read_text())
    assert [man["training"]["data"]["sources"][n]["examples_taken"] for n in ("a", "b")] == [10, 30]
    assert man["training"]["data"]["sources"]["b"]["repeats"] == pytest.approx(30 / (30 - len(held)))
    assert set(man["metrics"]["dev_by_source"]) == {"a", "b"}


def test_single_source_manifest_is_unchanged(tiny_bert, data, tmp_path):
    cfg = EvaluatorConfig(model_name_or_path=str(tiny_bert), train_file=str(data["train_pairs"]),
                          dev_file=str(data["dev_pairs"]), output_dir=str(tmp_path / "run"),
                          export_dir=str(tmp_path / "export"), max_steps=2, eval_steps=0, save_steps=2,
                          max_length=96, max_query_length=24, min_dev_pairs=20)
    man = json.loads((train_model(cfg).export_dir / "evaluator.json").read_text())
    assert list(man["training"]["data"]) == ["train_file", "train_sha256", "train_examples", "dev_file", "dev_sha256",
                                             "dev_pairs", "passages_truncated"]
    assert set(man["metrics"]) == {"dev", "dev_raw_at_0.5"}


# --------------------------------------------------------------------------------------------
# config validation


GOOD = {"name": "a", "file": "a.jsonl", "dev_file": "a.dev.jsonl"}


@pytest.mark.parametrize("mix,extra,message", [
    ({"name": "a"}, {}, "must be a list of sources"),
    (["a.jsonl"], {}, "source 1 must be a mapping"),
    ([{"file": "a.jsonl", "dev_ratio": 0.1}], {}, "source 1 has no name"),
    ([{**GOOD, "wieght": 2}], {}, "source 'a' has unknown key 'wieght' \\(did you mean 'weight'\\?\\)"),
    ([GOOD, {**GOOD}], {}, "duplicate source name 'a'"),
    ([{"name": "a", "dev_ratio": 0.1}], {}, "source 'a' needs either file or dataset_dir"),
    ([{**GOOD, "dataset_dir": "d"}], {}, "source 'a' has both file and dataset_dir"),
    ([{**GOOD, "weight": 0}], {}, "source 'a': weight must be a number > 0, got 0"),
    ([{**GOOD, "weight": -1.5}], {}, "source 'a': weight must be a number > 0, got -1.5"),
    ([{"name": "a", "file": "a.jsonl", "dev_ratio": 1.0}], {}, "source 'a': dev_ratio must be in \\(0, 1\\), got 1.0"),
    ([{"name": "a", "file": "a.jsonl", "dev_ratio": 0}], {}, "source 'a': dev_ratio must be in \\(0, 1\\), got 0"),
    ([{**GOOD, "dev_ratio": 0.2}], {}, "source 'a' has both dev_file and dev_ratio"),
    ([{**GOOD, "max_examples": 0}], {}, "source 'a': max_examples must be an integer >= 1"),
    ([{"name": "a", "file": "a.jsonl"}], {}, "no source has dev pairs"),
    ([GOOD], {"train_file": "t.jsonl"}, "cannot be combined with train_file"),
    ([GOOD], {"dataset_dir": "d"}, "cannot be combined with dataset_dir"),
    ([GOOD], {"dev_file": "d.jsonl"}, "cannot be combined with dev_file"),
    ([GOOD], {"max_train_examples": 10}, "cannot be combined with max_train_examples"),
])
def test_bad_mix_configs(mix, extra, message):
    with pytest.raises(ConfigError, match="config 'train_mix': " + message):
        EvaluatorConfig(train_mix=mix, **extra)


def test_missing_source_files_name_the_source(sources, tmp_path):
    from data_prep.io import MissingInputError

    cfg = mix_cfg("m", tmp_path, [{"name": "nq", "dataset_dir": str(tmp_path / "nope")}])
    with pytest.raises(MissingInputError, match="training file of train_mix source 'nq' not found: .*nope/evaluator/"
                                                 "train.pairs.jsonl"):
        load_mix(cfg)
    cfg = mix_cfg("m", tmp_path, [{"name": "llm", "file": sources["llm_train"], "dev_file": str(tmp_path / "x")}])
    with pytest.raises(MissingInputError, match="dev file of train_mix source 'llm' not found"):
        load_mix(cfg)


def test_mix_size_and_recipe_messages():
    with pytest.raises(ConfigError, match="config 'mix_size': only used with train_mix"):
        EvaluatorConfig(train_file="t.jsonl", mix_size=10)
    with pytest.raises(ConfigError, match="config 'mix_size': must be an integer >= 1"):
        EvaluatorConfig(train_mix=[GOOD], mix_size=0)
    with pytest.raises(ConfigError, match="config 'train_file': set train_file or dataset_dir \\(or train_mix\\)"):
        EvaluatorConfig()
    # data on the command line replaces the recipe's data of the other kind: a mix replaces a
    # recipe's dataset_dir (and its prepare_data) ...
    ce = ROOT / "configs" / "evaluator" / "minilm-cross-encoder.yaml"
    over = build_config(ce, {"train_mix": [GOOD]})
    assert over.train_mix == [GOOD] and over.dataset_dir is None and over.prepare_data == {}
    # ... and a file or built folder replaces the default recipe's mix
    own = build_config(None, {"train_file": "t.jsonl", "dev_file": "d.jsonl"})
    assert own.train_file == "t.jsonl" and own.train_mix == [] and own.mix_size is None
    assert build_config(None, {"dataset_dir": "built"}).train_mix == []
    # both kinds asked for at once stay an error that says what to unset
    with pytest.raises(ConfigError, match="cannot be combined with train_file .*--train_file null"):
        build_config(None, {"train_file": "t.jsonl", "train_mix": [GOOD]})
    cfg = build_config(ce, {"train_mix": [GOOD], "dataset_dir": None, "mix_size": 100})
    assert cfg.train_mix == [GOOD] and cfg.to_dict()["train_mix"] == [GOOD]
