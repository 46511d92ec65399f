"""qmdlab against qmd 2.8.3's own definitions: one row per CLI option and output key of qmd's
search/vsearch/query/get/multi-get/ls/status/collection/context/embed/update/pull/cleanup and the
rest of its command line, each citing the line of qmd's source that defines it.

A row is either the same behaviour — ``check`` names an assertion below, run through click's
CliRunner on a small index (``parses`` only asks click whether qmd's command line is accepted) —
or a documented deviation: what qmd does, what qmdlab does, and the switch that gives qmd's
behaviour (or, where there is none, why). ``docs/qmd-differences.md`` is written from the
deviations by ``scripts/gen_qmd_differences.py``; :func:`test_the_page_is_generated_from_the_table`
fails when the page is stale.

Citations are ``FILE:LINE`` in qmd 2.8.3's source tree (``src/cli/qmd.ts``, ``src/cli/formatter.ts``,
``src/store.ts``, ``src/collections.ts``, ``src/mcp/server.ts``). The MCP rows call the server's backend
and tools directly on the same index; the REST rows ask the HTTP app.
"""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "qmd-differences.md"


@dataclass(frozen=True)
class Row:
    """One qmd definition. ``check``: the name of a check in :data:`CHECKS` (same behaviour), or
    ``parses:ARGS`` (qmd's command line is accepted). A deviation has no check and says ``qmd``
    (qmd's behaviour), ``ours`` (qmdlab's) and ``switch`` (how to get qmd's) or ``why`` (no switch)."""

    key: str
    cite: str
    check: str = ""
    qmd: str = ""
    ours: str = ""
    switch: str = ""
    why: str = ""

    @property
    def deviation(self) -> bool:
        return not self.check


Q = "src/cli/qmd.ts"
F = "src/cli/formatter.ts"
S = "src/mcp/server.ts"

