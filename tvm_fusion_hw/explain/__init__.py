"""``tvm-fusion-hw explain``: every kernel and decision of a model's plan, on one or more profiles.

:func:`explain` gathers the plans (:mod:`.collect`, stock's grouping from :mod:`.stock`) and lines
them up (:mod:`.compare`) into an :class:`~.model.Explanation`; :mod:`.text` renders it for a
terminal, :mod:`.html` as a page that works from a file, and :mod:`.browser` checks such a page
in headless Chromium.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import tvm

from tvm_fusion_hw.hardware.profile import load_profile
from tvm_fusion_hw.hardware.target import target as make_target

from .collect import collect_plan, plan_label
from .compare import align_decisions, align_kernels
from .model import Explanation
from .native_log import native_log_to
from .stock import StockKernel, stock_kernels

__all__ = ["Explanation", "explain", "stages"]


def _spec(spec: str | tuple[str, dict[str, object]]) -> tuple[str, dict[str, object]]:
    return (spec, {}) if isinstance(spec, str) else (spec[0], dict(spec[1]))


def explain(mod: tvm.IRModule, profiles: Sequence[str | tuple[str, dict[str, object]]], model: str = "",
            batch: int | None = 1, progress=None) -> Explanation:
    """The plans of ``mod`` (a Relax module as imported) on each profile, lined up.

    ``profiles``: names (or files) of hardware profiles, or ``(name, knobs)`` pairs whose knobs
    (fields of :class:`tvm_fusion_hw.PolicyConfig`) go to that plan's fusion pass. ``progress``: a
    :class:`tvm_fusion_hw.progress.Progress` (its stages: the stock grouping, then per profile
    the build and the measurements)."""
    specs = [_spec(s) for s in profiles]
    labels = [plan_label(load_profile(name).name, knobs) for name, knobs in specs]
    if len(set(labels)) != len(labels):
        from tvm_fusion_hw.errors import FusionHWError  # pylint: disable=import-outside-toplevel

        twice = next(label for label in labels if labels.count(label) > 1)
        raise FusionHWError(f"profile {twice} is asked for twice")
    stock: dict[str, list[StockKernel]] = {}
    plans = []
    for (name, knobs), label in zip(specs, labels):
        logged: list[str] = []
        with native_log_to(logged, label):
            tgt = make_target(name)
            kind = tgt.kind.name
            if kind not in stock:  # stock FuseOps reads no profile: once per target kind
                with progress.stage(f"stock FuseOps' grouping ({kind})") if progress else contextlib.nullcontext():
                    stock[kind] = stock_kernels(mod, tgt)
            plans.append(collect_plan(mod, name, stock[kind], knobs, progress))
        plans[-1].notes += logged
    return Explanation(model=model, batch=batch, plans=plans, decisions=align_decisions(plans),
                       kernels=align_kernels(plans))


def stages(profiles: Sequence[str | tuple[str, dict[str, object]]], kinds: int | None = None) -> int:
    """How many progress stages :func:`explain` runs for ``profiles``."""
    count = kinds if kinds is not None else len({load_profile(_spec(s)[0]).tvm_kind for s in profiles})
    return count + 2 * len(profiles)
