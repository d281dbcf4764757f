"""merge_bundles.py A B OUT: bundle B merged into a copy of bundle A (the same runtime and commit): libraries, cubins, manifest entries (one runner call, one PyTorch warm-up)."""
import json, shutil, sys
from pathlib import Path
a, b, out = map(Path, sys.argv[1:4])
if out.exists(): shutil.rmtree(out)
shutil.copytree(a, out, symlinks=True)
for f in b.iterdir():
    if f.name in ("manifest.json", "tvm_runtime", "wheels", "builders", "run.py") or f.is_dir() and f.name != "cubin":
        continue
    if f.is_dir():
        for g in f.iterdir():
            shutil.copy2(g, out / f.name / g.name)
    elif not (out / f.name).exists():
        shutil.copy2(f, out / f.name)
ma, mb = json.loads((a / "manifest.json").read_text()), json.loads((b / "manifest.json").read_text())
for k in ("profile", "target", "commit", "tvm_version"):
    assert ma[k] == mb[k], k
ma["entries"] += mb["entries"]
(out / "manifest.json").write_text(json.dumps(ma, indent=1))
print(len(ma["entries"]), "entries")