ROWS: list[Row] = [
    # -- output shapes (outputResults) ----------------------------------------------------------
    Row("--json (search/vsearch/query)", f"{Q}:2496", "json_array"),
    Row("query --json", f"{Q}:2522", "query_json_array"),
    Row("json key docid", f"{Q}:2511", "json_keys"),
    Row("json key file (qmd:// URI)", f"{Q}:2451", "json_keys"),
    Row("json key line (best-matching line)", f"{Q}:2514", "json_best_line"),
    Row("json key context (left out when empty)", f"{Q}:2516", "json_context"),
    Row("json key snippet (@@ header)", "src/store.ts:5336", "json_keys"),
    Row("json key body (--full)", f"{Q}:2501", "json_full_body"),
    Row("json key explain (--explain)", f"{Q}:2519", "json_explain"),
    Row("--line-numbers (json)", f"{Q}:2503", "json_line_numbers"),
    Row("snippet cap 300 (json)", f"{Q}:2500", "snippet_cap_json"),
    Row("snippet cap 500 (csv, md, xml, cli)", f"{Q}:2657", "snippet_cap_csv"),
    Row("--csv columns", f"{Q}:2655", "csv_columns"),
    Row("--files fields", f"{Q}:2532", "files_fields"),
    Row("--xml <file> elements", f"{Q}:2648", "xml_elements"),
    Row("--md blocks", f"{Q}:2636", "md_blocks"),
    Row("empty results (json, csv, xml)", f"{Q}:2358", "empty_results"),
    Row("--format", f"{Q}:3033", "parses:search q --format xml"),
    Row("--all", f"{Q}:3031", "parses:search q --all --min-score 0.3"),
    Row("-c / --collection", f"{Q}:3042", "parses:query q -c kb -c misc"),
    Row("-C / --candidate-limit", f"{Q}:3065", "parses:query q -C 20"),
    Row("--no-rerank", f"{Q}:3066", "parses:query q --no-rerank"),
    Row("query --intent", f"{Q}:3068", "parses:query q --intent 'web pages'"),
    Row("vsearch --intent", f"{Q}:2854", "vsearch_intent"),
    Row("--index", f"{Q}:3017", "parses:--index work search q"),
    Row("-v / --version", f"{Q}:3024", "version"),
    # -- query documents (parseStructuredQuery) --------------------------------------------------
    Row("query document lex:/vec:/hyde:/intent:", f"{Q}:2732", "query_document"),
    Row("expand: line", f"{Q}:2739", "expand_line"),
    Row("malformed query document: line-numbered error", f"{Q}:2782", "malformed_document"),
    # -- maintenance and navigation ---------------------------------------------------------------
    Row("collection add --glob", f"{Q}:3046", "collection_glob"),
    Row("collection add --mask", f"{Q}:3045", "parses:collection add . --mask '**/*.md'"),
    Row("pull --progress", f"{Q}:3055", "parses:pull --progress"),
    Row("pull --refresh", f"{Q}:3054", "parses:pull --refresh"),
    Row("cleanup --dry-run", f"{Q}:3056", "cleanup_dry_run"),
    Row("embed --timeout (minutes)", f"{Q}:2105", "embed_timeout"),
    Row("embed -f / -c", f"{Q}:3590", "parses:embed -f -c kb"),
    Row("ls COLLECTION/PREFIX, ls qmd://COLLECTION/PREFIX", f"{Q}:1632", "ls_prefix"),
    Row("ls (no argument): one `qmd://NAME/  (N files)` line per collection", f"{Q}:1596", "ls_summary"),
    Row("context add FOLDER TEXT", f"{Q}:1045", "context_folder"),
    Row("status: pending embeddings", f"{Q}:567", "status_pending"),
    Row("update: run embed next", f"{Q}:362", "update_hint"),
    Row("get FILE:FROM:COUNT, -l, --from", f"{Q}:3058", "parses:get kb/a.md:2:3 -l 5"),
    Row("get header (qmd:// URI, #docid, Folder Context:, ---)", f"{Q}:1339", "get_header"),
    Row("multi-get --max-bytes", f"{Q}:3060", "parses:multi-get 'kb/*.md' --max-bytes 20480"),
    # -- deviations -----------------------------------------------------------------------------
    Row(
        "score (json, --files)",
        f"{Q}:2512",
        qmd="JSON scores rounded to 2 decimals, `--files` scores to 2 decimals",
        ours="4 decimals in every format",
        why="qmdlab's fused scores (RRF, a few hundredths) would collapse to 0.0x at 2 decimals",
    ),
    Row(
        "file ?index=NAME",
        "src/store.ts:755",
        qmd="a result of a non-default index is `qmd://collection/path?index=NAME`",
        ours="`qmd://collection/path` for every index",
        why="a qmdlab index is named by `--index` on every command; the URI names the document",
    ),
    Row(
        "--format cli",
        f"{Q}:2535",
        qmd="`qmd://collection/path:LINE #docid`, `Title:`, `Context:`, `Score:` lines, then the `@@` snippet",
        ours="`collection/path:LINE  #docid  score S`, the title, the heading breadcrumb (`§`), then numbered "
        "snippet lines",
        switch="`qmdlab search QUERY --md` (qmd's markdown blocks) or `--json`",
    ),
    Row(
        "snippet lines",
        "src/store.ts:5317",
        qmd="the best line, one line above it and two below",
        ours="the best line and one line either side (inside the hit's chunk); the `@@` header gives the count",
        why="the same header, so a reader that follows it reads either",
    ),
    Row(
        "--line-numbers (json, md, xml)",
        f"{Q}:2504",
        qmd="numbers the snippet from 1 (the `@@` header is line 1)",
        ours="numbers the snippet's lines with their line numbers in the document; the `@@` header stays unnumbered",
        why="the numbers are the ones `qmdlab get FILE:LINE` takes",
    ),
    Row(
        "--explain (csv, xml, files)",
        f"{Q}:2519",
        qmd="explanations only in the cli and json formats",
        ours="the cli and md formats print them after the results, json per result (`explain`), "
        "csv/xml/files on stderr",
        switch="`qmdlab query QUERY --json --explain`",
    ),
    Row(
        "ls rows",
        f"{Q}:1754",
        qmd="`ls -l`-style rows: size, date and the `qmd://` path",
        ours="`docno<TAB>#docid<TAB>title`",
        why="the docid and title are what `get` and the agents use next",
    ),
    Row(
        "embed --timeout (default)",
        f"{Q}:3593",
        qmd="30 minutes unless given",
        ours="no limit unless given (a bare number is minutes as in qmd; `90s`, `2h` name their unit)",
        switch="`qmdlab embed --timeout 30`",
    ),
    Row(
        "vsearch --intent (expansion)",
        f"{Q}:2854",
        qmd="the intent steers the vector query's expansion and the snippet",
        ours="the intent steers the snippet line; vsearch runs no expansion",
        switch="`qmdlab query QUERY --intent TEXT`",
    ),
    Row(
        "status layout",
        f"{Q}:514",
        qmd="sections (Index, Documents, Collections, Models, MCP) with ages and model names",
        ours="index, counts per collection, vectors per embedder, pending embeddings, cache and the running server",
        switch="`qmdlab status --json`",
    ),
    Row(
        "qmd bench",
        f"{Q}:4710",
        qmd="`qmd bench FIXTURE.json [--json] [-c COLL]` runs bm25, vector, hybrid and full backends and prints "
        "P@k, R@1/3/5, MRR, F1 per query and per backend",
        ours="`qmdlab eval FIXTURE.json --format qmd-bench` runs the pipeline once and prints qmd's measures per "
        "query type and overall beside nDCG@10/MRR@10 (ranx); `--ablate` adds one line per ablation row (bm25, "
        "vector, bm25+vector, +rerank …); the JSON is `qmd-bench.json` in the results folder",
        switch="`qmdlab eval FIXTURE.json --format qmd-bench --corpus DIR --ablate` (`--corpus` for qmd's `-c`, "
        "else the fixture's `collection` is looked up in the qmdlab index)",
    ),
    Row(
        "qmd skills",
        f"{Q}:4842",
        qmd="`skills list`, `skills get NAME [--full]`, `skills path`: skills bundled in the npm package",
        ours="one skill, printed by `qmdlab skill show`",
        switch="`qmdlab skill show`",
    ),
    Row(
        "qmd --skill",
        f"{Q}:4304",
        qmd="alias of `qmd skill show`",
        ours="not a global option",
        switch="`qmdlab skill show`",
    ),
    Row(
        "qmd skill install",
        f"{Q}:4860",
        qmd="installs `.agents/skills/qmd` (`--global`: under `~`), `--yes` links `.claude/skills/qmd`",
        ours="the same layout, named `qmdlab` (`.agents/skills/qmdlab/SKILL.md`, `.claude/skills/qmdlab`)",
        switch="`qmdlab skill install [--global] [--yes] [-f]`",
    ),
    Row(
        "qmd vector-search",
        f"{Q}:4687",
        qmd="undocumented alias of `vsearch`",
        ours="no alias",
        switch="`qmdlab vsearch QUERY`",
    ),
    Row(
        "qmd deep-search",
        f"{Q}:4701",
        qmd="undocumented alias of `query`",
        ours="no alias",
        switch="`qmdlab query QUERY`",
    ),
    Row(
        "qmd collection help",
        f"{Q}:4575",
        qmd="prints the collection verbs",
        ours="click's help",
        switch="`qmdlab collection --help`",
    ),
    Row(
        "qmd embed --chunk-strategy",
        f"{Q}:3070",
        qmd="`auto` (AST for code files) or `regex`, per embed run",
        ours="the chunker is a setting of the whole index, changed by `update` (markdown only; no code AST)",
        switch="`qmdlab update --chunker breakpoints` (qmd's regex break points)",
    ),
    Row(
        "--full-path",
        f"{Q}:3063",
        qmd="`search`/`query`/`get`/`multi-get` print on-disk paths instead of `qmd://` URIs",
        ours="results name documents by `qmd://` URI (json, csv, xml, md, files) or docno (cli); on a terminal "
        "with an editor template the `path:line` is a hyperlink to the file",
        switch="`qmdlab collection show NAME` prints the folder a docno is relative to",
    ),
    Row(
        "--no-gpu",
        f"{Q}:3067",
        qmd="forces llama.cpp onto the CPU (`QMD_FORCE_CPU=1`)",
        ours="no switch on the search verbs",
        why="`QMD_FORCE_CPU=1` (or `QMDLAB_GPU=0`) is read for every verb",
    ),
    Row(
        "qmd get --full",
        f"{Q}:3032",
        qmd="prints the whole document",
        ours="`get` prints the whole document unless `:from:count`, `--from` or `-l` cut it",
        switch="`qmdlab get FILE`",
    ),
    Row(
        "snippet line",
        "src/store.ts:5263",
        qmd="a result's `line` and snippet are the best-matching line of the whole file, front matter included",
        ours="the best-matching line below the front matter (the note's text)",
        why="a snippet of YAML keys shows the reader nothing of the note",
    ),
    Row(
        "get final newline",
        f"{Q}:1331",
        qmd="`get` prints the empty line after a note's final newline as a line of its own",
        ours="a note's lines as an editor numbers them: the final newline ends the last line",
        why="`get FILE:FROM:COUNT` and `--line-numbers` count lines as the editor a link opens does",
    ),
    Row(
        "multi-get order",
        "src/store.ts:3408",
        qmd="a glob's documents in the order of the index's rows (no `ORDER BY`: the order they were indexed in)",
        ours="sorted by collection and path",
        why="the same documents in an order that does not depend on when each was indexed",
    ),
    Row(
        "title",
        "src/store.ts:2895",
        qmd="a markdown document's title is its first heading (`extractTitle`)",
        ours="the front matter's `title:` when there is one, else the first heading (the author's own title; "
        "indexed for BM25 as qmd indexes its title)",
        why="the front matter names the document as its author meant; documents without front matter get qmd's title",
    ),
    Row(
        "qmd get line numbers",
        f"{Q}:1331",
        qmd="`get` and `multi-get` number lines by default (`--no-line-numbers` turns it off)",
        ours="off by default (`--no-line-numbers` is accepted)",
        switch="`qmdlab get FILE --line-numbers`, `qmdlab multi-get PATTERN --line-numbers`",
    ),
    Row(
        "qmd search -n",
        f"{Q}:3125",
        qmd="5 results by default (20 with `--files`/`--json`)",
        ours="`search` and `vsearch` return 10 by default (`query` returns 5)",
        switch="`qmdlab search QUERY -n 5` (`-n 20` with `--files`/`--json`)",
    ),
    Row(
        "qmd vsearch --min-score",
        f"{Q}:2853",
        qmd="0.3 by default",
        ours="0.0 by default",
        switch="`qmdlab vsearch QUERY --min-score 0.3`",
    ),
    Row(
        "editor_uri",
        f"{Q}:2396",
        qmd="on a terminal, result paths are OSC 8 links with the VS Code template by default",
        ours="links only when a template is set (`QMDLAB_EDITOR_URI`, `QMD_EDITOR_URI` or the index's "
        "`editor_uri`, which `import-qmd` copies)",
        switch="`export QMD_EDITOR_URI='vscode://file/{path}:{line}:{col}'`",
    ),
    Row(
        "context prefixes",
        "src/store.ts:3444",
        qmd="a prefix matches as a string (`/2024` also matches `/2024-old/…`)",
        ours="a prefix matches whole path segments (`notes/2024` matches `notes/2024/…` only)",
        why="a string prefix attaches a folder's context to its namesake siblings",
    ),
    Row(
        "qmd trust",
        f"{Q}:4626",
        qmd="gates three fields of a project-local `.qmd/index.yml` (update commands, collection paths outside "
        "the project, custom models) and asks on a terminal during `update`; the user's own "
        "`~/.config/qmd/*.yml` is never gated",
        ours="gates every update command that arrives in a config file — a committed `.qmdlab/collections.yaml` "
        "and every imported qmd config alike — shown exactly (non-printing characters escaped; one with a raw "
        "CR, NUL or escape is never run) and approved by its exact text; in a project's `.qmdlab/`, collection "
        "roots outside the project and linked index files are gated too; `update` never asks, it says how to "
        "approve; a command set with `collection update-cmd` (a root given to `collection add`) is approved as "
        "it is set; models are not gated",
        switch="`qmdlab trust [-c NAME] [--yes]` once per command, or `QMDLAB_TRUST_UPDATE_HOOKS=1` (qmd's "
        "`QMD_TRUST_UPDATE_HOOKS=1`)",
    ),
    Row(
        "qmd collection add (built-in exclusions)",
        f"{Q}:1910",
        qmd="never indexes `node_modules`, `.git`, `.cache`, `vendor`, `dist` or `build`, whatever the pattern",
        ours="no built-in exclusions: a collection holds what its mask matches less its own ignore globs "
        "(`collection import-qmd` adds qmd's six to each collection it imports)",
        switch="`qmdlab collection ignore NAME 'node_modules/**' '.git/**' '.cache/**' 'vendor/**' 'dist/**' "
        "'build/**'`",
    ),
    Row(
        "qmd update (update commands)",
        f"{Q}:895",
        qmd="runs each collection's command and re-indexes it, collection by collection; a failure aborts the rest",
        ours="runs every approved command first, then re-indexes; a failure (or 600 s without finishing) stops "
        "the update before any re-indexing",
        why="an index is never left half re-indexed after a failed pull",
    ),
    Row(
        "qmd init",
        f"{Q}:440",
        qmd="a project-local `.qmd/` (`index.yml` + the database), used by every command inside the tree",
        ours="a project-local `.qmdlab/` (`collections.yaml`, roots inside the project stored relative, and the "
        "database, git-ignored), used inside the tree when neither `--index` nor `QMDLAB_INDEX` is given; "
        "`import-qmd` reads an existing `.qmd/index.yaml` (or `.qmd/index.yml`)",
        switch="`qmdlab init [--name NAME]`, then `qmdlab collection import-qmd` inside a qmd project",
    ),
    Row(
        "index.yml",
        "src/collections.ts:4",
        qmd="one YAML config per qmd index in `~/.config/qmd` (collections, contexts, models, `editor_uri`)",
        ours="each index keeps its collections, contexts, editor template and models in its own "
        "`collections.yaml` (`models:`, read over `$QMDLAB_HOME/models.yaml`, which every index shares)",
        switch="`qmdlab collection import-qmd [CONFIG] [--qmd-index NAME]` maps it (qmd's file is only read)",
    ),
    Row(
        "qmd mcp --http --daemon",
        f"{Q}:4734",
        qmd="needs `--http`; pid in `~/.cache/qmd/mcp.pid` (`mcp-NAME.pid` for index NAME); `qmd status` shows "
        "the running server",
        ours="`--daemon` implies `--http`; one daemon per index as in qmd, its pid and log in `$QMDLAB_HOME` "
        "(`mcp.pid`, `mcp.log` for the default index, `mcp-NAME.pid` for another; a token and start time "
        "identify it); `status` shows the index's running server too",
        switch="`qmdlab mcp --daemon [--port N]`; stop with `qmdlab mcp --stop` (or `qmdlab mcp stop`)",
    ),
    Row(
        "qmd embed --max-docs-per-batch / --max-batch-mb",
        f"{Q}:3049",
        qmd="cap the documents and MB loaded per embedding batch",
        ours="cap each model call and transaction: chunks of at most N documents and M MB of chunk text (no caps "
        "unless given; `--batch-size 32` chunks)",
        switch="`qmdlab embed --max-docs-per-batch N --max-batch-mb N` with qmd's numbers",
    ),
    Row("context add TEXT (current folder)", f"{Q}:4329", "context_one_argument"),
    # -- qmd's config files and environment ---------------------------------------------------------
    Row("project-local .qmd/index.yaml before .qmd/index.yml", "src/collections.ts:141", "qmd_local_config_names"),
    Row(
        "editor template keys (editor_uri, editor_uri_template, editorUri, editor-uri)",
        f"{Q}:2412",
        "qmd_editor_aliases",
    ),
    Row("config models.* belong to the index", "src/collections.ts:55", "qmd_models_per_index"),
    Row("QMD_HOST (mcp --http bind address)", f"{S}:939", "qmd_host"),
    Row("QMD_ALLOWED_ORIGINS / QMD_ALLOWED_HOSTS (extra allowed)", f"{S}:1109", "qmd_allowed_lists"),
    Row("QMD_SQLITE_BUSY_TIMEOUT (milliseconds)", "src/db.ts:118", "qmd_busy_timeout"),
    Row(
        "QMD_SQLITE_BUSY_TIMEOUT (default)",
        "src/db.ts:120",
        qmd="120000 ms when unset",
        ours="30 s when unset",
        switch="`export QMD_SQLITE_BUSY_TIMEOUT=120000`",
    ),
    Row(
        "QMD_ALLOWED_ORIGINS=* and a wildcard bind",
        f"{S}:1109",
        qmd="`*` turns the Origin and Host checks off; bound to `0.0.0.0` the Host is checked only when "
        "`QMD_ALLOWED_HOSTS` lists names",
        ours="`*` accepts any Origin and the Host is still checked; bound to `0.0.0.0` only the names in "
        "`QMDLAB_ALLOWED_HOSTS` / `QMD_ALLOWED_HOSTS` (or `*`) are accepted",
        switch="`export QMD_ALLOWED_HOSTS='*'` beside `QMD_ALLOWED_ORIGINS='*'`",
    ),
    Row(
        "INDEX_PATH",
        "src/store.ts:638",
        qmd="the SQLite file every command reads and writes",
        ours="read by `collection import-qmd` only: the `index.yaml`/`index.yml` beside it is the config to import, "
        "and its database's vectors are reused (read only) where qmdlab embeds with the same model file and cuts "
        "the note as qmd did, so those notes are not embedded again; qmdlab's own index is `--index` / "
        "`QMDLAB_INDEX`",
        switch="`qmdlab --index DIR status` (or `export QMDLAB_INDEX=DIR`)",
    ),
    Row(
        "XDG_CACHE_HOME",
        "src/store.ts:650",
        qmd="the index lives at `$XDG_CACHE_HOME/qmd/NAME.sqlite` (default `~/.cache/qmd`), beside the models "
        "and the MCP pid file",
        ours="indexes live under `$QMDLAB_HOME` (default `~/.cache/qmdlab`), models under `$QMDLAB_CACHE`; "
        "`import-qmd` uses `XDG_CACHE_HOME` only to find qmd's database (for its vectors)",
        switch="`export QMDLAB_HOME=$XDG_CACHE_HOME/qmdlab QMDLAB_CACHE=$XDG_CACHE_HOME/qmdlab/models`",
    ),
    Row(
        "QMD_EMBED_CONTEXT_SIZE / QMD_RERANK_CONTEXT_SIZE / QMD_EXPAND_CONTEXT_SIZE",
        f"{Q}:3801",
        qmd="override the llama.cpp context size of each model",
        ours="not read: each model's context size is fixed with its reference (qmdlab.models.registry.KNOWN)",
        why="chunk sizes, the reranker's document budget and the embedder's input limit are set from that size; "
        "another size would break them silently",
    ),
    # -- MCP tools (src/mcp/server.ts) ----------------------------------------------------------------
    Row(
        "MCP query arguments (query, searches, limit, minScore, candidateLimit, collections, intent, rerank)",
        f"{S}:316",
        "mcp_query_arguments",
    ),
    Row("MCP query result key docid (#)", f"{S}:383", "mcp_result_keys"),
    Row("MCP query result key title", f"{S}:385", "mcp_result_keys"),
    Row("MCP query result key context (string or null)", f"{S}:387", "mcp_result_context"),
    Row("MCP query result key line (best-matching line)", f"{S}:388", "mcp_result_line"),
    Row("MCP query snippet (@@ header, capped at 300)", f"{S}:381", "mcp_snippet_cap"),
    Row("MCP query structuredContent {results}", f"{S}:395", "mcp_result_keys"),
    Row(
        "MCP query result key file",
        f"{S}:384",
        qmd="the display path `collection/path` (REST `/query` gives the `qmd://` URI, server.ts:1023)",
        ours="the `qmd://collection/path` URI in MCP and REST alike (as `--json`), `docno` beside it",
        why="one row shape for every front end; `get` and `multi_get` accept the URI and the bare path alike",
    ),
    Row(
        "MCP query result key score",
        f"{S}:386",
        qmd="rounded to 2 decimals",
        ours="rounded to 4 decimals (as `--json`)",
        why="one row shape with the CLI's `--json`; two decimals tie distinct fused scores",
    ),
    Row(
        "MCP query snippet line numbers",
        f"{S}:389",
        qmd="`addLineNumbers(snippet, line)`: the `@@` header is numbered as the best line, the text after it off by one",
        ours="the `@@` header unnumbered, each snippet line numbered with its own line in the document",
        why="qmd's numbers do not match the document's lines; the header already says where the snippet starts",
    ),
    Row(
        "MCP query rerank (default true)",
        f"{S}:334",
        qmd="rerank on unless `rerank: false`",
        ours="the server's preset decides (off for offline/tiny, on for qmd); the first note says which stages ran",
        switch="`rerank: true` in the call, or `qmdlab mcp --preset qmd`",
    ),
    Row("MCP get file (:from[:count] suffix, #docid)", f"{S}:411", "mcp_get_range"),
    Row("MCP get fromLine / maxLines", f"{S}:412", "mcp_get_range"),
    Row("MCP get lineNumbers (default true)", f"{S}:414", "mcp_line_numbers_default"),
    Row("MCP get resource item (qmd:// URI, context comment)", f"{S}:462", "mcp_get_resource"),
    Row(
        "MCP get resource name and title",
        f"{S}:467",
        qmd="`name` (display path) and `title` on the resource contents",
        ours="in the contents' `_meta` (`name`, `title`); `structuredContent` carries `docno` and `title` too",
        why="the MCP SDK's text resource contents carry no `name`/`title` fields",
    ),
    Row("MCP multi_get pattern (glob, list, docids)", f"{S}:488", "mcp_multi_get_items"),
    Row("MCP multi_get maxLines (truncation note)", f"{S}:524", "mcp_multi_get_items"),
    Row("MCP multi_get maxBytes (default 64 KB)", f"{S}:490", "mcp_line_numbers_default"),
    Row("MCP multi_get lineNumbers (default true)", f"{S}:491", "mcp_line_numbers_default"),
    Row("MCP multi_get skipped and errors items", f"{S}:514", "mcp_multi_get_items"),
    Row("MCP status keys (totalDocuments, needsEmbedding, hasVectorIndex, collections)", f"{S}:47", "mcp_status_keys"),
    Row(
        "MCP status collections[].lastUpdated",
        f"{S}:56",
        qmd="the collection's last update time",
        ours="`null` (beside qmdlab's `root`, `mask` and counts)",
        why="qmdlab records no per-collection update time",
    ),
    Row("MCP resources: a qmd:// template, no list", f"{S}:198", "mcp_resource_template"),
    Row("REST POST /search (alias of /query)", f"{S}:983", "rest_search"),
    Row("REST result key file (qmd:// URI)", f"{S}:1023", "rest_search"),
    Row("MCP HTTP: a POST without initialize or session answered; GET/DELETE 405", f"{S}:873", "mcp_sessionless"),
    Row("MCP and REST: unknown arguments ignored (zod strips them)", f"{S}:316", "mcp_unknown_ignored"),
    Row("MCP query limit / minScore / candidateLimit: any number, no cap", f"{S}:325", "mcp_numbers"),
    Row("MCP get fromLine below 1 reads from line 1", f"{S}:435", "mcp_numbers"),
    Row("MCP multi_get: no match is an Errors item, no isError", "src/store.ts:5107", "mcp_no_match"),
    Row("MCP resource of a missing document: Document not found text", f"{S}:215", "mcp_no_match"),
    Row("MCP tool titles (Query, Get Document, Multi-Get Documents, Index Status)", f"{S}:254", "mcp_titles"),
    Row("GET /health uptime (seconds)", f"{S}:974", "rest_health_uptime"),
    Row("MCP and REST context: several joined by a blank line", "src/store.ts:3561", "mcp_contexts_joined"),
]


