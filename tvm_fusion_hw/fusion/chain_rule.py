"""Rule 3, for three complex ops: attention's scores, softmax and ``. V`` in one kernel.

Stock FuseOps never puts two complex ops in one kernel, so attention runs as three: the score
matrix (``Lq x Lk`` per head) goes to global memory, the softmax reads it and writes the
probabilities, and ``. V`` reads those. :class:`AttentionChainRule` merges the three groups where a
schedule template plans one kernel for them (the policy's ``TemplatePlanners.chains``) and that
plan fits the profile: its shared memory per block (the template keeps every key and value row of
a head on chip), its registers per thread, at least one resident block per SM, and its grid in one
wave (the profile's SMs times the blocks one SM holds). The fused kernel restages every key and
value of a head per query tile: where the grid takes several waves, the work is throughput-bound
and the three kernels (two GEMMs at their own tiles) ran faster; in one wave it is latency-bound,
and saving two launches and the scores' round trip won (both measured on an H200 on five corpus
models at batch 32 and 1: bench/results/2026-12-03-h200-attention). So the decision follows the
SM count and what one SM holds. Every refusal says which figure decided; a chain that does not fit
stays three kernels, the scores staged through global memory.
"""

from __future__ import annotations

from typing import Dict

from tvm_fusion_hw.hardware.occupancy import occupancy
from tvm_fusion_hw.plans import as_plan

from .decisions import Decision
from .group_view import GroupView
from .memo import target_key
from .pair_rule import ComplexPairRule, plan_figures

#: the chain ``TemplatePlanners.chains`` keys attention by: a matmul, a row reduction, a matmul
ATTENTION_CHAIN = "matmul->reduce->matmul"


class AttentionChainRule:
    """Decides attention chains for a :class:`~.policy.FusionPolicy`, with its complex-pair rule's
    profile, config, template planners and memo."""

    def __init__(self, pairs: ComplexPairRule):
        self.pairs = pairs

    def decide(self, scores: GroupView, softmax: GroupView, output: GroupView, producer: GroupView,
               merged: GroupView, figures: Dict[str, object]) -> Decision:
        """``scores`` (the first matmul and its epilogue), ``softmax`` and ``output`` (the second
        matmul) as one kernel; ``producer`` is the first two merged, ``merged`` all three. The
        decision is a complex pair of ``producer`` and ``output`` (so that a pipeline that could
        not schedule the fused kernel refuses it the same way)."""
        cfg, p, rule = self.pairs.config, self.pairs.profile, self.pairs
        chain = "matmul -> softmax -> matmul"
        figures.update({"producer_ops": list(producer.ops), "consumer_ops": list(output.ops), "chain": ATTENTION_CHAIN})

        def decision(fused: bool, reason: str, staged: bool = False) -> Decision:
            return Decision("complex-pair", producer.label, output.label, fused, f"{chain}: {reason}", figures,
                            staged=staged)

        refusal = next((r for r in cfg.refused_pairs if (tuple(r.producer_ops), tuple(r.consumer_ops))
                        == (tuple(producer.ops), tuple(output.ops))), None)
        if refusal is not None:
            return decision(False, f"staged: {refusal.reason}: three kernels", staged=True)
        if not cfg.fuse_complex_pairs:
            return decision(False, "complex pairs disabled (fuse_complex_pairs=False)")
        entry = rule.planners.chains.get(ATTENTION_CHAIN)
        if entry is None or ATTENTION_CHAIN not in rule.pair_templates():
            return decision(False, "no schedule template runs attention as one kernel here "
                                   f"({ATTENTION_CHAIN} not among the pair templates): three kernels")
        funcs = [g.anchor().func if g.anchor() is not None else None for g in (scores, softmax, output)]
        if any(f is None for f in funcs):
            return decision(False, "a part has no PrimFunc to plan from: three kernels")
        target = rule.gpu_target()
        plan = rule.memo.get(("chain", entry, target_key(target)), tuple(funcs),
                             lambda: as_plan(entry(*funcs, target), "Attention"))
        if plan is None:
            return decision(False, f"the attention template does not take it on {target.kind.name} (it takes "
                                   "CUDA, and keys a lane reads in float4 columns): three kernels")
        fused = occupancy(p, plan.threads_per_block, plan.registers_per_thread,
                          min(plan.shared_bytes, p.shared_memory_bytes_per_block))
        round_trip = merged.cost.saved_bytes - sum(g.cost.saved_bytes for g in (scores, softmax, output))
        figures.update({**plan_figures(plan, p, fused), "round_trip_bytes": round_trip})
        planned = f"the {plan.template} template's plan ({plan.summary or plan.describe()})"
        staged = (f": three kernels, the scores and probabilities staged through global memory "
                  f"({round_trip / 1e6:.2f} MB written and read back)")
        if plan.shared_bytes > p.shared_memory_bytes_per_block:
            return decision(False, f"staged: {planned} needs {plan.shared_bytes / 1024:.1f} KiB, more than "
                                   f"{p.shared_memory_bytes_per_block / 1024:.0f} KiB shared memory per block"
                                   f"{staged}", staged=True)
        if plan.registers_per_thread > p.max_registers_per_thread:
            return decision(False, f"staged: {planned} needs more than {p.max_registers_per_thread} "
                                   f"regs/thread{staged}", staged=True)
        if fused.blocks_per_multiprocessor < 1:
            return decision(False, f"staged: {planned} fits no block on an SM ({fused.limiter}){staged}",
                            staged=True)
        wave = p.multiprocessor_count * fused.blocks_per_multiprocessor
        figures.update({"plan_waves": -(-plan.blocks // wave) if plan.blocks else 0, "blocks_per_wave": wave})
        fits = (f"{planned} fits {p.shared_memory_bytes_per_block / 1024:.0f} KiB shared/block, occupancy {fused}")
        if plan.blocks > wave:
            return decision(False, f"apart: {fits}, but its {plan.blocks} blocks take "
                                   f"{figures['plan_waves']} waves of {wave} ({p.multiprocessor_count} SMs x "
                                   f"{fused.blocks_per_multiprocessor}): a grid that busy runs the three kernels "
                                   f"faster{staged}")
        return decision(True, f"one kernel, {fits}; its {plan.blocks} blocks run in one wave of {wave}; keeps the "
                              f"scores on chip: saves {round_trip / 1e6:.2f} MB")
