"""The offline model's replies that read no evidence: small talk (`chitchat`) and ``mode="normal"`` (`NORMAL_ANSWER`)."""

from __future__ import annotations

import re

_REPLIES = (
    (re.compile(r"\b(thank|thanks|thx|cheers|appreciate)", re.I),
     "You're welcome! Ask me anything about the knowledge base."),
    (re.compile(r"\b(sorry|apolog|my bad|oops|my mistake)", re.I), "No problem at all. What would you like to know?"),
    (re.compile(r"\b(bye|goodbye|see you|see ya|have a|good night|talk later|later)\b", re.I),
     "Goodbye! Come back with more questions any time."),
    (re.compile(r"\b(who|what) are you\b|\bwhat (can|do) you do\b|\bare you\b|\bhelp\b", re.I),
     "I'm an offline corrective-RAG assistant: I search the knowledge base, grade what I find, and answer "
     "with citations to the files and lines I used."),
    (re.compile(r"\bjoke\b", re.I), "Why did the index go to therapy? Too many unresolved references."),
    (re.compile(r"\b(speak|talk|understand)\b", re.I),
     "I answer in English, from the knowledge base; ask me about anything it covers."),
)


def chitchat(query: str) -> str:
    """A short conversational reply, no citations."""
    for pattern, reply in _REPLIES:
        if pattern.search(query):
            return reply
    return "Hello! Ask me a question about the knowledge base and I'll find the answer with sources."


NORMAL_ANSWER = (
    "The offline model has no knowledge of its own beyond the knowledge base; "
    'ask with mode="knowledge_base" to search it.'
)
