"""TVM's C++ log kept off the terminal while explain builds, and summed up in a note.

TVM's native code logs warnings straight to file descriptor 2 ("Unable to detect ROCm version",
"Unroll hint get ignore at CodeGenLLVM backend", dozens a ROCm build), around the progress bar
and over the summary. While a plan is made, fd 2 goes to a temporary file; what was logged
becomes one note of that plan: how many lines, the most frequent messages. The progress bar
writes to its own copy of the terminal's descriptor (:mod:`tvm_fusion_hw.progress`).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from collections import Counter


@contextlib.contextmanager
def native_log_to(notes: list[str], label: str):
    """TVM's C++ log lines (written to fd 2: "Unroll hint get ignore ...", "Cannot get maximum
    number of threads for AMD codegen") kept off the terminal and summed up in one note."""
    try:
        fd = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # stderr is no file (a test's capture): leave it
        yield
        return
    sys.stderr.flush()
    saved = os.dup(fd)
    with tempfile.TemporaryFile() as log:
        os.dup2(log.fileno(), fd)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, fd)
            os.close(saved)
            log.seek(0)
            lines = [ln.strip() for ln in log.read().decode(errors="replace").splitlines() if ln.strip()]
    said = Counter(re.sub(r"^\[[\d:.]+\]\s*\S+:\d+:\s*", "", ln) for ln in lines)
    if said:
        top = "; ".join(f"{text[:90]} (x{count})" for text, count in said.most_common(3))
        notes.append(f"TVM logged {len(lines)} lines while building for {label}: {top}")
