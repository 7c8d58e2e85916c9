"""The llama-server flag sets and their cache key (pure)."""

from __future__ import annotations

from backends.local.flags import COMMON_CMAKE_FLAGS, flag_sets, server_dir_name


def flags_of(arch: str) -> dict[str, tuple[str, ...]]:
    return {flags.name: flags.cmake_flags for flags in flag_sets(arch)}


def test_x86_keeps_native_flags_but_never_the_amx_kernels() -> None:
    first, _fallback = flag_sets("x86_64")
    assert first.name == "native-noamx" and "-DGGML_NATIVE=ON" in first.cmake_flags
    for variable in ("CMAKE_C_FLAGS", "CMAKE_CXX_FLAGS"):  # both compilers, or ggml-cpu's C++
        [value] = [f for f in first.cmake_flags if f.startswith(f"-D{variable}=")]
        assert set(value.split("=", 1)[1].split()) == {
            "-mno-amx-tile", "-mno-amx-int8", "-mno-amx-bf16"}


def test_the_x86_fallback_is_portable_avx2_without_avx512_or_amx() -> None:
    fallback = flag_sets("x86_64")[-1]
    assert fallback.name == "avx2"
    assert "-DGGML_NATIVE=OFF" in fallback.cmake_flags and "-DGGML_AVX2=ON" in fallback.cmake_flags
    assert {"-DGGML_AVX512=OFF", "-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF",
            "-DGGML_AMX_BF16=OFF"} <= set(fallback.cmake_flags)
    assert not any("native" in flag.lower() and "OFF" not in flag for flag in fallback.cmake_flags)


def test_every_set_builds_only_the_server_without_downloads() -> None:
    for arch in ("x86_64", "aarch64"):
        for flags in flag_sets(arch):
            assert flags.cmake_flags[: len(COMMON_CMAKE_FLAGS)] == COMMON_CMAKE_FLAGS
            assert "-DLLAMA_USE_PREBUILT_UI=OFF" in flags.cmake_flags


def test_other_architectures_get_no_x86_only_compiler_options() -> None:
    assert list(flags_of("aarch64")) == ["native", "portable"]
    assert not any("-mno-amx" in f for fs in flags_of("aarch64").values() for f in fs)
    assert flags_of("AMD64") == flags_of("x86_64")


def test_the_cache_key_changes_with_any_flag() -> None:
    native, fallback = flag_sets("x86_64")
    assert native.key != fallback.key and native.key.startswith("native-noamx-")
    assert native.key == flag_sets("x86_64")[0].key  # stable across calls
    name = server_dir_name("0c1e570", native, "x86_64-1a2b3c4d")
    assert name == f"llama-server-0c1e570-{native.key}-x86_64-1a2b3c4d"
    # the directory of a binary built with the old flags (no flag set in the key) never matches
    assert name != "llama-server-0c1e570-x86_64-1a2b3c4d"
    one_flag_more = type(native)(native.name, native.summary, (*native.cmake_flags, "-DX=1"))
    assert one_flag_more.key != native.key