# -- the small index every check runs on ----------------------------------------------------------
LONG = "zebra " * 120


@pytest.fixture
def env(tmp_path, cli_run, qmdlab_home):
    kb = tmp_path / "kb"
    (kb / "sub").mkdir(parents=True)
    (kb / "a.md").write_text("# Alpha\n\nintro line\n\nthe heron nests here\n\nmore text\nend\n", encoding="utf-8")
    (kb / "sub" / "b.md").write_text("# Beta\n\n" + LONG + "heron\n\nlast\n", encoding="utf-8")
    misc = tmp_path / "misc"
    misc.mkdir()
    (misc / "c.md").write_text("# Gamma\n\nheron elsewhere\n", encoding="utf-8")
    cli_run("collection", "add", str(kb), "--name", "kb")
    cli_run("collection", "add", str(misc), "--name", "misc")
    cli_run("context", "add", "kb", "Team notes")
    cli_run.tmp = tmp_path
    return cli_run


def _json(run, *args):
    res = run(*args)
    return json.loads(res.stdout)


HEADER = re.compile(r"^@@ -(\d+),(\d+) @@ \((\d+) before, (\d+) after\)$")
QMD_KEYS = {"docid", "score", "file", "line", "title", "snippet"}


def check_json_array(run):
    for verb in ("search",):
        data = _json(run, verb, "heron", "--json")
        assert isinstance(data, list) and data and QMD_KEYS <= set(data[0])


