"""Checksums for rowwise-quantized EmbeddingBag (FBGEMM `embedding_bag_byte_rowwise_offsets` and
`embedding_bag_4bit_rowwise_offsets`).

Packed rows (docs/abft.md §2.1): 8-bit rows are D bytes q, then fp32 scale and bias; 4-bit rows are D/2
bytes of nibbles (element 2k in the low nibble, 2k + 1 in the high one), then fp16 scale and bias. An
element is scale·q + bias. FBGEMM sums a bag in fp32 as buf_j = fma(w·scale, q_j, buf_j + w·bias), one
member after another in bag order. With row sums C_T[r] = Σ_j q_rj of the intended table, the bag
checksum identity (Li et al. §V-B, eq. 5; docs/abft.md §2.2) is

    S_out(b) = Σ_j out[b, j]  =  S_exp(b) = Σ_{i in b} w_i (scale_i·C_T[i] + D·bias_i)

where S_exp gathers the row sums of the INTENDED indices, so a fetch of the wrong row is seen too.

Two checks:
    exact: scale = 2^-7 and bias = k·2^-7 (k integer) are written into the table and weights are small
        integers, so every fp32 step is exact; the identity is checked for equality in integers (units
        of 2^-7), plus an integrality check on every output element (docs/abft.md §2.4).
    realistic, two levels (docs/abft.md §2.3): any FBGEMM-quantized table. A cheap per-bag trigger
        compares the residuals of two checksums, the plain one above and a signed one (balanced ±1
        weights, which cancel the rounding FBGEMM makes alike in every element), with a variance model
        of the fp32 rounding noise; only the bags it flags are recomputed element by element in fp64
        from the intended rows (whose bytes are first checked against per-row fingerprints) and
        compared with a rigorous running-error bound, so a confirmed mismatch is never rounding.

Modules, one job each: `rows` (the packed row format and the op), `exact` and `realistic` (the two
checks), `prefix` (exact checksums read off prefix sums over a fixed id pool), `tables` (tables shaped
like trained embeddings, for the realistic check).
"""
