"""A deterministic stand-in for a real tokenizer.

Words, numbers and single punctuation marks each count as one token, so a
test can predict counts by eye ("Hello, world!" is 4 tokens). Token ids are
a stable hash of the piece, so /tokenize answers the same ids on every run.
The same functions feed /tokenize, the context-length check and `usage`,
which is what keeps the three consistent, as they are in vLLM.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

_PIECE = re.compile(r"\w+|[^\w\s]")

# Gemma's vocabulary is 262,144 entries; ids land inside it.
VOCAB_SIZE = 262_144
BOS_ID = 2

# Chat-template overhead, shaped like Gemma's
# "<start_of_turn>user\n...<end_of_turn>\n": a few tokens per message, plus
# BOS and the generation prompt "<start_of_turn>model\n".
TOKENS_PER_MESSAGE = 4
TOKENS_PER_CHAT = 4


@dataclass(frozen=True)
class ChatMessage:
    """One chat message reduced to what the simulator needs."""

    role: str
    content: str


def pieces(text: str) -> list[str]:
    """The token strings of `text`."""
    return _PIECE.findall(text)


def token_id(piece: str) -> int:
    """A stable id for one piece (never the BOS id)."""
    return 3 + zlib.crc32(piece.encode("utf-8")) % (VOCAB_SIZE - 3)


def encode(text: str, add_special_tokens: bool = True) -> list[int]:
    """Token ids of a plain prompt, with BOS first as vLLM adds it by default."""
    ids = [token_id(p) for p in pieces(text)]
    return [BOS_ID, *ids] if add_special_tokens else ids


def encode_chat(messages: Sequence[ChatMessage]) -> list[int]:
    """Token ids of a chat after the (simulated) chat template."""
    ids = [BOS_ID]
    for message in messages:
        ids.append(token_id(f"<turn:{message.role}>"))
        ids.extend(token_id(p) for p in pieces(message.content))
        ids.extend(token_id(f"<pad{i}>") for i in range(TOKENS_PER_MESSAGE - 1))
    ids.extend(token_id(f"<gen{i}>") for i in range(TOKENS_PER_CHAT - 1))
    return ids


def count_chat(messages: Sequence[ChatMessage]) -> int:
    """Prompt tokens of a chat: content pieces + per-message and per-chat overhead."""
    return len(encode_chat(messages))


def reply_pieces(messages: Sequence[ChatMessage]) -> list[str]:
    """The canned reply as token pieces: a fixed opening that echoes the last user words.

    Deterministic, so tests can assert the text; at least a few tokens long,
    so streaming has several chunks.
    """
    last_user = next((m.content for m in reversed(messages) if m.role == "user"), "")
    echoed = pieces(last_user)[:8]
    words = ["This", "is", "the", "Sentinel", "simulator", "."]
    if echoed:
        words += ["You", "said", ":", *echoed]
    return words


def detokenize(reply: Sequence[str]) -> list[str]:
    """Text deltas for each reply piece: a space before words, none before punctuation."""
    out: list[str] = []
    for i, piece in enumerate(reply):
        glue = "" if i == 0 or not piece[:1].isalnum() else " "
        out.append(glue + piece)
    return out