def check_query_json_array(run):
    data = _json(run, "query", "heron", "--json", "--preset", "fake", "--no-rerank", "--no-expand")
    assert isinstance(data, list) and data and QMD_KEYS <= set(data[0])
    trace = _json(run, "query", "heron", "--trace-json", "--preset", "fake", "--no-rerank", "--no-expand")
    assert {"query", "results", "notes", "timings"} <= set(trace)  # qmdlab's trace, behind its own flag


def check_json_keys(run):
    for hit in _json(run, "search", "heron", "--json"):
        assert hit["docid"].startswith("#") and hit["file"] == "qmd://" + hit["docno"]
        header, _, text = hit["snippet"].partition("\n")
        assert HEADER.match(header) and text


def check_json_best_line(run):
    (hit,) = [h for h in _json(run, "search", "heron", "--json") if h["docno"] == "kb/a.md"]
    body = (run.tmp / "kb" / "a.md").read_text(encoding="utf-8").split("\n")
    assert "heron" in body[hit["line"] - 1]
    first, count, before, after = map(int, HEADER.match(hit["snippet"].split("\n")[0]).groups())
    assert first <= hit["line"] < first + count and before == first - 1 and after == len(body) - (first + count - 1)


def check_json_context(run):
    hits = {h["docno"]: h for h in _json(run, "search", "heron", "--json")}
    assert hits["kb/a.md"]["context"] == "Team notes" and "context" not in hits["misc/c.md"]


