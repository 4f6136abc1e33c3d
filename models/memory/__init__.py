"""Memory: what the agent remembers, per user, and forgets on request.

Owns semantic memory (`facts`: newer facts supersede older ones), episodic memory (`episodes`:
past runs), procedural memory (`procedures`, `procedure_recall`, `procedure_admin`), working
memory's raw material (`messages`: a run's turns and summaries, counted with `tokens`), recall
(`retrieval`: pgvector HNSW candidates fused; `rerank`: BM25, context, dates,
`session_summaries`, `time_expressions`, `stop_words`), embeddings (`embedders`,
`embedding_choice`, `embeddings`, `reembedding`), conversations ingested as memory
(`conversation_turns`, `conversation_facts`), erasure (`erasures`) and the operations people run
on memory (`memory_admin`).

May use: the base, `models.plans` and `models.engine` (a run's memory is written when its
engine says so). Never review: a reviewer's words reach memory only through the engine's rows.
"""
