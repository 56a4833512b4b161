"""Components for the RAG frameworks users already run, each in its own extra:
:mod:`integrations.langchain` (a document compressor), :mod:`integrations.llamaindex` (a node
postprocessor) and :mod:`integrations.langgraph_crag` (the CRAG graph with our evaluator as its
grading node). Each takes a local export folder, a loaded model, or a server's ``base_url``
(``python -m inference serve``). Nothing in the package imports them."""