def check_json_full_body(run):
    hit = _json(run, "search", "heron", "--json", "--full")[0]
    assert "snippet" not in hit and hit["body"].startswith("# ")


def check_json_explain(run):
    data = _json(run, "query", "heron", "--json", "--explain", "--preset", "fake", "--no-rerank", "--no-expand")
    assert data and all("explain" in h for h in data)  # stdout parses: nothing appended


def check_json_line_numbers(run):
    hit = _json(run, "search", "heron", "--json", "--line-numbers")[0]
    first = int(HEADER.match(hit["snippet"].split("\n")[0]).group(1))
    assert hit["snippet"].split("\n")[1].startswith(f"{first}: ")


def _snippet_text(snippet: str) -> str:
    return snippet.split("\n", 1)[1]


def check_snippet_cap_json(run):
    (hit,) = [h for h in _json(run, "search", "zebra", "--json") if h["docno"] == "kb/sub/b.md"]
    text = _snippet_text(hit["snippet"])
    assert len(text) == 300 and text.endswith("...")


def check_snippet_cap_csv(run):
    rows = list(csv.reader(io.StringIO(run("search", "zebra", "--csv").stdout)))
    (row,) = [r for r in rows[1:] if r[2] == "qmd://kb/sub/b.md"]
    assert len(_snippet_text(row[6])) == 500 and row[6].endswith("...")


def check_csv_columns(run):
    rows = list(csv.reader(io.StringIO(run("search", "heron", "--csv").stdout)))
    assert rows[0] == ["docid", "score", "file", "title", "context", "line", "snippet"]
    assert all(r[0].startswith("#") and r[2].startswith("qmd://") and r[5].isdigit() for r in rows[1:])


