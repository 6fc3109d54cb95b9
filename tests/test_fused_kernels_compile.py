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
import json, sys
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, compile
from sdcscan.checks import int8_block, int8_triton
from sdcscan.checks.embbag import exact_fused, exact_triton

# Each kernel's runtime arguments as int8_triton.partials and exact_triton.partials pass them.
INT8 = dict(words_ptr="*i64", row_ptr="*i64", weighted_ptr="*i64", pad_ptr="*i32", column_ptr="*i64",
            print_ptr="*i64", rows="i32", words_per_row="i32", n="i32", pad_start="i32", strips="i32")
EMBBAG = dict(words_ptr="*i64", expected_ptr="*i32", weighted_ptr="*i32", weights_ptr="*i32",
              bad_ptr="*i8", print_ptr="*i64", bags="i32", half="i32")
kernels = {
    "int8_block": (int8_triton._kernel, INT8,
                   dict(ROWS=int8_block.ROWS, WORDS=int8_block.WORDS, ROW_TILES=int8_block.ROW_TILES)),
    "embbag_exact": (exact_triton._kernel, EMBBAG, dict(BAGS=exact_fused.BAGS, HALF=32)),
}
capability = int(sys.argv[1])
sizes = {}
for name, (kernel, arguments, constexprs) in kernels.items():
    signature = {a: arguments.get(a, "constexpr") for a in kernel.arg_names}
    compiled = compile(ASTSource(kernel, signature, constexprs), target=GPUTarget("cuda", capability, 32))
    sizes[name] = len(compiled.asm["cubin"])
print(json.dumps(sizes))
"""


@pytest.mark.parametrize("capability", [90, 80])
def test_each_fused_kernel_compiles_to_a_cubin(capability: int) -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run(
        [sys.executable, "-c", COMPILE, str(capability)], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    sizes = json.loads(done.stdout.splitlines()[-1])
    assert set(sizes) == {"int8_block", "embbag_exact"} and all(sizes.values())
