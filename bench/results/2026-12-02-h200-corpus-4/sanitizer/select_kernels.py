"""The kernel lists of this run's sanitizer call (sanitizer/*.txt), from the sanitize bundle's
manifest and the racecheck logs of ../2026-12-02-h200-corpus-3: memcheck over every kernel in four
parts; racecheck over the batch-1 kernels that run did not reach (matched by their source model,
batch and kernel name) and over the batch-32-only kernels of the templates other than ImplicitGemm.

    python select_kernels.py .bundle_san/manifest.json
"""
import json
import lzma
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
EARLIER = HERE.parent.parent / "2026-12-02-h200-corpus-3"
LINE = re.compile(r"\] ok\s+(\w+)\s+(k\d+_\S+)\s+\((\S+) b(\d+) (\S+)(?: \+\d+)?\)")

checked = set()
for log in ("racecheck.log.xz", "race2.log.xz", "race3.log.xz"):
    for line in lzma.open(EARLIER / log, "rt"):
        if (m := LINE.search(line)):
            checked.add((m.group(3), int(m.group(4)), m.group(5)))
kernels = json.load(open(sys.argv[1]))["kernels"]
size = lambda n: kernels[n]["arg_bytes"]  # noqa: E731
batch1 = [n for n, k in kernels.items() if any(s["batch"] == 1 for s in k["sources"])]
race_b1 = sorted((n for n in batch1 if not any((s["model"], s["batch"], s["kernel"]) in checked
                                               for s in kernels[n]["sources"])), key=size)
race_b32 = sorted((n for n in kernels if n not in batch1 and kernels[n]["rule"] != "ImplicitGemm"), key=size)
parts = {**{f"mem{i}": sorted(kernels, key=size)[i::4] for i in range(4)},
         **{f"raceb1_{i}": race_b1[i::4] for i in range(4)}, **{f"raceb32_{i}": race_b32[i::3] for i in range(3)}}
for name, names in parts.items():
    (HERE / f"{name}.txt").write_text(" ".join(names))
    print(name, len(names))
