#!/usr/bin/env bash
# Install the system packages that CUDA and ROCm *builds* need on a CPU-only Debian 12 machine.
#
#   lld-22            /usr/bin/ld.lld-22: TVM's ROCm codegen links each code object with ld.lld
#                     (tvm/support/rocm.py: find_lld tries ld.lld-<LLVM major>, then ld.lld).
#                     TVM 0.27's LLVM is 22; lld 14 (Debian's default `lld`) fails with
#                     "unknown abi version". Debian 12 ships lld-22 from bookworm-security.
#   rocm-device-libs  AMD device-library bitcode in /usr/lib/<multiarch>/amdgcn/bitcode; TVM reads
#                     it from $ROCM_PATH/amdgcn/bitcode (tvm_fusion_hw.toolchain sets ROCM_PATH).
#   chromium          Debian's headless-capable browser: tests/test_explain.py opens the page of
#                     `tvm-fusion-hw explain --html` from a file in it (tvm_fusion_hw/explain/browser.py,
#                     the DevTools protocol over a pipe), checks it loads without console errors or
#                     requests, and takes a screenshot; scripts/explain-screenshot.py makes docs/'s.
#                     Without it that test skips. A browser build downloaded at run time (playwright
#                     install) cannot be fetched here; Debian's package can.
#
# CUDA builds need no package: tvm.compile keeps CUDA source in the module. nvcc (for ptxas
# register/spill feedback) comes with the image (/usr/local/cuda*/bin); it is only reported here.
#
# Idempotent: apt is skipped when every package is already installed. Run as root or with sudo.
set -euo pipefail

PACKAGES=(lld-22 rocm-device-libs chromium)
LLD_MAJOR=22

say() { printf 'install-system-deps: %s\n' "$*"; }
die() { printf 'install-system-deps: error: %s\n' "$*" >&2; exit 1; }

missing=()
for pkg in "${PACKAGES[@]}"; do
    status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
    [[ "$status" == "install ok installed" ]] || missing+=("$pkg")
done

if ((${#missing[@]})); then
    SUDO=()
    if ((EUID != 0)); then
        command -v sudo >/dev/null || die "need root (or sudo) to install: ${missing[*]}"
        SUDO=(sudo)
    fi
    say "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    log=$(mktemp)
    trap 'rm -f "$log"' EXIT
    quiet() { "$@" >"$log" 2>&1 || { cat "$log" >&2; die "failed: $*"; }; }
    quiet "${SUDO[@]}" apt-get update
    if ! apt-cache show "${missing[@]}" >/dev/null 2>&1; then
        die "apt cannot find ${missing[*]} (lld-22 and chromium are in Debian 12's bookworm-security suite; is it in the apt sources?)"
    fi
    quiet "${SUDO[@]}" apt-get install -y --no-install-recommends "${missing[@]}"
else
    say "already installed: ${PACKAGES[*]}"
fi

# Check what TVM will look for.
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo "$(uname -m)-linux-gnu")
bitcode="/usr/lib/${multiarch}/amdgcn/bitcode"
[[ -f "${bitcode}/ocml.bc" ]] || die "no ROCm bitcode at ${bitcode}"
lld=$(command -v "ld.lld-${LLD_MAJOR}" || true)
[[ -n "$lld" ]] || die "ld.lld-${LLD_MAJOR} is not on PATH"
"$lld" --version | grep -q "LLD ${LLD_MAJOR}\." || die "$lld is not LLD ${LLD_MAJOR}"
say "ROCm: ROCM_PATH=/usr/lib/${multiarch} (bitcode ok), linker ${lld}"

nvcc=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc /usr/local/cuda-*/bin/nvcc 2>/dev/null | head -n1 || true)
if [[ -n "$nvcc" ]]; then
    say "CUDA: nvcc at ${nvcc} ($("$nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'))"
else
    say "CUDA: nvcc not found (only needed for ptxas register/spill feedback)"
fi

browser=$(command -v chromium || true)
if [[ -n "$browser" ]]; then
    say "browser: ${browser} ($("$browser" --version 2>/dev/null | head -n1))"
else
    say "browser: chromium not on PATH (the explain page's browser test will skip)"
fi
