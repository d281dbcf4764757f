"""A template's search bounds changed for one build: the benchmarks build a variant with, say, the
GEMM tile model's K-step slowdown on (``tvm-fusion-hw bundle --variant
NAME:MODEL:ImplicitGemm.long_step_slowdown=0.3``) beside the default build, in one process.

Within :func:`config_changes`, every ``get_config`` of the named rules returns its ``Config`` with
those fields replaced (:class:`~.rule.TiledScheduleRule` wraps every subclass's ``get_config``,
its own or the one it inherits, in :func:`changed`). The change is a context variable: it ends
with the block, also on an exception, and another thread's builds do not see it.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from typing import Dict, Iterator, Mapping

from tvm_fusion_hw.errors import FusionHWError

_CHANGES: contextvars.ContextVar = contextvars.ContextVar("tvm_fusion_hw_config_changes", default={})


def check_changes(config_type: type, rule_name: str, fields: Mapping[str, object]) -> None:
    """Raise :class:`FusionHWError` naming the first of ``fields`` that ``config_type`` lacks."""
    known = {f.name for f in dataclasses.fields(config_type)}
    for name in fields:
        if name not in known:
            raise FusionHWError(f"{rule_name}.{name}: not a field of {config_type.__name__} "
                                f"(fields: {', '.join(sorted(known))})")


@contextlib.contextmanager
def config_changes(changes: Mapping[str, Mapping[str, object]]) -> Iterator[None]:
    """Within the block, ``{rule name: {Config field: value}}`` replaces those fields of the
    named rules' configs (on top of any enclosing block's changes)."""
    merged: Dict[str, Dict[str, object]] = {rule: dict(fields) for rule, fields in _CHANGES.get().items()}
    for rule, fields in changes.items():
        merged.setdefault(rule, {}).update(fields)
    token = _CHANGES.set(merged)
    try:
        yield
    finally:
        _CHANGES.reset(token)


def changed(rule_name: str, config):
    """``config`` (a rule's ``Config``) with the current block's changes for ``rule_name``."""
    fields = _CHANGES.get().get(rule_name)
    if not fields:
        return config
    check_changes(type(config), rule_name, fields)
    return dataclasses.replace(config, **fields)