def check_files_fields(run):
    lines = {ln.split(",")[2]: ln.split(",") for ln in run("search", "heron", "--files").stdout.splitlines()}
    assert lines["qmd://kb/a.md"][3] == "Team notes" and len(lines["qmd://misc/c.md"]) == 3


def check_xml_elements(run):
    import xml.etree.ElementTree as ET

    root = ET.fromstring("<r>" + run("search", "heron", "--xml").stdout + "</r>")
    files = root.findall("file")
    assert files and all(f.get("docid").startswith("#") and f.get("name").startswith("qmd://") for f in files)


def check_md_blocks(run):
    out = run("search", "heron", "--md").stdout
    assert out.startswith("---\n# ") and "**file:** `qmd://" in out and "**docid:** `#" in out


def check_empty_results(run):
    assert run("search", "nothingzzz", "--json").stdout.strip() == "[]"
    assert run("search", "nothingzzz", "--csv").stdout.strip() == "docid,score,file,title,context,line,snippet"
    assert run("search", "nothingzzz", "--xml").stdout.strip() == "<results></results>"


def check_vsearch_intent(run):
    run("embed", "--preset", "fake", "--no-progress")
    data = _json(run, "vsearch", "heron", "--intent", "nesting birds", "--preset", "fake", "--json")
    assert isinstance(data, list)


def check_version(run):
    assert "version" in run("-v").output


def check_query_document(run):
    args = ("--preset", "fake", "--no-rerank", "--json")
    data = _json(run, "query", "intent: birds\nlex: heron\nvec: heron nests", *args)
    assert any(h["docno"] == "kb/a.md" for h in data)


def check_expand_line(run):
    args = ("--preset", "fake", "--no-rerank", "--no-expand", "--json")
    assert _json(run, "query", "expand: heron", *args) == _json(run, "query", "heron", *args)


def check_malformed_document(run):
    for doc, want in (
        ("lex: heron\nnests", "query line 2 is missing a lex:/vec:/hyde:/intent: prefix"),
        ("lex: heron\nexpand: nests", "query line 2 starts with expand:"),
        ("intent: birds", "query line 1: intent: cannot stand alone"),
        ("lex:\nvec: x", "query line 1 (lex:) needs text"),
    ):
        res = run("query", doc, "--preset", "fake", ok=False)
        assert res.exit_code == 1 and want in res.output, (doc, res.output)


def check_collection_glob(run):
    other = run.tmp / "other"
    other.mkdir()
    (other / "x.txt").write_text("heron text\n", encoding="utf-8")
    run("collection", "add", str(other), "--name", "other", "--glob", "**/*.txt")
    assert "other/x.txt" in run("ls", "other").stdout


def check_cleanup_dry_run(run):
    (run.tmp / "misc" / "c.md").unlink()
    run("update", "--allow-vanish")
    out = run("cleanup", "--dry-run").stdout
    assert out.startswith("would remove 1 inactive documents") and "nothing removed" in out
    assert run("cleanup", "--dry-run").stdout == out  # nothing was removed
    assert run("cleanup").stdout.startswith("removed 1 inactive documents")


def check_embed_timeout(run):
    res = run("embed", "--preset", "fake", "--timeout", "30", "--no-progress")
    assert "embedded" in res.stdout and "stopped" not in res.stdout  # 30 minutes, not 30 seconds
    bad = run("embed", "--preset", "fake", "--timeout", "half", ok=False)
    assert bad.exit_code == 1 and "give minutes (30)" in bad.output


def check_ls_prefix(run):
    for target in ("kb/sub", "qmd://kb/sub", "/kb/sub/"):
        assert run("ls", target).stdout.split("\t")[0] == "kb/sub/b.md", target
    bad = run("ls", "nope/x", ok=False)
    assert bad.exit_code == 1 and "unknown collection 'nope'" in bad.output


def check_ls_summary(run):
    assert run("ls").stdout == "Collections:\n\n  qmd://kb/  (2 files)\n  qmd://misc/  (1 files)\n"
    assert run("ls", "--all").stdout.split("\t")[0] == "kb/a.md"  # every document, as before


def check_get_header(run):
    hits = {h["docno"]: h["docid"] for h in _json(run, "search", "heron", "--json")}
    out = run("get", "kb/a.md:5:1").stdout
    assert out == f"qmd://kb/a.md  {hits['kb/a.md']}\nFolder Context: Team notes\n---\n\nthe heron nests here\n"
    out = run("get", hits["misc/c.md"]).stdout  # no context: no Folder Context line
    assert out == f"qmd://misc/c.md  {hits['misc/c.md']}\n---\n\n# Gamma\n\nheron elsewhere\n"
    assert run("get", "kb/a.md:5:1", "--no-header").stdout == "the heron nests here\n"


def check_qmd_local_config_names(run):
    from qmdlab.store.qmdimport import find_qmd_config

    qmd = run.tmp / "proj" / ".qmd"
    qmd.mkdir(parents=True)
    (qmd / "index.yml").write_text("collections: {}\n", encoding="utf-8")
    assert find_qmd_config(cwd=qmd.parent, environ={}) == qmd / "index.yml"
    (qmd / "index.yaml").write_text("collections: {}\n", encoding="utf-8")
    assert find_qmd_config(cwd=qmd.parent, environ={}) == qmd / "index.yaml"


def check_qmd_editor_aliases(run):
    from qmdlab.store.qmdimport import plan_import

    conf = run.tmp / "qmd.yml"
    for text, want in (
        ("editorUri: 'c://{path}'\neditor-uri: 'd://{path}'\n", "c://{path}"),
        ("editor-uri: 'd://{path}'\n", "d://{path}"),
        ("editor_uri_template: 't://{path}'\neditorUri: 'c://{path}'\n", "t://{path}"),
        ("editor_uri: 'e://{path}'\neditor_uri_template: 't://{path}'\n", "e://{path}"),
    ):
        conf.write_text(text + "collections: {}\n", encoding="utf-8")
        plan = plan_import(conf)
        assert plan.editor_uri == want and not plan.skipped, (text, plan)


def check_qmd_models_per_index(run):
    conf = run.tmp / "models.yml"
    conf.write_text("models:\n  rerank: fake:overlap\ncollections: {}\n", encoding="utf-8")
    run("collection", "import-qmd", str(conf))
    assert "rerank: fake:overlap" in (Path(run.index_dir) / "collections.yaml").read_text(encoding="utf-8")


def _with_env(values, fn):
    import os

    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        return fn()
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def check_qmd_host(run):
    from qmdlab.commands.mcp import mcp_command

    ctx = _with_env({"QMD_HOST": "0.0.0.0"}, lambda: mcp_command.make_context("mcp", ["--http"]))
    assert ctx.params["host"] == "0.0.0.0"
    assert mcp_command.make_context("mcp", ["--http", "--host", "::1"]).params["host"] == "::1"  # --host wins


