#!/usr/bin/env python3
"""Check the ImplicitGemm cost model against a tile sweep, here (no GPU): how far its pick is from
the fastest tile measured, and its register estimates against ptxas.

``tile_sweep.py build --runtime`` leaves each schedule's cubin (TVM's nvcc flags) in
``<sweep>/cubin/<key>.bin.xz``; their ELF ``.nv.info`` holds the registers ptxas gave each kernel
(``EIATTR_REGCOUNT``), so no recompile is needed. ``tile_sweep.py run`` on the GPU adds each
schedule's time (``sweep_results.json``). Per case this prints the fastest tile, the model's pick
among the measured tiles (lowest modelled time, remodelled with today's ``GemmConfig`` on the
profile the sweep was built for) and its time against the fastest, and over all cases the geometric mean of that ratio; ``--registers``
adds each tile's estimated and ptxas registers::

    python bench/gemm_model_check.py --results results/sweep_results.json
    python bench/gemm_model_check.py --sweep .bundle_sweep --registers       # before the GPU run
    python bench/gemm_model_check.py --results $(find bench/results -name sweep_results.json)
    python bench/gemm_model_check.py --results $(find bench/results -name sweep_results.json) --set long_step_slowdown=0.3
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import lzma
import math
import struct
from pathlib import Path
from typing import Dict, List, Optional

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
def _model(profile: str):
    """``(limits, config)`` the rule ranks with on ``profile`` under ``hw.pass_context`` (cp.async
    on where the target has it)."""
    # pylint: disable=import-outside-toplevel
    import tvm_fusion_hw as hw
    from tvm_fusion_hw.schedules.base.limits import gpu_limits
    from tvm_fusion_hw.schedules.gemm.rule import ImplicitGemm

    target = hw.target(profile)
    with hw.pass_context(target):
        return gpu_limits(target), ImplicitGemm().get_config(target)


def remodelled_s(problem: dict, tile: dict, profile: str = "nvidia-h200",
                 changes: Optional[dict] = None) -> Optional[float]:
    """The tile's time under today's cost model on ``profile``, with ``changes`` to its ``GemmConfig``
    fields (None where it no longer fits)."""
    model = _remodelled(problem, tile, profile, changes)
    return None if model is None else model[0].time_s


def _problem_and_model(problem: dict, profile: str, changes: Optional[dict]):
    """``(GemmProblem, limits, config)``: a sweep's problem, and what the rule ranks it with."""
    # pylint: disable=import-outside-toplevel
    from tvm_fusion_hw.schedules.gemm import tiles

    limits, config = _model(profile)
    config = dataclasses.replace(config, **(changes or {}))
    fields = {**problem, "fetch_spatial_inner": tuple(problem["fetch_spatial_inner"]),
              "fetch_vector_inner": tuple(problem.get("fetch_vector_inner", (False, False))),
              "prologue_instructions": tuple(problem.get("prologue_instructions", (0, 0)))}
    return tiles.GemmProblem(**fields), limits, config


def tile_choice(tile) -> tuple:
    """What a tile chooses (a ``GemmTile`` or a sweep's tile dict), without what the model made of it
    (the opt-in code forms too: a sweep's staged-epilogue or one-barrier copy of a tile is not the
    tile the ranking offers without them)."""
    get = tile.get if isinstance(tile, dict) else lambda field, default=None: getattr(tile, field, default)
    return tuple(get(f, 0) for f in ("thread_rows", "thread_cols", "micro_rows", "micro_cols", "depth_step",
                                     "split_k", "prefetch", "vector_width", "async_stages", "warp_slow",
                                     "stage_epilogue", "one_barrier"))


def ranked_choices(problem: dict, profile: str, changes: Optional[dict] = None) -> set:
    """The choices of every tile the rule's ranking offers for ``problem``: a sweep also times
    hand-made tiles (``--tile-change``) that the ranking rules out (cp.async on a short K, 128-bit
    reads on a short loop), which the model's pick must not be."""
    # pylint: disable=import-outside-toplevel
    from tvm_fusion_hw.schedules.gemm import tiles

    return {tile_choice(t) for t in tiles.rank_tiles(*_problem_and_model(problem, profile, changes))}


def _remodelled(problem: dict, tile: dict, profile: str, changes: Optional[dict]):
    """``(GemmTile, the ranking's key)`` of a timed tile under today's model, or None."""
    # pylint: disable=import-outside-toplevel,protected-access
    from tvm_fusion_hw.schedules.gemm import tiles

    gemm, limits, config = _problem_and_model(problem, profile, changes)
    stages = tile.get("async_stages", 0)
    model = tiles._model(gemm, limits, config, tile["thread_rows"],
                         tile["thread_cols"], tile["micro_rows"], tile["micro_cols"], tile["depth_step"],
                         tile["split_k"], tile.get("prefetch", False), tile.get("vector_width", 1), stages > 1,
                         stages or None)
    if model is None:
        return None
    model = dataclasses.replace(model, warp_slow=tile.get("warp_slow", model.warp_slow),
                                warp_fast=tile.get("warp_fast", model.warp_fast))
    return model, tiles.rank_key(model)


