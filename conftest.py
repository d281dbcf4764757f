"""pytest set-up shared by every test: the `gpu` marker skips where no GPU is present."""

import pytest


def _has_cuda_gpu() -> bool:
    try:
        import tvm  # pylint: disable=import-outside-toplevel

        return bool(tvm.cuda(0).exist)
    except Exception:  # pylint: disable=broad-except
        return False


def pytest_collection_modifyitems(config, items):  # pylint: disable=unused-argument
    if _has_cuda_gpu():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU with a CUDA-enabled TVM")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
