"""Issue 14's batch-32 column against torch.compile + CUDA graphs, corpus-9's rows with this folder's
Winograd rows in their place (run from bench/results/2026-12-04-h200-winograd):
    python issue14_b32.py > issue14_b32.md
corpus-9: the plugin with CUDA graphs; the replaced rows: the plugin without CUDA graphs (the
conservative side), torch.compile + graphs in the same process as each."""
import json
import math

OLD = ["../2026-12-03-h200-corpus-9/out_b32A/results.json", "../2026-12-03-h200-corpus-9/out_b32B/results.json"]
NEW = ["res/time/results.json", "res2/time/results.json"]


def ratios(paths, key, batch=32):
    out = {}
    for path in paths:
        for row in json.load(open(path))["rows"]:
            t = row.get("times_s", {})
            if row["batch"] == batch and key in t and "compile_graphs" in t:
                out[row["model"].split(":")[-1]] = t["compile_graphs"] / t[key]
    return out


old, new = ratios(OLD, "hw_graph"), ratios(NEW, "hw")
merged = {**old, **{k: v for k, v in new.items() if k in old}}
geo = lambda d: math.exp(sum(map(math.log, d.values())) / len(d))  # noqa: E731
print("| model | corpus-9 (hw + graphs) | this folder (hw, Winograd) |")
print("| --- | ---: | ---: |")
for name in sorted(merged, key=merged.get):
    print(f"| {name} | {old[name]:.2f}x | {f'{new[name]:.2f}x' if name in new else '-'} |")
print(f"| geomean over {len(merged)} | {geo(old):.2f}x | {geo(merged):.2f}x |")
print(f"\nBehind torch.compile + CUDA graphs: {', '.join(f'{k} {v:.2f}x' for k, v in sorted(merged.items(), key=lambda kv: kv[1]) if v < 1)}")
