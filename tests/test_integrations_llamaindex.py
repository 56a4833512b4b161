"""integrations.llamaindex.CragPostprocessor with real tiny exports: Correct nodes kept, Incorrect
dropped, Ambiguous refined by the extractor; the input nodes untouched; inside a real query engine;
and against a live server."""

from __future__ import annotations

import asyncio
import math

import pytest

pytest.importorskip("llama_index.core")

from conftest import live_server, write_export  # noqa: E402
from llama_index.core.postprocessor.types import BaseNodePostprocessor  # noqa: E402
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle, TextNode  # noqa: E402

import inference  # noqa: E402
from integrations.llamaindex import CragPostprocessor  # noqa: E402

QUERY = "who wrote the novel war and peace"
TEXTS = [
    "War and Peace is a novel by Leo Tolstoy. It was published in 1869. It follows five families.",
    "The river flows through the city. Boats carry goods. The bridge is old.",
    "Tolstoy was a Russian writer. He also wrote Anna Karenina. He died in 1910.",
]


def sigmoid(b: float) -> float:
    return 1.0 / (1.0 + math.exp(-b))


@pytest.fixture(scope="module")
def exports(tiny_bert, tmp_path_factory):
    d = tmp_path_factory.mktemp("li-exports")
    return {name: write_export(tiny_bert, d / name, task, b) for name, task, b in [
        ("correct", "evaluator", 3.0), ("incorrect", "evaluator", -3.0), ("ambiguous", "evaluator", 0.0),
        ("extractor", "extractor", 0.0)]}


def make_nodes() -> list[NodeWithScore]:
    return [NodeWithScore(node=TextNode(text=t, id_=f"n{i}", metadata={"source": f"doc{i}"}), score=10.0 - i)
            for i, t in enumerate(TEXTS)]


def snapshot(nodes: list[NodeWithScore]) -> list[tuple]:
    return [(n.node.node_id, n.node.get_content(MetadataMode.NONE), dict(n.node.metadata), n.score,
             list(n.node.excluded_llm_metadata_keys)) for n in nodes]


def test_is_a_llamaindex_postprocessor(exports):
    crag = CragPostprocessor(evaluator=exports["correct"])
    assert isinstance(crag, BaseNodePostprocessor)
    assert crag.class_name() == "CragPostprocessor"
    assert crag.postprocess_nodes([], query_str=QUERY) == []
    with pytest.raises(ValueError, match="query"):
        crag.postprocess_nodes(make_nodes())


def test_correct_nodes_are_kept_with_scores_and_the_input_is_untouched(exports):
    nodes = make_nodes()
    before = snapshot(nodes)
    out = CragPostprocessor(evaluator=exports["correct"]).postprocess_nodes(nodes, QueryBundle(QUERY))
    assert snapshot(nodes) == before
    assert [n.node.node_id for n in out] == ["n0", "n1", "n2"]
    for n, text in zip(out, TEXTS):
        assert n.score == pytest.approx(sigmoid(3.0), abs=1e-6)
        assert n.node.metadata["crag_score"] == pytest.approx(sigmoid(3.0), abs=1e-6)
        assert n.node.metadata["crag_action"] == "Correct"
        assert n.node.metadata["source"] == f"doc{n.node.node_id[1:]}"
        assert n.node.get_content(MetadataMode.NONE) == text
        # the grade stays out of the LLM's context
        assert "crag_score" not in n.node.get_content(MetadataMode.LLM)
        assert "source" in n.node.get_content(MetadataMode.LLM)


def test_incorrect_nodes_are_dropped(exports):
    crag = CragPostprocessor(evaluator=exports["incorrect"])
    assert crag.postprocess_nodes(make_nodes(), query_str=QUERY) == []
    # the thresholds can be overridden: 0.047 is Ambiguous with theta_low 0.01
    out = CragPostprocessor(evaluator=exports["incorrect"], theta_low=0.01).postprocess_nodes(make_nodes(), query_str=QUERY)
    assert [n.node.metadata["crag_action"] for n in out] == ["Ambiguous"] * 3


def test_ambiguous_nodes_are_refined_by_the_extractor(exports):
    nodes = make_nodes()
    before = snapshot(nodes)
    # the extractor scores every sentence 0.5: its top_k are the first ones
    out = CragPostprocessor(evaluator=exports["ambiguous"], extractor=exports["extractor"], top_k=1).postprocess_nodes(
        nodes, QueryBundle(QUERY))
    assert snapshot(nodes) == before
    assert [n.node.get_content(MetadataMode.NONE) for n in out] == [
        "War and Peace is a novel by Leo Tolstoy.", "The river flows through the city.", "Tolstoy was a Russian writer."]
    assert [n.node.node_id for n in out] == ["n0", "n1", "n2"]
    assert all(n.node.metadata["crag_action"] == "Ambiguous" and n.score == pytest.approx(0.5, abs=1e-6) for n in out)
    # the same with the extractor's own top_k (3), and as loaded models
    loaded = CragPostprocessor(evaluator=inference.load(exports["ambiguous"]),
                               extractor=inference.load(exports["extractor"], task="extractor"))
    assert [n.node.get_content(MetadataMode.NONE) for n in loaded.postprocess_nodes(make_nodes(), query_str=QUERY)] == TEXTS
    # without an extractor an Ambiguous node is kept whole
    whole = CragPostprocessor(evaluator=exports["ambiguous"]).postprocess_nodes(make_nodes(), query_str=QUERY)
    assert [n.node.get_content(MetadataMode.NONE) for n in whole] == TEXTS


