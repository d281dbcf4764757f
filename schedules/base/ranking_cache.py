"""A tile ranking remembered by value: the fusion policy plans a kernel with a template's ranking,
then the rule schedules the same kernel with it, in one compile."""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable, List, Sequence


class RememberedRanking:
    """``rank(problem, limits, config)`` computed once per problem, limits and config values: the
    problem and the limits are frozen (hashable), a config dataclass is mutable, so its fields are
    the key. :meth:`cache_clear` forgets every ranking."""

    def __init__(self, rank: Callable[..., Sequence], maxsize: int):
        @functools.lru_cache(maxsize=maxsize)
        def ranked(problem, limits, config_type: type, config_fields: tuple) -> tuple:
            return tuple(rank(problem, limits, config_type(*config_fields)))
        self._ranked = ranked

    def __call__(self, problem, limits, config) -> List:
        return list(self._ranked(problem, limits, type(config), dataclasses.astuple(config)))

    def cache_clear(self) -> None:
        """Forget the remembered rankings."""
        self._ranked.cache_clear()

    def cache_info(self):
        """``functools.lru_cache``'s figures of the remembered rankings."""
        return self._ranked.cache_info()
