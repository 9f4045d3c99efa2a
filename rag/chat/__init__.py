"""One chat, end to end: retrieve passages and facts (``retriever``, ``windows``), build
the prompt (``prompt``), reuse a repeated question's context (``memo``), stream the
answer from the LLM (``engine``), and keep what the console shows (``timeline``,
``bad_cases``). It uses ``rag.knowledge`` and ``rag.llm``; neither uses it.
"""
