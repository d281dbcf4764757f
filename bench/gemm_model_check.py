#!/usr/bin/env python3
"""Check the ImplicitGemm cost model against a tile sweep, here (no GPU): how far its pick is from
the fastest tile measured, and its register estimates against ptxas.

``tile_sweep.py build --runtime`` leaves each schedule's cubin (TVM's nvcc flags) in
``<sweep>/cubin/<key>.bin.xz``; their ELF ``.nv.info`` holds the registers ptxas gave each kernel
(``EIATTR_REGCOUNT``), so no recompile is needed. ``tile_sweep.py run`` on the GPU adds each
schedule's time (``sweep_results.json``). Per case this prints the fastest tile, the model's pick
among the measured tiles (lowest modelled time, remodelled with today's ``GemmConfig``) and its
time against the fastest, and over all cases the geometric mean of that ratio; ``--registers``
adds each tile's estimated and ptxas registers::

    python bench/gemm_model_check.py --sweep .bundle_sweep --results results/sweep_results.json
    python bench/gemm_model_check.py --sweep .bundle_sweep --registers       # before the GPU run
"""

from __future__ import annotations

import argparse
import functools
import json
import lzma
import math
import struct
from pathlib import Path
from typing import Dict, Optional

_EIATTR_REGCOUNT = 0x2F


def cubin_registers(blob: bytes) -> Dict[int, int]:
    """``{symbol index: registers}`` from the first ELF in a fatbin (or a cubin)."""
    elf = blob[blob.find(b"\x7fELF"):]
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", elf, shoff + i * shentsize) for i in range(shnum)]
    names = sections[shstrndx][4]
    found = {}
    for name_at, _, _, _, offset, size, *_ in sections:
        name = elf[names + name_at:elf.index(b"\0", names + name_at)]
        if not name.startswith(b".nv.info"):
            continue
        data, at = elf[offset:offset + size], 0
        while at + 4 <= len(data):  # records: format, attribute, u16 size, payload
            fmt, attr = data[at], data[at + 1]
            if fmt != 0x04:  # fixed-size records carry no payload size
                at += 4
                continue
            length, = struct.unpack_from("<H", data, at + 2)
            if attr == _EIATTR_REGCOUNT:
                symbol, count = struct.unpack_from("<II", data, at + 4)
                found[symbol] = count
            at += 4 + length
    return found


def ptxas_registers(sweep: Path, key: Optional[str]) -> Optional[int]:
    """Registers of the kernel in one schedule's cubin (the most of its kernels), None if absent."""
    path = sweep / "cubin" / f"{key}.bin.xz"
    if not key or not path.exists():
        return None
    counts = cubin_registers(lzma.decompress(path.read_bytes()))
    return max(counts.values()) if counts else None


@functools.lru_cache(maxsize=None)
def _h200_model():
    """``(limits, config)`` the rule ranks with on the H200 under ``hw.pass_context`` (cp.async on)."""
    # pylint: disable=import-outside-toplevel
    import tvm_fusion_hw as hw
    from tvm_fusion_hw.schedules.base.limits import gpu_limits
    from tvm_fusion_hw.schedules.gemm.rule import ImplicitGemm

    target = hw.target("nvidia-h200")
    with hw.pass_context(target):
        return gpu_limits(target), ImplicitGemm().get_config(target)


def remodelled_s(problem: dict, tile: dict) -> Optional[float]:
    """The tile's time under today's cost model (None where it no longer fits)."""
    # pylint: disable=import-outside-toplevel,protected-access
    from tvm_fusion_hw.schedules.gemm import tiles

    limits, config = _h200_model()
    fields = {**problem, "fetch_spatial_inner": tuple(problem["fetch_spatial_inner"]),
              "fetch_vector_inner": tuple(problem.get("fetch_vector_inner", (False, False)))}
    model = tiles._model(tiles.GemmProblem(**fields), limits, config, tile["thread_rows"],
                         tile["thread_cols"], tile["micro_rows"], tile["micro_cols"], tile["depth_step"],
                         tile["split_k"], tile["prefetch"], tile["vector_width"], tile["async_stages"] > 1,
                         tile["async_stages"] or None)
    return None if model is None else model.time_s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweep", required=True, type=Path, help="the tile_sweep build folder")
    ap.add_argument("--results", type=Path, help="tile_sweep run's sweep_results.json")
    ap.add_argument("--registers", action="store_true", help="each tile's estimated and ptxas registers")
    args = ap.parse_args()
    cases = json.loads(((args.results or args.sweep / "sweep.json")).read_text())["cases"]
    ratios = []
    for case in cases:
        tiles = [v for v in case["variants"] if v.get("tile")]
        print(case["case"])
        if args.registers:
            for v in tiles:
                t = v["tile"]
                print(f"  {v['name']:8s} {t['thread_rows']}x{t['thread_cols']} threads, {t['micro_rows']}x"
                      f"{t['micro_cols']} w{t['vector_width']}, stages {t['async_stages']}, prefetch "
                      f"{int(t['prefetch'])}: estimated {t['registers_estimate']}, ptxas "
                      f"{ptxas_registers(args.sweep, v.get('cubin_key'))}")
        timed = [(v["us"], remodelled_s(case["problem"], v["tile"]), v) for v in tiles if v.get("us")]
        timed = [row for row in timed if row[1] is not None]
        if len(timed) < 2:
            continue
        best = min(timed, key=lambda row: row[0])
        pick = min(timed, key=lambda row: row[1])
        ratios.append(pick[0] / best[0])
        print(f"  fastest {best[2]['name']} {best[0]:.1f} us; model's pick {pick[2]['name']} {pick[0]:.1f} us "
              f"({pick[0] / best[0]:.2f}x)")
    if ratios:
        mean = math.exp(sum(map(math.log, ratios)) / len(ratios))
        print(f"model's pick / fastest: geomean {mean:.3f}, worst {max(ratios):.2f} over {len(ratios)} cases")


if __name__ == "__main__":
    main()
