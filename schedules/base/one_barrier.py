"""One barrier a K step in a multi-stage ``cp.async`` loop, instead of TVM's two.

TVM's software pipeline lowers a loop whose copies run ``S - 1`` steps ahead (``S`` shared
buffers) to ``sync; copy step k + S - 1; commit; wait (S - 1 in flight); sync; compute step k``.
The first barrier guards the buffer the copy overwrites, which step ``k - 1`` computed from;
TVM's barrier planner cannot tell the ``S`` buffers of one allocation apart, so it keeps both.
CUTLASS's multistage loop waits first: ``wait (S - 2 in flight); sync; copy step k + S - 1;
commit; compute step k``. Its one barrier comes after every thread's step ``k - 1``, so it also
guards the overwritten buffer, and it makes step ``k``'s copies visible.

A schedule marks the loop (:func:`mark`); :func:`one_barrier_steps` rewrites a marked loop's
lowered body to that order, where it is exactly TVM's shape (else it leaves it as it is: two
barriers, correct). The rewrite runs after TVM's TIR pipeline, in the pipeline registered here as
:data:`PIPELINE` (``kernel_build.lower`` and ``tvm.compile(..., tir_pipeline=PIPELINE)``); a build
through TVM's default pipeline ignores the mark.
"""

from __future__ import annotations

from typing import List, Optional

import tvm
import tvm_ffi
from tvm import tirx
from tvm.tirx import compilation_pipeline

#: the loop annotation that asks for the rewrite
MARK = "tvm_fusion_hw.one_barrier_steps"
#: the TIR pipeline name: TVM's default, then :func:`one_barrier_steps` on every function
PIPELINE = "tvm_fusion_hw"

_COMMIT, _WAIT, _IN_FLIGHT = "async_commit_queue_scope", "async_wait_queue_scope", "async_wait_inflight_count"


def mark(sch, loop) -> None:
    """Ask for one barrier a step in ``loop``, the K loop of a ``cp.async`` software pipeline."""
    sch.annotate(loop, MARK, 1)


