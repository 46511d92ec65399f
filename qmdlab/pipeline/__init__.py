"""The traced hybrid query pipeline (docs/design.md, pipeline), one module per stage.

=============  ===================================================================
``config``     :class:`PipelineConfig`, every constant of the pipeline
``probe``      BM25 probe and the strong-signal skip
``expand``     expansion lines: language-aware filter, query documents
``retrieve``   routing of sub-queries to BM25 / vector lists → ``lists``
``fuse``       fusion methods (``qmd_rrf``, ``rrf``, ``norm_sum``, ``gated_rrf``,
               ``wsum_minmax``, ``combmnz``, ``learned``) → ``fused``; candidates
``learned``    ``fusion=learned``: trace features and the LightGBM lambdarank model
``rerun_bm25``      re-run recorded BM25 lists under other lexical knobs (index needed)
``select``     best chunk per candidate for the reranker
``rerank``     cached, fail-open reranking → ``rerank``
``blend``      blend methods (``position``, ``score``, ``rerank_only``, ``none``) → ``final``
``finish``     dedupe, min-score, tag lift, limit
``trace``      :class:`Trace`, the tables of docs/design.md, trace
``lab``        :class:`Lab` and :func:`query`, the whole pipeline over an index
``retune``     :func:`retune`, the cheap stages again with no model or index call
``explain``    per-result contributions for ``qmdlab query --explain``/``--trace-json``
=============  ===================================================================
"""
