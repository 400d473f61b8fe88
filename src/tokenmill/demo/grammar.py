"""Compile sentence templates against a lexicon and fill them quickly from bulk random numbers."""

from __future__ import annotations

import re
from operator import getitem
from typing import Callable

import numpy as np

# {NP}, {NP2}, {NP_C}: base slot name, optional "_C" (capitalize the first
# letter, for slots that start a sentence) and an optional digit that only
# makes two uses of the same list distinct in the template text.
_SLOT = re.compile(r"\{([A-Z]+)(_C)?(\d?)\}")

# At most this many slots per template (one random column each).
ROW_WIDTH = 9

Compiled = tuple[Callable[..., str], tuple[list[str], ...]]  # (bound str.format, slot lists)


class Grammar:
    """Per-topic sentence pools; `sentences` fills n templates with one numpy call."""

    def __init__(self, lexicons: dict[str, dict[str, list[str]]], templates: dict[str, list[str]]):
        self._lexicons = lexicons
        self._templates = templates
        self._capitalized: dict[tuple[str, str], list[str]] = {}
        self._tables: dict[tuple[str, tuple[str, ...]], tuple[list[Compiled], np.ndarray]] = {}

    @property
    def topics(self) -> list[str]:
        return list(self._lexicons)

    def lexicon(self, topic: str) -> dict[str, list[str]]:
        return self._lexicons[topic]

    def _slot_list(self, topic: str, name: str, capital: bool) -> list[str]:
        words = self._lexicons[topic][name]
        if not capital:
            return words
        key = (topic, name)
        if key not in self._capitalized:
            self._capitalized[key] = [w[:1].upper() + w[1:] for w in words]
        return self._capitalized[key]

    def _compile(self, topic: str, template: str) -> Compiled:
        slots: list[list[str]] = []

        def take(match: re.Match) -> str:
            slots.append(self._slot_list(topic, match.group(1), bool(match.group(2))))
            return "{}"

        fmt = _SLOT.sub(take, template)
        if len(slots) > ROW_WIDTH:
            raise ValueError(f"template has too many slots: {template!r}")
        return fmt.format, tuple(slots)  # the bound method saves an attribute lookup per sentence

    def _table(self, key: tuple[str, tuple[str, ...]]) -> tuple[list[Compiled], np.ndarray]:
        """Compiled templates of the given kinds (repeating a kind weights it up) and a
        (templates x ROW_WIDTH) array of slot list lengths, 1 where a slot is unused."""
        if key not in self._tables:
            topic, kinds = key
            pool = [self._compile(topic, t) for kind in kinds for t in self._templates[kind]]
            lengths = np.ones((len(pool), ROW_WIDTH), dtype=np.float64)
            for t, (_, slots) in enumerate(pool):
                lengths[t, : len(slots)] = [len(s) for s in slots]
            self._tables[key] = (pool, lengths)
        return self._tables[key]

    def sentences(self, rng: np.random.Generator, topic: str, kinds: tuple[str, ...], n: int) -> list[str]:
        pool, lengths = self._table((topic, kinds))
        # All random choices for the n sentences in one bulk numpy draw (column 0 picks the
        # template, the others index each slot's list): per-sentence Python RNG calls would
        # cost more than the string formatting itself.
        uniform = rng.random((n, ROW_WIDTH + 1))
        picks = (uniform[:, 0] * len(pool)).astype(np.intp)
        index = (uniform[:, 1:] * lengths[picks]).astype(np.intp).tolist()
        out = []
        append = out.append
        for t, row in zip(picks.tolist(), index):
            fill, slots = pool[t]
            # map() stops at the template's slot count; the unused columns are ignored.
            append(fill(*map(getitem, slots, row)))
        return out

    def one(self, rng: np.random.Generator, topic: str, kind: str) -> str:
        return self.sentences(rng, topic, (kind,), 1)[0]


class SentenceSource:
    """Hands out sentences from per-(topic, kinds) buffers refilled in large batches.

    A document asks for a handful of sentences at a time; drawing them in batches of
    thousands amortizes the fixed cost of each numpy call. Output stays a pure function
    of the generator's seed and the sequence of requests.
    """

    # Batches start small and double per refill, so rarely used kinds (titles, list
    # items) and small corpora do not pay for thousands of unused sentences.
    FIRST_BATCH = 32
    MAX_BATCH = 4096

    def __init__(self, grammar: Grammar, rng: np.random.Generator):
        self.grammar = grammar
        self.rng = rng
        self._buffers: dict[tuple[str, tuple[str, ...]], tuple[list[str], int]] = {}
        self._batch: dict[tuple[str, tuple[str, ...]], int] = {}

    def lexicon(self, topic: str) -> dict[str, list[str]]:
        return self.grammar.lexicon(topic)

    def take(self, topic: str, kinds: tuple[str, ...], n: int) -> list[str]:
        key = (topic, kinds)
        buffer, pos = self._buffers.get(key, ([], 0))
        if len(buffer) - pos < n:
            batch = self._batch.get(key, self.FIRST_BATCH)
            self._batch[key] = min(2 * batch, self.MAX_BATCH)
            buffer = buffer[pos:] + self.grammar.sentences(self.rng, topic, kinds, max(n, batch))
            pos = 0
        self._buffers[key] = (buffer, pos + n)
        return buffer[pos : pos + n]

    def one(self, topic: str, kind: str) -> str:
        return self.take(topic, (kind,), 1)[0]
