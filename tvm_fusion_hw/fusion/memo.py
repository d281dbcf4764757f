"""Exact-IR memos: what a pure function of PrimFuncs answered, remembered for the same IR.

The same PrimFunc is asked about more than once in a compile: the fusion policy asks the templates
for the plan of an unfused part for every complex pair the part is in (MobileNetV2: 34 part plans
of 22 PrimFuncs, 17 pair plans of 12 pairs), and a pipeline that stages a pair fuses and schedules
the whole module again. The answers depend on the PrimFuncs, the target and the PassContext (the
GEMM template plans differently under ``tirx.use_async_copy``), so an :class:`ExactIRMemo` keeps
them under all three, plus whatever the caller puts in its key (the planner, the rules).

Two PrimFuncs count as the same only when they are structurally equal *and* print the same
TVMScript: structural equality ignores the names of buffers, blocks and variables, which a template
may read (and which end up in the generated code). The structural hash only picks the bucket.
A memo holds no state of its own beyond what it was told; :meth:`ExactIRMemo.clear` empties it.
"""

from __future__ import annotations

from typing import Callable, Dict, Hashable, List, Optional, Sequence, Tuple, TypeVar

import tvm
import tvm_ffi
from tvm.target import Target

T = TypeVar("T")


def context_key() -> Tuple:
    """The current PassContext as a hashable value: opt level, config, disabled and required passes."""
    ctx = tvm.transform.PassContext.current()
    config = sorted((str(k), str(v)) for k, v in dict(ctx.config).items()) if ctx.config else []
    return (int(ctx.opt_level), tuple(config), tuple(sorted(str(p) for p in ctx.disabled_pass)),
            tuple(sorted(str(p) for p in ctx.required_pass)))


def target_key(target: Optional[Target]) -> str:
    """``target`` and its host as one string (every attribute: the arch, the limits, the tag)."""
    if target is None:
        return ""
    return f"{target}|host={target.host}" if target.host is not None else str(target)


class _Entry:
    """The PrimFuncs an answer was computed for (their scripts printed once, when first compared)."""

    __slots__ = ("funcs", "value", "_scripts")

    def __init__(self, funcs: Tuple, value):
        self.funcs, self.value, self._scripts = funcs, value, None

    def matches(self, funcs: Tuple) -> bool:
        if all(a.same_as(b) for a, b in zip(self.funcs, funcs)):
            return True
        if not all(tvm_ffi.structural_equal(a, b) for a, b in zip(self.funcs, funcs)):
            return False
        if self._scripts is None:
            self._scripts = tuple(f.script() for f in self.funcs)
        return self._scripts == tuple(f.script() for f in funcs)


class ExactIRMemo:
    """Answers remembered per ``(key, PrimFuncs)`` with the current PassContext; see the module docstring.

    ``key`` is the caller's (hashable: the function asked, the target's :func:`target_key`, a
    kernel's name...); the PassContext is added here. ``hits`` and ``misses`` count lookups.
    """

    def __init__(self):
        self._buckets: Dict[Hashable, List[_Entry]] = {}
        self.hits = 0
        self.misses = 0

    def _bucket(self, key: Hashable, funcs: Tuple) -> Hashable:
        return (key, context_key(), tuple(tvm_ffi.structural_hash(f) for f in funcs))

    def lookup(self, key: Hashable, funcs: Sequence) -> Tuple[bool, object]:
        """``(True, answer)`` when ``funcs`` (the same IR) were answered under ``key`` before, else ``(False, None)``."""
        funcs = tuple(funcs)
        for entry in self._buckets.get(self._bucket(key, funcs), ()):
            if entry.matches(funcs):
                self.hits += 1
                return True, entry.value
        self.misses += 1
        return False, None

    def store(self, key: Hashable, funcs: Sequence, value) -> None:
        """Remember ``value`` as the answer for ``funcs`` under ``key``."""
        funcs = tuple(funcs)
        self._buckets.setdefault(self._bucket(key, funcs), []).append(_Entry(funcs, value))

    def get(self, key: Hashable, funcs: Sequence, compute: Callable[[], T]) -> T:
        """The remembered answer for ``funcs`` under ``key``, else ``compute()`` remembered (an
        exception it raises is raised, nothing remembered)."""
        found, value = self.lookup(key, funcs)
        if found:
            return value
        value = compute()
        self.store(key, funcs, value)
        return value

    def clear(self) -> None:
        self._buckets.clear()
        self.hits = self.misses = 0

    def __len__(self) -> int:
        return sum(len(entries) for entries in self._buckets.values())
