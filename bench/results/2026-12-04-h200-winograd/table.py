"""Print the Winograd table of a run: python table.py res/time/results.json [...]"""
import json
import sys

print("| model | batch | stock | hw (Winograd) | hw, winograd=off | Winograd / off | torch.compile + graphs | hw vs torch.compile | rel L2 vs onnxruntime (hw) |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for path in sys.argv[1:]:
    for row in json.load(open(path))["rows"]:
        t = row.get("times_s")
        if not t or "hw" not in t:
            print(f"| {row['model'].split(':')[-1]} | {row['batch']} | not run (the run's time budget) |")
            continue
        off = next(v for k, v in t.items() if k.endswith(".nowino"))
        tc = t.get("compile_graphs")
        hw = t["hw"]
        stock = f"{t['stock'] * 1e3:.3f}" if "stock" in t else "fails to build"
        ort = row.get("accuracy_onnxruntime", {}).get("hw", {}).get("rel_l2")
        print(f"| {row['model'].split(':')[-1]} | {row['batch']} | {stock} | {t['hw'] * 1e3:.3f} | "
              f"{off * 1e3:.3f} | {t['hw'] / off:.3f} | {'-' if tc is None else f'{tc * 1e3:.3f}'} | "
              f"{'-' if tc is None else f'{tc / hw:.2f}x'} | {'-' if ort is None else f'{ort:.1e}'} |")