def check_qmd_allowed_lists(run):
    from starlette.testclient import TestClient

    from qmdlab.mcp_server.http import build_app

    env = {"QMD_ALLOWED_ORIGINS": "https://app.example", "QMD_ALLOWED_HOSTS": "box.lan:8181"}
    app = _with_env(env, lambda: build_app(_engine(run)))
    with TestClient(app, base_url="http://box.lan:8181") as http:
        assert http.get("/health", headers={"Origin": "https://app.example"}).status_code == 200
        assert http.get("/health", headers={"Origin": "https://evil.example"}).status_code == 403
    with TestClient(build_app(_engine(run)), base_url="http://box.lan:8181") as http:
        assert http.get("/health").status_code == 403  # unset: only the bound address


def check_qmd_busy_timeout(run):
    from qmdlab.store import Index

    def wait_ms():
        with Index.open(run.index_dir) as idx:
            return idx.conn.execute("PRAGMA busy_timeout").fetchone()[0]

    assert _with_env({"QMD_SQLITE_BUSY_TIMEOUT": "1500"}, wait_ms) == 1500
    assert _with_env({"QMD_SQLITE_BUSY_TIMEOUT": "0"}, wait_ms) == 0


def check_context_folder(run):
    run("context", "add", str(run.tmp / "kb" / "sub"), "Sub notes")
    assert "kb/sub\tSub notes" in run("context", "list").stdout
    hit = [h for h in _json(run, "search", "heron", "--json") if h["docno"] == "kb/sub/b.md"][0]
    assert "Sub notes" in hit["context"]


def check_context_one_argument(run):
    import os

    here = os.getcwd()
    os.chdir(run.tmp / "misc")
    try:
        run("context", "add", "Misc notes")
    finally:
        os.chdir(here)
    assert "misc\tMisc notes" in run("context", "list").stdout


def check_status_pending(run):
    st = _json(run, "status", "--json")
    assert st["pending_embeddings"] == st["chunks"] > 0
    assert "run `qmdlab embed`" in run("status").stdout
    run("embed", "--preset", "fake", "--no-progress")
    assert _json(run, "status", "--json")["pending_embeddings"] == 0


def check_update_hint(run):
    assert "chunks have no vectors yet: run `qmdlab embed`" in run("update").stdout
    run("embed", "--preset", "fake", "--no-progress")
    assert "qmdlab embed" not in run("update").stdout


def _engine(run):
    from qmdlab.mcp_server.backend import McpBackend

    return McpBackend(run.index_dir, preset="fake")


def _tools(backend):
    import anyio

    from qmdlab.mcp_server.server import build_server

    server = build_server(backend)
    return server, {t.name: t for t in anyio.run(server.list_tools)}


def check_mcp_query_arguments(run):
    _, tools = _tools(_engine(run))
    args = {"query", "searches", "limit", "minScore", "candidateLimit", "collections", "intent", "rerank"}
    assert args <= set(tools["query"].input_schema["properties"])


def _mcp_hits(run, query="heron"):
    _, data = _engine(run).query(searches=[{"type": "lex", "query": query}], rerank=False, expand=False)
    return {h["docno"]: h for h in data["results"]}, data


def check_mcp_result_keys(run):
    hits, data = _mcp_hits(run)
    assert set(data) >= {"results"} and hits
    for h in hits.values():
        assert QMD_KEYS | {"context"} <= set(h) and h["docid"].startswith("#") and h["file"] == "qmd://" + h["docno"]
        assert h["title"]


def check_mcp_result_context(run):
    hits, _ = _mcp_hits(run)
    assert hits["kb/a.md"]["context"] == "Team notes" and hits["misc/c.md"]["context"] is None


def check_mcp_result_line(run):
    hits, _ = _mcp_hits(run)
    body = (run.tmp / "kb" / "a.md").read_text(encoding="utf-8").split("\n")
    assert "heron" in body[hits["kb/a.md"]["line"] - 1]


def check_mcp_snippet_cap(run):
    hits, _ = _mcp_hits(run, "zebra")
    header, _, text = hits["kb/sub/b.md"]["snippet"].partition("\n")
    first = int(HEADER.match(header).group(1))
    assert text.startswith(f"{first}: ") and text.endswith("...")
    plain = "\n".join(line.split(": ", 1)[1] for line in text.split("\n"))  # capped before numbering
    assert len(plain) == 300


def check_mcp_get_range(run):
    backend = _engine(run)
    _, d = backend.get("kb/a.md:5:1")
    assert d["text"] == "5: the heron nests here"
    _, d = backend.get("#" + d["docid"], from_line=5, max_lines=1)
    assert d["text"] == "5: the heron nests here"


def check_mcp_line_numbers_default(run):
    _, tools = _tools(_engine(run))
    for name in ("get", "multi_get"):
        assert tools[name].input_schema["properties"]["lineNumbers"]["default"] is True, name
    assert tools["multi_get"].input_schema["properties"]["maxBytes"]["default"] == 64 * 1024


def check_mcp_get_resource(run):
    from qmdlab.mcp_server.server import _document_result

    result = _document_result(*_engine(run).get("kb/a.md"))
    (item,) = result.content
    assert item.type == "resource" and str(item.resource.uri) == "qmd://kb/a.md"
    assert item.resource.mime_type == "text/markdown"
    assert item.resource.text.startswith("<!-- Context: Team notes -->\n\n1: # Alpha")


def check_mcp_multi_get_items(run):
    from qmdlab.mcp_server.server import _documents_result

    backend = _engine(run)
    result = _documents_result(*backend.multi_get("kb/a.md, nope.md", max_lines=2, max_bytes=1000))
    kinds = [c.type for c in result.content]
    assert kinds == ["text", "resource"] and result.content[0].text.startswith("Errors:\n")
    assert result.content[1].resource.text.endswith("[... truncated 6 more lines]")
    result = _documents_result(*backend.multi_get("kb/**/*.md", max_bytes=100))
    assert any(c.type == "text" and c.text.startswith("[SKIPPED: kb/sub/b.md") for c in result.content)


def check_mcp_status_keys(run):
    _, d = _engine(run).status()
    assert (d["totalDocuments"], d["hasVectorIndex"]) == (3, False) and d["needsEmbedding"] == 3
    assert {"name", "path", "pattern", "documents", "lastUpdated"} <= set(d["collections"][0])


