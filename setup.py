"""Packaging for tvm_fusion_hw.

The repository keeps schedules/, targets/ and models/ at the top level (one concept per folder);
they install inside the package as tvm_fusion_hw.schedules, tvm_fusion_hw.models and the package
data tvm_fusion_hw/targets/*.json, so the installed namespace stays one package.
"""

from setuptools import find_packages, setup

# tvm_fusion_hw/ and its subpackages, then schedules/ (and its subpackages) mapped inside it
PACKAGES = find_packages(include=["tvm_fusion_hw", "tvm_fusion_hw.*"]) + [
    "tvm_fusion_hw." + name for name in find_packages(include=["schedules", "schedules.*"])
] + ["tvm_fusion_hw.models", "tvm_fusion_hw.models.corpus", "tvm_fusion_hw.targets"]

setup(
    name="tvm_fusion_hw",
    version="0.1.0",
    description="Hardware-aware operator fusion for Apache TVM (Relax): roofline, registers, shared memory",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.9",
    packages=PACKAGES,
    package_dir={
        "tvm_fusion_hw": "tvm_fusion_hw",
        "tvm_fusion_hw.schedules": "schedules",
        "tvm_fusion_hw.models": "models",
        "tvm_fusion_hw.targets": "targets",
    },
    package_data={"tvm_fusion_hw.targets": ["*.json"], "tvm_fusion_hw.fusion": ["calibration_data/*.json"],
                  "tvm_fusion_hw.models.corpus": ["index.json", "graphs/*.onnx.xz"]},
    # rich: the progress bar and the terminal tables of `compile` and `explain`
    install_requires=["apache-tvm>=0.27,<0.28", "numpy", "onnx", "rich>=13"],
    extras_require={
        # matplotlib: the bundle runner's results.png (tests/test_runner_report.py draws it)
        "test": ["pytest", "pytest-xdist", "onnxruntime", "hypothesis", "matplotlib"],
        # register counts exactly as TVM's default NVRTC load-time compile makes them (else nvcc)
        "nvrtc": ["cuda-bindings"],
    },
    entry_points={"console_scripts": ["tvm-fusion-hw=tvm_fusion_hw.cli:main"]},
)
