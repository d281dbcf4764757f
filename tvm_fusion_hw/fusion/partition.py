"""Partition a dataflow graph into fusion groups, asking the policy at every step.

The phases, each a walk over the graph that proposes merges to :class:`FusionPolicy`:

0. Projections: a TupleGetItem joins the call it reads (batch_norm returns a tuple).
1. Epilogues, in topological order: a complex op (convolution, matmul, pooling, reduction) takes
   the element-wise ops that consume its output, one at a time, while the policy agrees; also
   ops TVM annotates injective when the TIR shows them element-wise in that output (inference
   batch_norm), which stock FuseOps stops at.
2. Attention: a matmul group whose whole output feeds a softmax whose whole output feeds another
   matmul merges with both where the policy finds a template's one-kernel plan fits. Then complex
   pairs: a group anchored by a complex op whose whole output feeds one other complex
   group (conv -> pool, depthwise -> pointwise) merges with it where the policy finds the
   intermediate tile fits and occupancy holds, and a schedule template takes the pair. Stock TVM
   never does this.
3. Chains, prologues and scalar operands, in reverse topological order: a light group joins the
   group that consumes all of its output when that group is a chain of the same kind (a
   memory-bound chain), a reduction (computed inside its loads), or when it only makes scalars.
4. Epilogues again: a chain that fans out and joins again (GELU reads x twice) is one group only
   after phase 3.
5. GEMM prologues, in reverse topological order: an element-wise group, its chain complete, joins
   the contraction that reads it as an operand where the contraction's template computes it
   inside its loads and the policy finds it pays.

A producer only ever joins a group that consumes all of its outputs, and no group's value leaves
and re-enters it, so every group stays convex and the grouped module stays acyclic.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Set

from .analysis import CONTRACTIONS, MATMUL, ROW_REDUCE, GraphCosts, describe, tensor_elements
from .decisions import Decision
from .graph import BROADCAST, INJECTIVE, OPAQUE, DataflowGraph
from .group_view import GroupView
from .policy import FusionPolicy

#: a light group whose every value has at most this many elements is recomputed inside its
#: consumer's kernel rather than launched on its own (a launch costs microseconds; this is nothing)
SCALAR_OPERAND_ELEMENTS = 1


class Partition:
    """Union of nodes into groups, with the decisions that made them."""

    def __init__(self, graph: DataflowGraph, costs: GraphCosts, policy: FusionPolicy):
        self.graph = graph
        self.costs = costs
        self.policy = policy
        self.group_of: List[int] = [node.index for node in graph.nodes]
        self.members: Dict[int, List[int]] = {node.index: [node.index] for node in graph.nodes}
        self.decisions: List[Decision] = []
        self._asked: Set[tuple] = set()  # (producer, consumer) member sets already decided

    # ---- group queries ---------------------------------------------------------------------
    def label(self, members: List[int]) -> str:
        names = [self.graph.nodes[i].name for i in sorted(members)]
        if len(names) <= 4:
            return "+".join(names)
        return f"{names[0]}+...+{names[-1]} ({len(names)} ops)"

    def op_names(self, members: List[int]) -> List[str]:
        """Binding names of the operators among ``members`` (the feedback loop's group keys)."""
        return [self.graph.nodes[i].var.name for i in sorted(members) if not self.graph.nodes[i].is_projection]

    def view(self, members: List[int]) -> GroupView:
        return GroupView(
            label=self.label(members),
            infos=[self.costs.node_info[i] for i in sorted(members)],
            cost=self.costs.group_cost(members),
            ops=tuple(self.op_names(members)),
        )

    def consumer_group(self, gid: int) -> Optional[int]:
        """The one group that reads every output of ``gid``; None if outputs escape or fan out."""
        targets: Set[int] = set()
        for i in self.members[gid]:
            node = self.graph.nodes[i]
            if node.escapes:
                return None
            targets |= {self.group_of[c] for c in node.consumers if self.group_of[c] != gid}
        return targets.pop() if len(targets) == 1 else None

    def has_complex(self, gid: int) -> bool:
        return any(self.costs.node_info[i].is_complex for i in self.members[gid])

    def max_pattern(self, gid: int) -> int:
        return max(self.graph.nodes[i].pattern for i in self.members[gid])

    def kinds(self, gid: int) -> str:
        return describe([self.costs.node_info[i].kind for i in sorted(self.members[gid])])

    # ---- merging ---------------------------------------------------------------------------
    def propose(self, rule_fn, producer: int, consumer: int) -> bool:
        """Ask the policy about merging group ``producer`` into group ``consumer``; merge if yes.
        The same question is asked once: a later phase does not repeat a refusal."""
        return self._propose((producer,), consumer, rule_fn)

    def propose_chain(self, first: int, middle: int, last: int) -> bool:
        """Ask the policy about merging three groups (attention's) into ``last``; merge if yes."""
        def decide(producer: GroupView, _consumer: GroupView, merged: GroupView):
            parts = [self.view(self.members[g]) for g in (first, middle, last)]
            return self.policy.attention_chain(*parts, producer, merged)
        return self._propose((first, middle), last, decide)

    def _propose(self, producers, consumer: int, decide) -> bool:
        """``decide(producer view, consumer view, merged view)`` on merging ``producers`` (as one
        producer) into ``consumer``, once per question; the groups merge if it fuses."""
        question = tuple(tuple(self.members[g]) for g in (*producers, consumer))
        if question in self._asked:
            return False
        self._asked.add(question)
        producer = sorted(i for g in producers for i in self.members[g])
        merged = sorted(producer + self.members[consumer])
        views = self.view(producer), self.view(self.members[consumer]), self.view(merged)
        # A group the feedback loop measured and split must not re-form, whatever the rules say.
        decision = self.policy.feedback_split(*views, self.op_names(merged)) if \
            self.policy.config.split_groups else None
        decision = decision or decide(*views)
        self.decisions.append(decision)
        if decision.fused:
            for gid in producers:
                for i in self.members.pop(gid):
                    self.group_of[i] = consumer
            self.members[consumer] = merged
        return decision.fused

    def run(self) -> "Partition":
        self._attach_projections()
        self._epilogues()
        self._attention()
        self._complex_pairs()
        self._chains()
        self._epilogues()  # phase 4: fan-out chains formed in phase 3
        self._gemm_prologues()
        return self

    def _attach_projections(self) -> None:
        """A TupleGetItem is part of its source's kernel, never a kernel of its own."""
        for node in self.graph.nodes:
            if node.is_projection:
                source = self.group_of[node.producers[0]]
                gid = self.group_of[node.index]
                for i in self.members.pop(gid):
                    self.group_of[i] = source
                self.members[source] = sorted(self.members[source] + [node.index])

    def _epilogues(self) -> None:
        for node in self.graph.nodes:
            if not self.costs.node_info[node.index].is_complex or node.pattern == OPAQUE:
                continue
            while True:
                gid = self.group_of[node.index]
                target = self.consumer_group(gid)
                if target is None or not self._is_epilogue(gid, target):
                    break
                if not self.propose(self.policy.epilogue, gid, target):
                    break

    def _is_epilogue(self, gid: int, target: int) -> bool:
        """Element-wise work applied to the group's output: one op (with its projections), or a
        group of element-wise and broadcast ops."""
        ops = [i for i in self.members[target] if not self.graph.nodes[i].is_projection]
        if len(ops) > 1:
            return self.max_pattern(target) <= BROADCAST
        consumer = self.graph.nodes[ops[0]]
        if consumer.pattern <= BROADCAST:
            return True
        if consumer.pattern != INJECTIVE or not self.policy.config.injective_epilogues:
            return False
        # TVM calls it injective; the TIR may show it is element-wise in the value we produce.
        info = self.costs.node_info[consumer.index]
        produced = {self.graph.nodes[i].var for i in self.members[gid]}
        args = list(consumer.call.args[1].fields)
        return any(args[k] in produced for k in info.pointwise_inputs) and all(
            arg not in produced for k, arg in enumerate(args) if k not in info.pointwise_inputs)

    def _attention(self) -> None:
        for node in self.graph.nodes:
            gid = self.group_of[node.index]
            if self.costs.node_info[node.index].kind != MATMUL or node.index != min(self.members[gid]):
                continue
            softmax = self.consumer_group(gid)
            if softmax is None or not self._is_reduction_group(softmax):
                continue
            output = self.consumer_group(softmax)
            anchor = None if output is None else self.view(self.members[output]).anchor()
            if anchor is not None and anchor.kind == MATMUL:
                self.propose_chain(gid, softmax, output)

    def _complex_pairs(self) -> None:
        for node in self.graph.nodes:
            gid = self.group_of[node.index]
            if not self.costs.node_info[node.index].is_complex or node.index != min(self.members[gid]):
                continue
            target = self.consumer_group(gid)
            if target is not None and self.has_complex(target):
                self.propose(self.policy.complex_pair, gid, target)

    def _chains(self) -> None:
        # Each light group is offered to its consumer once, when the walk reaches its last member.
        for node in reversed(self.graph.nodes):
            gid = self.group_of[node.index]
            if node.index != max(self.members[gid]) or self.max_pattern(gid) > INJECTIVE:
                continue
            target = self.consumer_group(gid)
            if target is None:
                continue
            if self.max_pattern(target) <= INJECTIVE:
                self.propose(self.policy.chain, gid, target)
            elif self.max_pattern(gid) <= BROADCAST and self._is_reduction_group(target):
                self.propose(self.policy.prologue, gid, target)
            elif self._is_scalar_operand(gid):
                self.propose(self.policy.scalar_operand, gid, target)
            elif self._prologue_candidate(gid) and self._contraction_operand(gid, target) is not None:
                continue  # phase 5, once the chains that feed it have formed
            else:
                self.decisions.append(Decision(
                    "prologue", self.label(self.members[gid]), self.label(self.members[target]), False,
                    f"a {self.kinds(target)} template loads its operands itself: no prologue fusion"))

    def _gemm_prologues(self) -> None:
        # After the chains, so that a light group is offered whole: a slice offered alone would
        # take the contraction while the concat that feeds it stayed apart, writing the whole
        # tensor (offered with its chain, the template declines the concat: .prologue_rule).
        for node in reversed(self.graph.nodes):
            gid = self.group_of[node.index]
            if node.index != max(self.members[gid]) or not self._prologue_candidate(gid):
                continue
            target = self.consumer_group(gid)
            operand = None if target is None else self._contraction_operand(gid, target)
            if operand is not None:
                self.propose(lambda p, c, m, k=operand: self.policy.gemm_prologue(p, c, m, k), gid, target)

    def _prologue_candidate(self, gid: int) -> bool:
        """Light work a contraction's loads could compute: element-wise and broadcast ops, and with
        ``layout_prologues`` injective ones (a transpose, a reshape, a slice: the loads read through
        the composed index instead of a copy being written and read back)."""
        pattern = self.max_pattern(gid)
        return pattern <= BROADCAST or (pattern <= INJECTIVE and self.policy.config.layout_prologues)

    def _contraction_operand(self, gid: int, target: int) -> Optional[int]:
        """Which argument (0 or 1) of ``target``'s contraction ``gid``'s one output is, when the
        contraction is its only reader in ``target`` (a GEMM prologue's candidate); else None."""
        anchor = self.view(self.members[target]).anchor()
        if anchor is None or anchor.kind not in CONTRACTIONS:
            return None
        nodes = [i for i in self.members[target] if self.costs.node_info[i] is anchor]
        outputs = [self.graph.nodes[i] for i in self.members[gid]
                   if any(self.group_of[c] == target for c in self.graph.nodes[i].consumers)]
        if len(nodes) != 1 or len(outputs) != 1:
            return None
        contraction, value = self.graph.nodes[nodes[0]], outputs[0].var
        if any(c != contraction.index for c in outputs[0].consumers):
            return None
        args = list(contraction.call.args[1].fields)
        positions = [k for k, arg in enumerate(args) if arg.same_as(value)]
        return positions[0] if len(positions) == 1 and positions[0] in (0, 1) else None

    def _is_scalar_operand(self, gid: int) -> bool:
        """A light group that only makes a few scalars (a clip bound, an epsilon)."""
        outputs = [self.graph.nodes[i] for i in self.members[gid]]
        return self.max_pattern(gid) <= INJECTIVE and all(
            0 <= tensor_elements(node.var.ty) <= SCALAR_OPERAND_ELEMENTS for node in outputs)

    def _is_reduction_group(self, gid: int) -> bool:
        kinds = {self.costs.node_info[i].kind for i in self.members[gid]}
        return ROW_REDUCE in kinds and not kinds & set(CONTRACTIONS)

    # ---- result ----------------------------------------------------------------------------
    def groups(self) -> List[List[int]]:
        """Groups in topological order of their first member."""
        return sorted((sorted(m) for m in self.members.values()), key=lambda m: m[0])
