"""What the fusion policy sees of a (candidate) group: its label, its ops' facts and its cost."""

from __future__ import annotations

import dataclasses
from typing import List, Optional, Tuple

from .analysis import FuncInfo, GroupCost


@dataclasses.dataclass
class GroupView:
    """What the policy sees of a (candidate) group."""

    label: str
    infos: List[FuncInfo]
    cost: GroupCost
    #: binding names of its operators (projections left out): the key that finds it again
    ops: Tuple[str, ...] = ()

    def anchor(self) -> Optional[FuncInfo]:
        """The group's complex op (the one a template is chosen for), if any."""
        complex_ops = [i for i in self.infos if i.is_complex]
        return max(complex_ops, key=lambda i: i.flops) if complex_ops else None
