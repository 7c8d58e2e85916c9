"""The CMake flag sets llama-server is built with, in the order they are tried, and the cache key.

Pure: no I/O. `GGML_NATIVE=ON` alone compiles ggml's AMX kernels on a CPU that has AMX
(`amx_tile amx_int8 amx_bf16` in /proc/cpuinfo), and those kernels crash on the local models
(segfault in `ggml_backend_amx_mul_mat` at the first matmul). So the first choice keeps the
native flags but turns the AMX instructions off in both compilers: ggml compiles its AMX code
only when `__AMX_INT8__` is defined, and GCC's explicit `-mno-*` options win over
`-march=native` whatever their order. If that binary still fails its smoke test, one portable
set (AVX2, FMA, F16C, no AVX-512, no AMX) is tried. The flags are part of the cache directory's
name, so a binary built with other flags is never reused.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

# What every build shares: only the server target, no web UI download (fails offline),
# statically linked so the binary moves as one file.
COMMON_CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DBUILD_SHARED_LIBS=OFF",
)

_NO_AMX = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
_X86 = ("x86_64", "amd64", "i686", "i386")


@dataclass(frozen=True, slots=True)
class FlagSet:
    name: str  # short, part of the cache key: "native-noamx", "avx2", "native", "portable"
    summary: str  # one line for the progress output
    cmake_flags: tuple[str, ...]

    @property
    def key(self) -> str:
        """`native-noamx-1a2b3c4d`: the name and a digest of every flag, for the cache path."""
        digest = hashlib.sha256("\n".join(self.cmake_flags).encode()).hexdigest()[:8]
        return f"{self.name}-{digest}"

    def describe(self) -> str:
        return f"{self.name} ({self.summary})"


def flag_sets(arch: str) -> tuple[FlagSet, ...]:
    """The flag sets to try on `arch` (`platform.machine()`), best first; the last is the
    conservative fallback."""
    if arch.lower() in _X86:
        return (
            FlagSet("native-noamx", "GGML_NATIVE=ON without AMX kernels: " + _NO_AMX, (
                *COMMON_CMAKE_FLAGS, "-DGGML_NATIVE=ON",
                f"-DCMAKE_C_FLAGS={_NO_AMX}", f"-DCMAKE_CXX_FLAGS={_NO_AMX}",
            )),
            FlagSet("avx2", "GGML_NATIVE=OFF, AVX2+FMA+F16C, no AVX-512, no AMX", (
                *COMMON_CMAKE_FLAGS, "-DGGML_NATIVE=OFF",
                "-DGGML_AVX=ON", "-DGGML_AVX2=ON", "-DGGML_FMA=ON", "-DGGML_F16C=ON",
                "-DGGML_BMI2=ON", "-DGGML_AVX512=OFF", "-DGGML_AMX_TILE=OFF",
                "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_BF16=OFF",
            )),
        )
    # Other architectures (aarch64 ...) have no AMX; the fallback drops the native tuning.
    return (
        FlagSet("native", "GGML_NATIVE=ON", (*COMMON_CMAKE_FLAGS, "-DGGML_NATIVE=ON")),
        FlagSet("portable", "GGML_NATIVE=OFF, the compiler's baseline",
                (*COMMON_CMAKE_FLAGS, "-DGGML_NATIVE=OFF")),
    )


def server_dir_name(commit: str, flags: FlagSet, machine: str) -> str:
    """The cache directory of one build: llama.cpp commit, flag set and CPU all in the key."""
    return f"llama-server-{commit}-{flags.key}-{machine}"
