"""Build the optional compiled kernel (plain C, no NumPy headers, loaded through ctypes).

The fused quantize/dequantize loops live in ``src/qlinear/core/_native.c``. If no C compiler is
available the build is skipped (``optional=True``) and qlinear falls back to its NumPy path,
which computes bit-identical results, only slower (``qlinear.core.native.available()`` tells).

No -march flag: the wheel runs on any x86-64. On x86-64 (QL_X86_CLONES) ``_native.c`` compiles its quantize /
dequantize entries three times, baseline, ``target("avx2,fma")`` and ``target("avx512f,avx512bw,avx512dq,
avx512vl")``, and picks one at run time with ``__builtin_cpu_supports`` (``QLINEAR_SIMD`` forces a lower one);
``_intkernels.c`` uses GCC target_clones.
"""
import platform

from setuptools import Extension, setup

args = ["-O3", "-fno-math-errno", "-fno-trapping-math", "-ffp-contract=off", "-std=c11"]
if platform.machine().lower() in ("x86_64", "amd64"):
    args.append("-DQL_X86_CLONES")

setup(
    ext_modules=[
        Extension(
            "qlinear.core._native",
            sources=["src/qlinear/core/_native.c"],
            extra_compile_args=args,
            optional=True,
        ),
        Extension(  # integer simulation: requantization in every mode, depthwise convolution (qlinear/kernels)
            "qlinear.kernels._intkernels",
            sources=["src/qlinear/kernels/_intkernels.c"],
            extra_compile_args=args,
            optional=True,
        ),
        Extension(  # JSON layout of large encodings files (qlinear/encodings/_json.py)
            "qlinear.encodings._jsonfast",
            sources=["src/qlinear/encodings/_jsonfast.c"],
            extra_compile_args=["-O3", "-std=c11"],
            optional=True,
        ),
    ]
)
