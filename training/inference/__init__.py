"""Inference: responses from a model, in this process or through a server (no Django).

- ``training.inference.generation``: ``ChatGenerator`` (a causal LM loaded from a local folder, torch +
  transformers imported when one is made) and its ``SamplingConfig`` / ``Generation`` dataclasses.
- ``training.inference.chat_client``: ``ChatClient`` for OpenAI-compatible chat servers (vLLM, SGLang,
  llama.cpp, TGI, hosted APIs) and its ``EndpointConfig`` / ``EndpointError``.

Eval rounds and judges (monitoring) and the demo generate through these; the training recipes do not
(their rollouts sample in ``training.recipes.online``). Both modules are light at import time (no torch),
so a web process can validate a ``SamplingConfig`` or an ``EndpointConfig``.
"""
