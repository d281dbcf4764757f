"""What TVM's AMDGPU codegen allocated for each kernel, from the code object's AMDGPU metadata.

The ``hip`` module's ``inspect_source("asm")`` holds the section ``.amdgpu_metadata``:
``.vgpr_count`` (arch + AGPRs), ``.sgpr_count``, ``.agpr_count``, ``.vgpr_spill_count``,
``.sgpr_spill_count``, ``.group_segment_fixed_size`` (static LDS), ``.private_segment_fixed_size``
(scratch per work-item), ``.max_flat_workgroup_size``. Nothing outside TVM is needed to read them;
:func:`.kernel_resources.measure_amdgpu_asm` makes them :class:`~.kernel_resources.KernelResources`.
"""

from __future__ import annotations

import re
from typing import Dict, List

_META_KEYS = {
    ".name": "name", ".vgpr_count": "vgpr_count", ".sgpr_count": "sgpr_count",
    ".agpr_count": "agpr_count", ".vgpr_spill_count": "vgpr_spill_count",
    ".sgpr_spill_count": "sgpr_spill_count", ".group_segment_fixed_size": "group_segment_fixed_size",
    ".private_segment_fixed_size": "private_segment_fixed_size",
    ".max_flat_workgroup_size": "max_flat_workgroup_size", ".wavefront_size": "wavefront_size",
    ".uses_dynamic_stack": "uses_dynamic_stack",
}


def parse_amdgpu_metadata(asm: str) -> List[Dict[str, object]]:
    """The kernel entries of the ``.amdgpu_metadata`` block (``amdhsa.kernels``) of GCN assembly.

    A small reader of that YAML document: a kernel starts at ``  - `` under ``amdhsa.kernels:``;
    its own keys sit at one indentation level (the ``.args`` entries, deeper, are skipped).
    Values are ints where they parse, else strings. Also returns ``"target"`` (the gfx name).
    """
    start = asm.find(".amdgpu_metadata")
    end = asm.find(".end_amdgpu_metadata", start)
    if start < 0:
        return []
    text = asm[start:end if end > 0 else len(asm)]
    target = re.search(r"amdhsa\.target:\s+\S*?(gfx\w+)", text)
    kernels: List[Dict[str, object]] = []
    in_kernels = False
    key_indent = None
    for line in text.splitlines():
        if re.match(r"^amdhsa\.kernels:", line):
            in_kernels = True
            continue
        if re.match(r"^\S", line):  # next top-level key
            in_kernels = False
            continue
        if not in_kernels:
            continue
        item = re.match(r"^(\s*)- (\.\w+):\s*(.*)$", line)
        if item and (key_indent is None or len(item.group(1)) + 2 == key_indent):
            key_indent = len(item.group(1)) + 2
            kernels.append({"target": target.group(1) if target else ""})
            line = " " * key_indent + item.group(2) + ": " + item.group(3)
        field = re.match(r"^(\s*)(\.\w+):\s*(.*)$", line)
        if not field or not kernels or len(field.group(1)) != key_indent:
            continue
        if field.group(2) in _META_KEYS and field.group(3):
            value = field.group(3).strip()
            kernels[-1][_META_KEYS[field.group(2)]] = int(value) if re.fullmatch(r"-?\d+", value) else value
    return kernels
