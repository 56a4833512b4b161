"""``python -m inference serve``: the exports over HTTP (:mod:`inference.serving.app`), with dynamic
batching (:mod:`inference.serving.batching`), and a client with the loaded models' methods
(:mod:`inference.serving.client`). Needs the ``serve`` extra (FastAPI, uvicorn, prometheus-client,
httpx); the base install does not import it."""
