"""Shared-memory bank conflicts, simulated from the addresses a warp's lanes read.

Shared memory has :data:`BANKS` 4-byte banks and serves one 128-byte wavefront per clock: a warp's
load takes as many wavefronts as the most distinct words any one bank holds (lanes reading the
same word share a broadcast). The conv + pool tile model (:mod:`.conv_pool_tiles`) asks here how a
warp reads its threads' input windows (:func:`input_reads`, which also picks the row pitch that
avoids conflicts) and their weights (:func:`weight_reads`), and what vector width an address
stride allows (:func:`vector_alignment`). The answers are cached per arguments (a compile asks the
same few thousand times); :func:`clear_caches` forgets them.
"""

from __future__ import annotations

import functools
import math
from typing import List, Sequence, Tuple

BANKS = 32  # 4-byte banks (NVIDIA; AMD CDNA LDS has 32 too)


def _pieces(length: int, width: int) -> List[Tuple[int, int]]:
    """``(offset, width)`` of the vector loads covering ``length`` words from an address aligned
    to ``width`` words (the compiler vectorises as far as alignment allows)."""
    out, k = [], 0
    while k < length:
        w = width
        while w > length - k or k % w:
            w //= 2
        out.append((k, w))
        k += w
    return out


@functools.lru_cache(maxsize=4096)
def vector_alignment(*strides: int) -> int:
    """Vector width (words) the compiler can prove for addresses that step by ``strides``."""
    g = 0
    for stride in strides:
        g = math.gcd(g, stride)
    return next(w for w in (4, 2, 1) if g % w == 0)


def _load_wavefronts(starts: Sequence[int], pieces: Sequence[Tuple[int, int]], banks: int) -> int:
    """Shared-memory wavefronts of one warp reading ``pieces`` from per-lane word ``starts``:
    per 32 lanes, as many as the most distinct words any bank holds (equal words are one
    broadcast). So 32 lanes reading 16 distinct bytes each take at least 4, and a 128-bit
    broadcast takes 1."""
    total = 0
    widest = max((width for _, width in pieces), default=0)
    for first in range(0, len(starts), banks):
        group = sorted(set(starts[first:first + banks]))  # lanes at one address read alike
        if widest <= banks and all(b - a >= widest for a, b in zip(group, group[1:])):
            # No two lanes' pieces overlap, so every word is distinct and a bank holds one of
            # each lane whose start lies in the ``width`` banks up to it: the fullest such window
            # of banks (cyclic) sets a piece's wavefronts, whatever its offset.
            per_bank = [0] * banks
            for start in group:
                per_bank[start % banks] += 1
            cyclic = per_bank + per_bank
            fullest = {}
            for _, width in pieces:
                if width not in fullest:
                    windows = zip(*(cyclic[k:k + banks] for k in range(width)))
                    fullest[width] = max(map(sum, windows))
                total += fullest[width]
            continue
        for offset, width in pieces:
            per_bank = [0] * banks
            for word in {s + k for s in group for k in range(offset, offset + width)}:
                per_bank[word % banks] += 1
            total += max(per_bank)
    return total


@functools.lru_cache(maxsize=None)
def _row_reads(  # pylint: disable=too-many-arguments
    warp: int, pht: int, pwt: int, row_offset: int, col_step: int, win_cols: int, align: int,
) -> Tuple[int, int]:
    """``(LDS instructions, wavefronts)`` of a warp of a ``pht x pwt`` thread grid (along W
    fastest) reading one row of the threads' input windows, ``win_cols`` words from an address
    aligned to ``align`` words, where threads lie ``row_offset`` words apart along H and
    ``col_step`` along W."""
    starts = [((t % (pht * pwt)) // pwt) * row_offset + (t % pwt) * col_step for t in range(warp)]
    pieces = _pieces(win_cols, align)
    return len(pieces), _load_wavefronts(starts, pieces, BANKS)


@functools.lru_cache(maxsize=None)
def input_reads(  # pylint: disable=too-many-arguments
    warp: int, pht: int, pwt: int, step: Tuple[int, int], win_cols: int, in_cols: int,
) -> Tuple[int, int, int]:
    """How a warp reads one row of its threads' input windows: ``(row pitch, LDS instructions,
    wavefronts)`` for the best pitch from ``in_cols`` up (the padding that removes bank conflicts
    while keeping the rows vectorisable). ``step`` is the input offset between neighbouring
    threads along H (rows) and W (columns)."""
    # A thread row's words lie within ``span`` of its first. Rows further apart than that share
    # no word, so the banks see only their offset modulo BANKS: all such offsets with one residue
    # cost the same, and one of them is simulated.
    span = (min(pwt, warp) - 1) * step[1] + win_cols - 1
    # Only one warp's lanes matter: a grid wider than a warp, or taller than a warp fills, places
    # them as the capped grid does.
    lanes_w = min(pwt, warp)
    lanes_h = min(pht, -(-warp // lanes_w))
    best, simulated = None, set()
    align = vector_alignment(step[1])
    # in_cols, then the wider pitches that keep the rows' vector alignment
    for pitch in [in_cols] + [p for p in range(in_cols + 1, in_cols + BANKS) if p % align == 0]:
        # Conflicts repeat with the pitch modulo the banks, alignment modulo 4.
        modelled = BANKS + pitch % BANKS
        row_offset = step[0] * modelled
        if row_offset > span:
            row_offset = row_offset % BANKS + BANKS * (span // BANKS + 1)
        reads = (row_offset, vector_alignment(modelled, step[1]))
        if reads in simulated:
            continue  # reads as a narrower pitch did, which wins the tie
        simulated.add(reads)
        instructions, wavefronts = _row_reads(warp, lanes_h, lanes_w, reads[0], step[1], win_cols,
                                              reads[1])
        cost = (wavefronts, instructions, pitch)
        if best is None or cost < best:
            best = cost
    wavefronts, instructions, pitch = best  # type: ignore[misc]
    return pitch, instructions, wavefronts


@functools.lru_cache(maxsize=4096)
def weight_reads(
    warp: int, group_lanes: int, group_stride: int, run: int, align: int
) -> Tuple[int, int]:
    """``(LDS instructions, wavefronts)`` of a warp reading one channel's ``run`` contiguous weights
    per thread, where lanes of one channel group share the address and groups lie
    ``group_stride`` words apart."""
    starts = [(t // group_lanes) * group_stride for t in range(warp)]
    pieces = _pieces(run, align)
    return len(pieces), _load_wavefronts(starts, pieces, BANKS)


def clear_caches() -> None:
    """Forget every simulated answer, so that the next one pays its whole cost."""
    for cached in (input_reads, _row_reads, weight_reads, vector_alignment):
        cached.cache_clear()