def pick_against_fastest(case: dict, profile: str, changes: Optional[dict] = None):
    """``(fastest variant, the model's pick)`` among the case's timed tiles, each as ``(us, modelled
    s, variant)``, the model with ``changes`` to its config: the fastest of all, the pick among
    those the ranking offers (:func:`ranked_choices`); None with fewer than two tiles the model
    still takes, or none it offers."""
    timed = [(v["us"], _remodelled(case["problem"], v["tile"], profile, changes), v)
             for v in case["variants"] if v.get("tile") and v.get("us")]
    timed = [(us, model[1], v) for us, model, v in timed if model is not None]
    offered = ranked_choices(case["problem"], profile, changes)
    candidates = [row for row in timed if tile_choice(row[2]["tile"]) in offered]
    if len(timed) < 2 or not candidates:
        return None
    # the pick as the ranking orders tiles: modelled time, then its tie-breaks
    best, pick = min(timed, key=lambda row: row[0]), min(candidates, key=lambda row: row[1])
    return best, (pick[0], pick[1][0], pick[2])


def prefetch_pair_errors(case: dict, profile: str, changes: Optional[dict] = None) -> Dict[tuple, List[float]]:
    """The model's error on prefetching, from pairs of timed tiles that differ only in it (register
    prefetch or none, no cp.async): ``log(measured ratio / modelled ratio)`` of prefetch over none,
    keyed by ``(BK, "steps<=8" or "steps>8", "waves<1" or "waves>=1")`` of the tile without
    prefetch. Below 0: prefetch ran better against none than the model says."""
    timed = {}
    for v in case["variants"]:
        model = _remodelled(case["problem"], v["tile"], profile, changes) if v.get("tile") and v.get("us") else None
        if model is not None:
            timed[tile_choice(v["tile"])] = (v["us"], model[0])
    errors: Dict[tuple, List[float]] = {}
    for choice, (us, tile) in timed.items():
        if tile.prefetch or tile.async_stages:
            continue
        other = timed.get(choice[:6] + (True,) + choice[7:])
        if other is None:
            continue
        steps = -(-case["problem"]["depth"] // (tile.depth_step * tile.split_k))
        waves = tile.blocks / (tile.blocks_per_multiprocessor * _model(profile)[0].profile.multiprocessor_count)
        key = (tile.depth_step, "steps<=8" if steps <= 8 else "steps>8", "waves<1" if waves < 1 else "waves>=1")
        errors.setdefault(key, []).append(math.log((other[0] / us) / (other[1].time_s / tile.time_s)))
    return errors


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweep", type=Path, help="the tile_sweep build folder (its sweep.json, its cubins)")
    ap.add_argument("--results", type=Path, nargs="+", help="tile_sweep run's sweep_results.json, one or more")
    ap.add_argument("--registers", action="store_true", help="each tile's estimated and ptxas registers")
    ap.add_argument("--prefetch-pairs", action="store_true",
                    help="the model's error on register prefetch, by K step, steps and waves (prefetch_pair_errors)")
    ap.add_argument("--set", nargs="+", default=[], metavar="FIELD=VALUE",
                    help="GemmConfig fields changed for the remodelling (e.g. long_step_slowdown=0.3)")
    args = ap.parse_args()
    changes = {}
    for item in args.set:
        field, _, value = item.partition("=")
        try:
            changes[field] = float(value) if "." in value else int(value)
        except ValueError:
            ap.error(f"--set {item}: a number is expected after '='")
    if changes:
        # pylint: disable=import-outside-toplevel
        from tvm_fusion_hw.errors import FusionHWError
        from tvm_fusion_hw.schedules.base.config_changes import check_changes
        from tvm_fusion_hw.schedules.gemm.config import GemmConfig
        try:
            check_changes(GemmConfig, "ImplicitGemm", changes)
        except FusionHWError as err:
            ap.error(f"--set: {err}")
    if not args.results and not args.sweep:
        ap.error("give --results or --sweep")
    ratios, pairs = [], {}
    for path in args.results or [args.sweep / "sweep.json"]:
        found = json.loads(path.read_text())
        profile = found.get("profile") or "nvidia-h200"  # the early sweeps ran on the H200 alone
        if found.get("rule", "ImplicitGemm") != "ImplicitGemm":  # another template's sweep
            continue
        for case in found["cases"]:
            print(f"{case['case']} ({profile})")
            if args.registers and args.sweep:
                for v in (v for v in case["variants"] if v.get("tile")):
                    t = v["tile"]
                    print(f"  {v['name']:8s} {t['thread_rows']}x{t['thread_cols']} threads, {t['micro_rows']}x"
                          f"{t['micro_cols']} w{t.get('vector_width', 1)}, stages {t.get('async_stages', 0)}, "
                          f"prefetch {int(t.get('prefetch', False))}: estimated {t['registers_estimate']}, ptxas "
                          f"{ptxas_registers(args.sweep, v.get('cubin_key'))}")
            if args.prefetch_pairs:
                for key, errors in prefetch_pair_errors(case, profile, changes).items():
                    pairs.setdefault(key, []).extend(errors)
            compared = pick_against_fastest(case, profile, changes)
            if compared is None:
                continue
            best, pick = compared
            ratios.append(pick[0] / best[0])
            print(f"  fastest {best[2]['name']} {best[0]:.1f} us; model's pick {pick[2]['name']} {pick[0]:.1f} us "
                  f"({pick[0] / best[0]:.2f}x)")
    if ratios:
        mean = math.exp(sum(map(math.log, ratios)) / len(ratios))
        print(f"model's pick / fastest: geomean {mean:.3f}, worst {max(ratios):.2f} over {len(ratios)} cases")
    for key in sorted(pairs):
        errors = pairs[key]
        print(f"prefetch against none, BK {key[0]}, {key[1]}, {key[2]}: measured / modelled "
              f"{math.exp(sum(errors) / len(errors)):.2f}x over {len(errors)} pairs")


if __name__ == "__main__":
    main()