def check_mcp_resource_template(run):
    import anyio

    server, _ = _tools(_engine(run))
    assert anyio.run(server.list_resources) == []
    assert [t.uri_template for t in anyio.run(server.list_resource_templates)] == ["qmd://{collection}/{+path}"]


def check_rest_search(run):
    from starlette.testclient import TestClient

    from qmdlab.mcp_server.http import build_app

    body = {"searches": [{"type": "lex", "query": "heron"}], "rerank": False}
    with TestClient(build_app(_engine(run)), base_url="http://127.0.0.1:8181") as http:
        r = http.post("/search", json=body)
        assert r.status_code == 200, r.text
        hits = r.json()["results"]
        assert hits and all(h["file"].startswith("qmd://") and QMD_KEYS <= set(h) for h in hits)
        assert http.post("/query", json=body).json()["results"] == hits


def _call(run, name, arguments):
    """One MCP tool call through the SDK's in-process client."""
    import anyio
    from mcp import Client

    from qmdlab.mcp_server.server import build_server

    async def main():
        async with Client(build_server(_engine(run))) as client:
            return await client.call_tool(name, arguments)

    return anyio.run(main)


def _app(run):
    from starlette.testclient import TestClient

    from qmdlab.mcp_server.http import build_app

    return TestClient(build_app(_engine(run)), base_url="http://127.0.0.1:8181")


def check_mcp_sessionless(run):
    headers = {"accept": "application/json, text/event-stream"}
    with _app(run) as http:
        r = http.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}, headers=headers)
        assert r.status_code == 200 and "mcp-session-id" not in r.headers and r.json()["result"]["tools"]
        assert http.get("/mcp", headers=headers).status_code == 405
        assert http.delete("/mcp", headers=headers).status_code == 405


def check_mcp_unknown_ignored(run):
    r = _call(run, "query", {"searches": [{"type": "lex", "query": "heron"}], "rerank": False, "collection": "kb"})
    assert not r.is_error and r.structured_content["ignored"] == ["collection"]
    with _app(run) as http:
        r = http.post("/query", json={"searches": [{"type": "lex", "query": "heron"}], "rerank": False, "top_k": 1})
        assert r.status_code == 200 and r.json()["ignored"] == ["top_k"]


def check_mcp_numbers(run):
    lex = {"searches": [{"type": "lex", "query": "heron"}], "rerank": False, "expand": False}
    counts = [
        len(_call(run, "query", dict(lex, **extra)).structured_content["results"])
        for extra in ({"limit": 200}, {"limit": 0}, {"limit": 2.5}, {"minScore": 5}, {"candidateLimit": 1000})
    ]
    assert counts == [3, 0, 2, 0, 3]
    assert (
        _call(run, "get", {"file": "kb/a.md", "fromLine": 0, "maxLines": 1}).structured_content["text"] == "1: # Alpha"
    )
    assert _call(run, "query", dict(lex, limit="3")).is_error  # not a number


def check_mcp_no_match(run):
    import anyio
    from mcp import Client

    from qmdlab.mcp_server.server import build_server

    r = _call(run, "multi_get", {"pattern": "kb/none-*.md"})
    assert not r.is_error and [c.text for c in r.content] == ["Errors:\nNo files matched pattern: kb/none-*.md"]

    async def read():
        async with Client(build_server(_engine(run))) as client:
            return await client.read_resource("qmd://kb/none.md")

    assert [c.text for c in anyio.run(read).contents] == ["Document not found: kb/none.md"]


def check_mcp_titles(run):
    _, tools = _tools(_engine(run))
    titles = {n: tools[n].title for n in ("query", "get", "multi_get", "status")}
    assert titles == {
        "query": "Query",
        "get": "Get Document",
        "multi_get": "Multi-Get Documents",
        "status": "Index Status",
    }


def check_rest_health_uptime(run):
    with _app(run) as http:
        h = http.get("/health").json()
        assert h["status"] == "ok" and isinstance(h["uptime"], int) and h["uptime"] >= 0


def check_mcp_contexts_joined(run):
    run("context", "add", "kb/sub", "Sub notes")
    hits, _ = _mcp_hits(run)
    assert hits["kb/sub/b.md"]["context"] == "Team notes\n\nSub notes"
    assert _engine(run).get("kb/sub/b.md")[1]["context"] == "Team notes\n\nSub notes"


CHECKS = {name[len("check_") :]: fn for name, fn in globals().items() if name.startswith("check_")}
SAME = [r for r in ROWS if not r.deviation]
DEVIATIONS = [r for r in ROWS if r.deviation]


def test_every_row_cites_qmds_source_and_ends_in_a_check_or_a_switch():
    assert len({r.key for r in ROWS}) == len(ROWS), "duplicate keys"
    for r in ROWS:
        assert re.fullmatch(r"src/[\w/]+\.ts:\d+", r.cite), r
        if r.deviation:
            assert r.qmd and r.ours and (r.switch or r.why), f"{r.key}: a deviation needs a switch or a reason"
        else:
            assert r.check.startswith("parses:") or r.check in CHECKS, f"{r.key}: unknown check {r.check!r}"
    unused = set(CHECKS) - {r.check for r in SAME}
    assert not unused, f"checks no row uses: {sorted(unused)}"


@pytest.mark.parametrize("row", [r for r in SAME if r.check.startswith("parses:")], ids=lambda r: r.key)
def test_qmds_command_line_is_accepted(row, click_accepts):
    ok, why = click_accepts(shlex.split(row.check[len("parses:") :]))
    assert ok, f"{row.key} ({row.cite}): `qmdlab {row.check[7:]}` is rejected: {why}"


@pytest.mark.parametrize("check", sorted({r.check for r in SAME if not r.check.startswith("parses:")}), ids=lambda c: c)
def test_same_behaviour_as_qmd(check, env):
    CHECKS[check](env)


def _generator():
    spec = importlib.util.spec_from_file_location("gen_qmd_differences", REPO / "scripts" / "gen_qmd_differences.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    return gen


def test_the_page_is_generated_from_the_table():
    assert DOC.read_text(encoding="utf-8") == _generator().render(ROWS), (
        f"{DOC.relative_to(REPO)} is stale: run .venv/bin/python scripts/gen_qmd_differences.py"
    )


def test_every_switch_on_the_page_parses(click_accepts):
    for r in DEVIATIONS:
        for snippet in re.findall(r"`(qmdlab [^`]+)`", r.switch):
            argv = [{"N": "8181"}.get(w, w) for w in shlex.split(snippet.replace("[", "").replace("]", ""))[1:]]
            ok, why = click_accepts(argv)
            assert ok, f"{r.key}: `{snippet}` is rejected: {why}"
