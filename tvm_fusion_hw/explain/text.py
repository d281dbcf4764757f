"""An :class:`~.model.Explanation` for a terminal: a summary first, every detail on request.

The summary is what a user reads before deciding to dig: per profile the kernels (stock's too),
decisions fused, kept apart and staged, and the modelled time; then the decisions on which the
profiles differ, each with the figure that made them differ. ``details`` adds the decisions side
by side, and per profile every kernel (roofline, registers, schedule) and every decision's reason.
Every line fits ``width`` columns (rich lays out the tables, long reasons wrap).
"""

from __future__ import annotations

import io
import textwrap

from rich.console import Console
from rich.table import Table

from . import units
from .model import Explanation, PlanView, verdict


def _summary(expl: Explanation) -> Table:
    table = Table(box=None, show_header=len(expl.plans) > 1, pad_edge=False, header_style="bold")
    table.add_column("")
    for plan in expl.plans:
        table.add_column(plan.label, overflow="fold")
    rows = [
        ("GPU", [p.display_name for p in expl.plans]),
        ("ridge point", [f"{p.ridge_flop_per_byte:.3g} FLOP/B" for p in expl.plans]),
        ("kernels (stock's)", [f"{len(p.kernels)} ({len(p.stock)})" for p in expl.plans]),
        ("decisions fused", [str(len(p.fused())) for p in expl.plans]),
        ("kept apart", [str(len(p.apart())) for p in expl.plans]),
        ("  of them staged", [str(len(p.staged())) for p in expl.plans]),
        *([("Winograd convs", [f"{len([d for d in p.winograd() if d.fused])} of {len(p.winograd())}"
                                for p in expl.plans])] if any(p.winograd() for p in expl.plans) else []),
        ("roofline (stock's)", [f"{units.seconds(p.roofline_s())} ({units.seconds(p.stock_modelled_s())})"
                                      for p in expl.plans]),
        ("modelled (tile models)", [units.seconds(p.modelled_s()) for p in expl.plans]),
        ("registers measured", [p.measured_with or "no" for p in expl.plans]),
    ]
    for name, cells in rows:
        table.add_row(name, *cells)
    return table


def _wrap(text: str, width: int, indent: int) -> list[str]:
    return textwrap.wrap(text, width=width, initial_indent=" " * indent, subsequent_indent=" " * (indent + 4),
                         break_long_words=True, break_on_hyphens=False) or [""]


def _differences(expl: Explanation, width: int) -> list[str]:
    if len(expl.plans) < 2:
        return []
    differing = expl.differing()
    if not differing:
        return [f"No difference: the profiles take the same {len(expl.decisions)} decisions."]
    lines = [f"Where the profiles differ: {len(differing)} of {len(expl.decisions)} decisions"]
    for row in differing:
        verdicts = ", ".join(f"{v} on {p.label}" for v, p in zip(row.verdicts, expl.plans))
        lines += _wrap(f"{row.rule} {row.producer} -> {row.consumer}: {verdicts}", width, 2)
        for reason in row.why.split(" | "):
            lines += _wrap(reason, width, 6)
    return lines


def _side_by_side(expl: Explanation) -> Table:
    table = Table(title="Decisions side by side (* differs)", box=None, pad_edge=False, title_justify="left",
                  header_style="bold")
    table.add_column("")
    for plan in expl.plans:
        table.add_column(plan.label, overflow="fold")
    table.add_column("rule")
    table.add_column("producer -> consumer", overflow="fold")
    for row in expl.decisions:
        table.add_row("*" if row.differs else "", *row.verdicts, row.rule, f"{row.producer} -> {row.consumer}")
    return table


def _plan_details(plan: PlanView, width: int) -> list[str]:
    lines = ["", f"Kernels on {plan.label} ({plan.display_name}, ridge {plan.ridge_flop_per_byte:.3g} FLOP/B):"]
    for kernel in plan.kernels:
        lines += _wrap(f"{kernel.kernel}: {', '.join(kernel.ops)}", width, 2)
        lines += _wrap(units.roofline(kernel, plan.ridge_flop_per_byte), width, 6)
        lines += _wrap(units.resources(kernel), width, 6)
        lines += _wrap(f"{units.schedule(kernel)}; modelled {units.seconds(kernel.modelled_s)} "
                       f"({kernel.modelled_from})", width, 6)
        lines += [ln for f in kernel.fallbacks for ln in _wrap(f"fell back: {f}", width, 6)]
        lines += _wrap("stock: " + (", ".join(kernel.stock_kernels) or "-"), width, 6)
    lines += ["", (f"Decisions on {plan.label} ({len(plan.fused())} fused, {len(plan.apart())} kept apart, "
                   f"{len(plan.staged())} staged):")]
    for decision in plan.decisions:
        lines += _wrap(decision.line(), width, 2)
    return lines


def _stock(expl: Explanation, width: int) -> list[str]:
    """Stock's kernels, once per distinct grouping (FuseOps reads no profile)."""
    lines, seen = [], []
    for plan in expl.plans:
        names = [k.kernel for k in plan.stock]
        if names in seen:
            continue
        seen.append(names)
        same = [p.label for p in expl.plans if [k.kernel for k in p.stock] == names]
        lines += ["", f"Stock FuseOps' kernels ({len(names)}; the same on {', '.join(same)}):"]
        for kernel in plan.stock:
            lines += _wrap(f"{kernel.kernel}: {', '.join(kernel.ops) or '-'}; {units.flops(kernel.flops)}, "
                           f"{units.nbytes(kernel.compulsory_bytes)}, {kernel.intensity:.3g} FLOP/B", width, 2)
    return lines


def render_text(expl: Explanation, details: bool = False, width: int = 100) -> str:
    """The explanation as text no wider than ``width`` columns."""
    out = io.StringIO()
    console = Console(file=out, width=width, color_system=None, force_terminal=False, soft_wrap=False)
    names = ", ".join(p.label for p in expl.plans)
    batch = f" (batch {expl.batch})" if expl.batch else ""
    for line in _wrap(f"{expl.model}{batch} on {names}", width, 0):
        console.print(line, highlight=False)
    console.print(_summary(expl))
    differences = _differences(expl, width)
    for line in [""] + differences if differences else []:
        console.print(line, highlight=False, markup=False)
    notes: dict = {}
    for plan in expl.plans:
        for note in plan.notes:
            notes.setdefault(note, []).append(plan.label)
    if notes:
        console.print("\nNotes:", highlight=False)
        for note, labels in notes.items():
            for line in _wrap(f"{', '.join(labels)}: {note}", width, 2):
                console.print(line, highlight=False, markup=False)
    console.print("")
    if details:
        if len(expl.plans) > 1:
            console.print(_side_by_side(expl))
        for plan in expl.plans:
            for line in _plan_details(plan, width):
                console.print(line, highlight=False, markup=False)
        for line in _stock(expl, width):
            console.print(line, highlight=False, markup=False)
    else:
        hint = "(--details: every kernel's roofline, registers and schedule, every decision, stock's kernels)"
        for line in _wrap(hint, width, 0):
            console.print(line, highlight=False, markup=False)
    return "\n".join(line.rstrip() for line in out.getvalue().splitlines()) + "\n"


__all__ = ["render_text", "verdict"]
