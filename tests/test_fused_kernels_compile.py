"""The fused check kernels compile for a GPU, here without one.

Triton's interpreter (TRITON_INTERPRET=1, which the other fused-kernel tests use) runs a kernel's Python
body, so it accepts what the compiler refuses: a global that is not a `tl.constexpr`, an annotation that
names a Python type. Both once reached the lent-GPU check unseen. Here each kernel goes through Triton's
whole compiler down to a cubin, for Hopper (sm_90) and Ampere (sm_80), with the argument types its
launcher passes, in a child process: the interpreter, switched on for this suite, replaces `triton.jit`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("triton")

COMPILE = """
import json, pathlib, re, subprocess, sys, tempfile
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, compile
from sdcscan.checks import keyed_sums, fingerprint_triton, int8_block, int8_triton
from sdcscan.checks import tile_verdicts, tile_verdicts_triton
from sdcscan.checks import golden_compare, golden_compare_triton
from sdcscan.checks.embbag import exact_fused, exact_triton

# Each kernel's runtime arguments as int8_triton.partials, exact_triton.partials and
# fingerprint_triton.partials pass them.
INT8 = dict(words_ptr="*i64", row_ptr="*i64", weighted_ptr="*i64", pad_ptr="*i32", column_ptr="*i64",
            print_ptr="*i64", rows="i32", words_per_row="i32", n="i32", pad_start="i32", strips="i32")
EMBBAG = dict(words_ptr="*i64", expected_ptr="*i32", weighted_ptr="*i32", weights_ptr="*i32",
              bad_ptr="*i8", print_ptr="*i64", bags="i32", half="i32")
KEYED = dict(words_ptr="*i64", sums_ptr="*i64", width="i32", chunks="i32")
TILES = dict(bits_ptr="*i16", rows_ptr="*fp32", row_t_ptr="*fp64", cols_ptr="*fp32", col_t_ptr="*fp64",
             row_part_ptr="*fp32", col_part_ptr="*fp32", row_flag_ptr="*i8", col_flag_ptr="*i8",
             ratio_ptr="*fp64", print_ptr="*i64", repeats="i32", m="i32", n="i32", row_sums="i32",
             col_sums="i32")
TILES_FP32 = TILES | dict(bits_ptr="*i32", rows_ptr="*fp64", cols_ptr="*fp64", row_part_ptr="*fp64",
                          col_part_ptr="*fp64")
GOLDEN = dict(outputs_ptr="*i16", expected_ptr="*i16", partials_ptr="*i64", repeats="i32", m="i32", n="i32")
GOLDEN_FP64 = GOLDEN | dict(outputs_ptr="*i64", expected_ptr="*i64")
kernels = {
    "int8_block": (int8_triton._kernel, INT8, int8_block.NUM_WARPS,
                   dict(ROWS=int8_block.ROWS, WORDS=int8_block.WORDS, ROW_TILES=int8_block.ROW_TILES)),
    "embbag_exact": (exact_triton._kernel, EMBBAG, 4, dict(BAGS=exact_fused.BAGS, HALF=32)),
    "fingerprint": (fingerprint_triton._kernel, KEYED, keyed_sums.NUM_WARPS,
                    dict(BLOCK=keyed_sums.BLOCK, TILES=keyed_sums.TILES)),
    # bf16 outputs checked in fp32 (the doctor's and burnin's tensor-core slots), fp32 outputs in fp64
    "fp_tiles_bf16": (tile_verdicts_triton._kernel, TILES, tile_verdicts.NUM_WARPS,
                      dict(FLOAT=tl.bfloat16, UINT=tl.uint16, ACC=tl.float32, PER_WORD=4, TILE=8,
                           BM=tile_verdicts.BLOCK[0], BN=tile_verdicts.BLOCK[1])),
    "fp_tiles_fp32": (tile_verdicts_triton._kernel, TILES_FP32, tile_verdicts.NUM_WARPS,
                      dict(FLOAT=tl.float32, UINT=tl.uint32, ACC=tl.float64, PER_WORD=2, TILE=8,
                           BM=tile_verdicts.BLOCK[0], BN=tile_verdicts.BLOCK[1])),
    # matmul_golden's comparison: bf16 outputs (the tensor-core slots) and fp64 ones (the widest)
    "golden_bf16": (golden_compare_triton._kernel, GOLDEN, golden_compare.NUM_WARPS,
                    dict(FLOAT=tl.bfloat16, COMPARED=tl.float32, BM=golden_compare.BLOCK[0],
                         BN=golden_compare.BLOCK[1])),
    "golden_fp64": (golden_compare_triton._kernel, GOLDEN_FP64, golden_compare.NUM_WARPS,
                    dict(FLOAT=tl.float64, COMPARED=tl.float64, BM=golden_compare.BLOCK[0],
                         BN=golden_compare.BLOCK[1])),
}
capability = int(sys.argv[1])
cuobjdump = pathlib.Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
found = {}
for name, (kernel, arguments, warps, constexprs) in kernels.items():
    signature = {a: arguments.get(a, "constexpr") for a in kernel.arg_names}
    compiled = compile(ASTSource(kernel, signature, constexprs), target=GPUTarget("cuda", capability, 32),
                       options={"num_warps": warps})
    found[name] = {"cubin": len(compiled.asm["cubin"])}
    if cuobjdump.exists():  # registers a thread, and bytes spilled to the stack
        cubin = pathlib.Path(tempfile.mkdtemp()) / "k.cubin"
        cubin.write_bytes(compiled.asm["cubin"])
        usage = subprocess.run([str(cuobjdump), "--dump-resource-usage", str(cubin)],
                               capture_output=True, text=True, check=True).stdout
        found[name] |= {k.lower(): int(v) for k, v in re.findall(r"(REG|STACK):(\\d+)", usage)}
print(json.dumps(found))
"""


@pytest.mark.parametrize("capability", [90, 80])
def test_each_fused_kernel_compiles_to_a_cubin(capability: int) -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run(
        [sys.executable, "-c", COMPILE, str(capability)], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.splitlines()[-1])
    assert set(found) == {
        "int8_block",
        "embbag_exact",
        "fingerprint",
        "fp_tiles_bf16",
        "fp_tiles_fp32",
        "golden_bf16",
        "golden_fp64",
    } and all(k["cubin"] for k in found.values())
    if capability == 90 and "reg" in found["int8_block"]:
        # On an H200 the int8 kernel at 255 registers and a 248-byte spill ran at 745 GB/s (int8_block.py):
        # its tile now fits in half the registers, so an SM keeps twice the warps.
        assert found["int8_block"]["stack"] == 0 and found["int8_block"]["reg"] <= 128, found
        assert found["fingerprint"]["stack"] == 0, found  # a streaming sum: nothing to spill
        # gemm_fp's block check: 134 (bf16) and 150 (fp32) registers at 32 x 32 outputs a program of 4
        # warps, three programs an SM; 64 x 64 by 4 warps held 255 and spilled 1,376 bytes
        assert found["fp_tiles_bf16"]["stack"] == found["fp_tiles_fp32"]["stack"] == 0, found
        # matmul_golden's comparison: a 16 x 256 tile of the expected output held across the block's
        # repeats, 121 (bf16) and 126 (fp64) registers and no spill
        assert found["golden_bf16"]["stack"] == found["golden_fp64"]["stack"] == 0, found
