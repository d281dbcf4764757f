"""subset_bundle.py BUNDLE OUT MODEL...: a copy of BUNDLE with only these models' entries, libraries
and fusion reports (when a whole bundle and the working tree exceed what a device call carries).
Every cubin stays: their names hash the CUDA source, which the manifest does not keep."""
import json, shutil, sys
from pathlib import Path
if len(sys.argv) < 4:
    sys.exit("usage: subset_bundle.py BUNDLE OUT MODEL...")
src, out, models = Path(sys.argv[1]), Path(sys.argv[2]), set(sys.argv[3:])
if out.resolve() == src.resolve() or src.resolve() in out.resolve().parents:
    sys.exit("subset_bundle: OUT must be another folder than BUNDLE")
manifest = json.loads((src / "manifest.json").read_text())
entries = [e for e in manifest["entries"] if e["model"] in models]
missing = models - {e["model"] for e in entries}
if missing:
    sys.exit(f"subset_bundle: not in {src}: {' '.join(sorted(missing))}")
if out.exists():
    shutil.rmtree(out)
shutil.copytree(src, out, ignore=lambda d, names: [n for n in names if n.startswith("corpus_")]
                if Path(d) == src else [])
for e in entries:
    for v in e["variants"]:
        shutil.copy2(src / v["stored"], out / v["stored"])
    if e.get("report"):
        shutil.copy2(src / e["report"], out / e["report"])
manifest["entries"] = entries
(out / "manifest.json").write_text(json.dumps(manifest, indent=1))
print(len(entries), "entries")