def one_barrier_steps(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` with each marked loop in the one-barrier order where its body has TVM's shape, and
    without its mark. A marked loop under a statement :func:`_rewrite` does not enter keeps its
    two barriers and its mark (an annotation code generation ignores)."""
    marked: List[tirx.For] = []
    tvm_ffi.structural_walk(func.body, [(tirx.For, lambda f: MARK in f.annotations and marked.append(f))],
                            order="post")
    return func.with_body(_rewrite(func.body)) if marked else func


def _rewrite(stmt: tirx.Stmt) -> tirx.Stmt:
    """``stmt`` with its marked loops rewritten, through the statements that lead to them (a
    sequence, an attribute, a condition, a loop); any other statement is left whole."""
    if isinstance(stmt, tirx.SeqStmt):
        return tirx.SeqStmt([_rewrite(s) for s in stmt.seq])
    if isinstance(stmt, tirx.AttrStmt):
        return tirx.AttrStmt(stmt.node, stmt.attr_key, stmt.value, _rewrite(stmt.body))
    if isinstance(stmt, tirx.IfThenElse):
        return tirx.IfThenElse(stmt.condition, _rewrite(stmt.then_case),
                               None if stmt.else_case is None else _rewrite(stmt.else_case))
    if isinstance(stmt, tirx.For):
        annotations = {k: v for k, v in stmt.annotations.items() if k != MARK}
        body = _one_barrier_body(stmt.body) if MARK in stmt.annotations else None
        return tirx.For(stmt.loop_var, stmt.min, stmt.extent, stmt.kind,
                        body if body is not None else _rewrite(stmt.body), stmt.thread_binding, annotations,
                        stmt.step)
    return stmt


def _one_barrier_body(body: tirx.Stmt) -> Optional[tirx.Stmt]:
    """``[commit: sync, copies], [wait n: sync, compute]`` as ``[wait n - 1: sync], [commit:
    copies], compute``; None for any other body."""
    if not isinstance(body, tirx.SeqStmt) or len(body.seq) != 2:
        return None
    commit, wait = body.seq
    if not (isinstance(commit, tirx.AttrStmt) and commit.attr_key == _COMMIT and isinstance(wait, tirx.AttrStmt)
            and wait.attr_key == _WAIT and isinstance(wait.body, tirx.AttrStmt) and wait.body.attr_key == _IN_FLIGHT
            and isinstance(wait.body.value, tirx.IntImm) and wait.body.value.value >= 1):
        return None
    barrier, copies = _first_sync(commit.body, before_sync_only=_is_binding)
    _, compute = _first_sync(wait.body.body, before_sync_only=lambda s: False)
    if copies is None or compute is None or _syncs(copies) or not _only_async_copies(copies):
        return None
    in_flight = tirx.IntImm(str(wait.body.value.ty.dtype), wait.body.value.value - 1)
    waited = tirx.AttrStmt(wait.node, _WAIT, wait.value,
                           tirx.AttrStmt(wait.body.node, _IN_FLIGHT, in_flight, barrier))
    return tirx.SeqStmt([waited, tirx.AttrStmt(commit.node, _COMMIT, commit.value, tirx.SeqStmt(copies)), *compute])


def _first_sync(stmt: tirx.Stmt, before_sync_only):
    """``(barrier, the other statements)`` of the sequence ``stmt``, its first barrier taken out,
    where only statements that ``before_sync_only`` accepts come before it; ``(None, None)``
    otherwise."""
    seq = list(stmt.seq) if isinstance(stmt, tirx.SeqStmt) else [stmt]
    for i, s in enumerate(seq):
        if _is_sync(s):
            return s, seq[:i] + seq[i + 1:]
        if not before_sync_only(s):
            break
    return None, None


def _is_sync(stmt) -> bool:
    call = stmt.value if isinstance(stmt, tirx.Evaluate) else None
    return isinstance(call, tvm.ir.Call) and call.op.same_as(tvm.ir.Op.get("tirx.tvm_storage_sync")) \
        and call.args[0].value in ("shared", "shared.dyn")


def _is_binding(stmt) -> bool:
    return type(stmt).__name__ == "Bind"  # a scalar bound for the statements after it: no memory access


def _syncs(stmts: List[tirx.Stmt]) -> int:
    found: list = []
    for s in stmts:
        tvm_ffi.structural_walk(s, [(tirx.Evaluate, lambda e: _is_sync(e) and found.append(e))], order="post")
    return len(found)


def _only_async_copies(stmts: List[tirx.Stmt]) -> bool:
    """Whether the copy stage does nothing but bind scalars and issue ``cp.async`` copies (a
    predicated copy included): nothing the removed barrier could have ordered against the step before."""
    calls: list = []
    stores: list = []
    for s in stmts:
        tvm_ffi.structural_walk(s, [(tvm.ir.Call, calls.append), (tirx.BufferStore, stores.append)], order="post")
    names = {c.op.name for c in calls if isinstance(c.op, tvm.ir.Op)}
    return not stores and any("cp_async" in n for n in names)


def _pipeline_factory():
    base, finalize_host, finalize_device = compilation_pipeline.get_tir_pipeline("default")

    @tvm.transform.module_pass(opt_level=0, name="OneBarrierSteps")
    def rewrite(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        changed = {gv: one_barrier_steps(f) for gv, f in mod.functions_items() if isinstance(f, tirx.PrimFunc)}
        changed = {gv: f for gv, f in changed.items() if not f.same_as(mod[gv])}
        if not changed:  # no marked loop: the module as TVM's pipeline left it
            return mod
        mod = mod.clone()
        for gv, func in changed.items():
            mod.update_func(gv, func)
        return mod

    return tvm.transform.Sequential([base, rewrite]), finalize_host, finalize_device


compilation_pipeline.register_tir_pipeline(PIPELINE, _pipeline_factory)