def test_mixed_grades_route_each_node(ce_export, exports):
    """A trained export scores the nodes differently: with thresholds between the scores one node
    is kept, one refined and one dropped, and the scores are the export's own."""
    ev = inference.load(ce_export)
    scores = ev.score([(QUERY, t) for t in TEXTS])
    order = sorted(range(3), key=lambda i: -scores[i])
    s = [scores[i] for i in order]
    assert s[0] - s[1] > 1e-7 and s[1] - s[2] > 1e-7, scores  # tiny, but the same batch scores alike
    crag = CragPostprocessor(evaluator=ev, extractor=exports["extractor"], top_k=1,
                             theta_high=(s[0] + s[1]) / 2, theta_low=(s[1] + s[2]) / 2)
    out = crag.postprocess_nodes(make_nodes(), query_str=QUERY)
    assert [n.node.node_id for n in out] == [f"n{i}" for i in sorted(order[:2])]  # retrieval order kept
    by_id = {n.node.node_id: n for n in out}
    best, mid = by_id[f"n{order[0]}"], by_id[f"n{order[1]}"]
    assert best.node.metadata["crag_action"] == "Correct" and best.node.get_content() == TEXTS[order[0]]
    assert mid.node.metadata["crag_action"] == "Ambiguous"
    assert mid.node.get_content() == TEXTS[order[1]].split(". ")[0] + "."
    for i in order[:2]:
        assert by_id[f"n{i}"].score == pytest.approx(scores[i], abs=1e-6)
        assert by_id[f"n{i}"].node.metadata["crag_score"] == pytest.approx(scores[i], abs=1e-6)
    # the async path gives the same
    again = asyncio.run(crag.apostprocess_nodes(make_nodes(), query_str=QUERY))
    assert [(n.node.node_id, n.node.get_content()) for n in again] == [(n.node.node_id, n.node.get_content()) for n in out]


def test_inside_a_query_engine(exports):
    """A RetrieverQueryEngine (MockLLM: the answer echoes the prompt) gets the routed nodes: the
    refined text reaches the LLM, the dropped text does not."""
    from llama_index.core.llms import MockLLM
    from llama_index.core.query_engine import RetrieverQueryEngine
    from llama_index.core.retrievers import BaseRetriever

    class Fixed(BaseRetriever):
        def _retrieve(self, query_bundle):
            return make_nodes()

    crag = CragPostprocessor(evaluator=exports["ambiguous"], extractor=exports["extractor"], top_k=1)
    engine = RetrieverQueryEngine.from_args(Fixed(), llm=MockLLM(), node_postprocessors=[crag])
    response = engine.query(QUERY)
    assert [n.node.node_id for n in response.source_nodes] == ["n0", "n1", "n2"]
    assert all(n.node.metadata["crag_action"] == "Ambiguous" for n in response.source_nodes)
    prompt = str(response)
    assert "War and Peace is a novel by Leo Tolstoy." in prompt and "It follows five families" not in prompt
    assert "crag_score" not in prompt

    dropped = RetrieverQueryEngine.from_args(Fixed(), llm=MockLLM(),
                                             node_postprocessors=[CragPostprocessor(evaluator=exports["incorrect"])])
    assert dropped.query(QUERY).source_nodes == []


def test_against_a_server(exports):
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    from inference.serving.app import ServeSettings

    settings = ServeSettings(model=str(exports["ambiguous"]), extractor=str(exports["extractor"]))
    with live_server(settings) as url:
        crag = CragPostprocessor(base_url=url, top_k=1)  # the server's extractor, found on /info
        out = crag.postprocess_nodes(make_nodes(), query_str=QUERY)
        local = CragPostprocessor(evaluator=exports["ambiguous"], extractor=exports["extractor"], top_k=1)
        want = local.postprocess_nodes(make_nodes(), query_str=QUERY)
        assert [(n.node.node_id, n.node.get_content(), n.node.metadata["crag_action"]) for n in out] == \
               [(n.node.node_id, n.node.get_content(), n.node.metadata["crag_action"]) for n in want]
        assert [n.score for n in out] == pytest.approx([n.score for n in want], abs=1e-6)
        # extractor=False: the server's evaluator only, Ambiguous nodes whole
        whole = CragPostprocessor(base_url=url, extractor=False).postprocess_nodes(make_nodes(), query_str=QUERY)
        assert [n.node.get_content() for n in whole] == TEXTS
    with pytest.raises(ValueError, match="not both"):
        CragPostprocessor(evaluator=exports["correct"], base_url="http://127.0.0.1:9")
