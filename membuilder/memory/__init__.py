"""The memory MemBuilder builds: a Core block plus Episodic, Semantic and Procedural entries."""

from membuilder.memory.bank import Applied, MemoryBank, retrieve_across
from membuilder.memory.core import CORE_LIMIT, CoreBlock, CoreEvent
from membuilder.memory.embedding_cache import EmbeddingCache
from membuilder.memory.entry import MEMORY_TYPES, Entry, Hit
from membuilder.memory.store import VectorStore, search_stores

__all__ = [
    "Applied", "CORE_LIMIT", "CoreBlock", "CoreEvent", "EmbeddingCache", "Entry", "Hit",
    "MEMORY_TYPES", "MemoryBank", "VectorStore", "retrieve_across", "search_stores",
]
