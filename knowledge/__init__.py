"""What hardware offers and what was measured: data files beside the loaders that validate them.

Use :func:`load_knowledge` to get a :class:`Knowledge`; nothing is read at import.
"""

from knowledge.base import Knowledge
from knowledge.errors import KnowledgeError, KnowledgeFileError, KnowledgeInvalid, UnknownId
from knowledge.loader import knowledge_version, load_knowledge

__all__ = [
    "Knowledge",
    "KnowledgeError",
    "KnowledgeFileError",
    "KnowledgeInvalid",
    "UnknownId",
    "knowledge_version",
    "load_knowledge",
]
