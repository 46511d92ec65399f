"""The SQLite index: collections, contexts, incremental update, chunks and vectors."""

from qmdlab.store.config import Collection, Context
from qmdlab.store.index import Document, Index, UpdateReport, VectorMatrix, docid_of

__all__ = ["Index", "Collection", "Context", "Document", "UpdateReport", "VectorMatrix", "docid_of"]
