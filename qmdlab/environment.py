"""Every ``QMDLAB_*`` environment variable qmdlab reads, with what it sets.

``docs/reference/environment.md`` is generated from :data:`ENVIRONMENT`, and
``tests/test_reference.py`` fails when the code reads a variable that is not listed here.
"""

from __future__ import annotations

ENVIRONMENT: dict[str, str] = {
    "QMDLAB_HOME": "Where indexes, collections and recordings live (default `~/.cache/qmdlab`).",
    "QMDLAB_INDEX": "The index used when no `--index` is given (a name under `$QMDLAB_HOME/indexes` or a path); "
    "without it, a project's `.qmdlab/` (`qmdlab init`) in the current folder or above, else `default`.",
    "QMDLAB_CACHE": "Downloaded and assembled model files (default `~/.cache/qmdlab/models`).",
    "QMDLAB_PRESET": "The model preset (`offline`, `qmd`, `tiny`, `fake`) when neither `--preset` nor the config names one.",
    "QMDLAB_EMBED_MODEL": "The embedding model reference (`hf:…`, a path, `pkg:NAME`, or a served model "
    "`http://HOST:PORT/v1#MODEL` / `openai:MODEL`), over the preset's; unset, qmd's `QMD_EMBED_MODEL` is read.",
    "QMDLAB_EXPAND_MODEL": "The query-expansion model reference (also a served chat model), over the preset's; "
    "unset, qmd's `QMD_GENERATE_MODEL` is read.",
    "QMDLAB_RERANK_MODEL": "The reranker reference (an LLM GGUF, `qlm:MODEL` for query likelihood, `cross-encoder:PATH`, "
    "or a served `/rerank` endpoint), over the preset's; unset, qmd's `QMD_RERANK_MODEL` is read.",
    "QMDLAB_OPENAI_BASE_URL": "Base URL of `openai:MODEL` references (over `OPENAI_BASE_URL`; default "
    "`https://api.openai.com/v1`).",
    "QMDLAB_MODEL_API_KEY": "Bearer key sent to served models (`http://…`, `openai:…`); `openai:` references "
    "fall back to `OPENAI_API_KEY`.",
    "QMDLAB_HTTP_TIMEOUT": "Seconds a served model may take for one whole request — connect, send and every read — "
    "(default 60, at most 86400); connection errors, 5xx and 429 answers are retried twice with backoff.",
    "QMDLAB_GPU": "GPU offload of local GGUF models: `auto` (default: every layer when the llama.cpp build can "
    "offload), `off`, `all` or a number of layers; unset, qmd's `QMD_FORCE_CPU=1` means `off`.",
    "QMDLAB_EMBED_WORKERS": "llama.cpp contexts an embedder runs side by side on one call's texts (default 2 where "
    "there are two threads or more, each on half of them; 1 = one context on every thread).",
    "QMDLAB_THREADS": "Threads for llama.cpp calls (default: the CPU count, at most 4).",
    "QMDLAB_CONVERTER": "Path of llama.cpp's `convert_hf_to_gguf.py` used to convert packaged models.",
    "QMDLAB_DEBUG": "Any value: print the full traceback of an error instead of its one-line message.",
    "QMDLAB_MAX_DOCUMENTS": "Capacity limit: documents per index.",
    "QMDLAB_MAX_CHUNKS": "Capacity limit: chunks per index.",
    "QMDLAB_MAX_VECTOR_BYTES": "Capacity limit: bytes of stored vectors per index.",
    "QMDLAB_QUERY_BUDGET_MS": "Milliseconds a query may spend before rerank (default 30000): past it rerank is skipped "
    "and the fusion order kept; at 80 % a capacity note. Evaluation runs lift it.",
    "QMDLAB_ALLOWED_ORIGINS": "Extra `Origin`s the HTTP MCP server accepts (comma-separated); unset, qmd's "
    "`QMD_ALLOWED_ORIGINS` is read.",
    "QMDLAB_ALLOWED_HOSTS": "Extra `Host` names the HTTP MCP server accepts (comma-separated `host` or `host:port`); "
    "unset, qmd's `QMD_ALLOWED_HOSTS` is read.",
    "QMDLAB_EDITOR_URI": "Editor link template for clickable result paths on a terminal (`{path}`, `{line}`, `{col}`); "
    "over `QMD_EDITOR_URI` and the index's `editor_uri`.",
    "QMDLAB_TRUST_UPDATE_HOOKS": "`1`: run every collection's update command without `qmdlab trust` approval "
    "(unattended CI); never one holding a raw control character, and roots or index links outside a project "
    "still need `qmdlab trust`.",
    "QMDLAB_MCP_DAEMON_TOKEN": "Set by `qmdlab mcp --daemon` in the server it starts, and recorded in the index's `mcp.pid`: "
    "`qmdlab mcp --stop` signals only the process that carries it. Not for setting by hand.",
    "QMDLAB_CISI_DIR": "Folder of the CISI collection (`CISI.ALL`, `.QRY`, `.REL`) for the `cisi` suite.",
    "QMDLAB_CACM_DIR": "Folder of the CACM collection (`CACM.ALL`, `.QRY`, `.REL`) for the `cacm` suite.",
    "QMDLAB_MED_DIR": "Folder of the MED (Medline) collection (`MED.ALL`, `.QRY`, `.REL`) for the `med` suite.",
    "QMDLAB_SCIFACT_DIR": "Folder of SciFact in BEIR's layout (`corpus.jsonl`, `queries.jsonl`, `qrels/train.tsv`, "
    "`qrels/test.tsv`) for the `scifact` suite.",
    "QMDLAB_SMART_GRADES": "How SMART relevance codes read: `gain` (higher is better) or `rank` (1 is best).",
    "QMDLAB_SMART_QRELS_IDS": "How SMART qrels name documents: `position` or `ids`.",
    "QMDLAB_DEMO_TIMES": "File where `make demo`'s tiers write where their time went.",
    "QMDLAB_WHEELHOUSE": "Where `make setup` keeps the portable llama-cpp-python wheel it builds.",
    "QMDLAB_CHILD_IO": "Internal: the result file of a model call run in a child process.",
    "QMDLAB_TEST_EVENTS": "Testing: a file where index transactions log their events (the crash harness).",
    "QMDLAB_TEST_KILL_AT": "Testing: kill the process at the named transaction event (the crash harness).",
    "QMDLAB_REQUIRE_ALL": "Testing: a missing optional prerequisite fails its tests instead of skipping them (CI sets it).",
    "QMDLAB_FUZZ_PROFILE": "Testing: `deep` runs the fuzz and crash tests at full size (`make fuzz`).",
    "QMDLAB_QMD_CACHE": "Testing and benchmarks: where Node and qmd are installed for the comparisons with qmd "
    "running (default `~/.cache/qmdlab/bench/qmd`).",
    "QMDLAB_TEST_RAY_ADDRESS": "Testing: the Ray cluster the scale tests use instead of starting a local one.",
    "QMDLAB_UPDATE_SCREENSHOT": "Testing: `1` lets the browser test rewrite `docs/img/tune-live.png`.",
}
