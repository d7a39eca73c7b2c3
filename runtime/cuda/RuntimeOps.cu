/*===- RuntimeOps.cu - the CUDA runtime's own kernels ---------------------===//
 *
 * The ops the CUDA plan device (runtime/cuda/CudaPlan.cpp) runs itself, beside
 * the generated fused kernels and cuBLASLt's GEMMs: unfused elementwise ops,
 * layout ops (strided gather/scatter), sums, softmax and norm rows,
 * embedding and its gradient, one-hot, cross-entropy, Newton-Schulz's
 * elementwise steps, bf16 rounding of GEMM operands, and the gradient-sum
 * updates. The text is compiled by NVRTC at run time (cached like the
 * generated kernels), after KernelMath.inc, so tanh and GELU are the fused
 * kernels' own. Each follows the reference executor's formula
 * (runtime/exec/OpSemantics.h); sums are in a fixed order for a given launch, so
 * runs repeat bit for bit. Launch contracts: grid-stride loops everywhere;
 * the kernels that use st_block_sum need blockDim.x == 256, the *_rows16
 * kernels a multiple of 32.
 *===----------------------------------------------------------------------===*/

typedef long long i64;

/* The kernels come in parts, each its own NVRTC unit (compiled in parallel
 * at start-up: cudaRuntimeUnits in CudaPlan.cpp): ST_OPS_PART k keeps part
 * k's kernels: 0 the general ops, 1 the fused attention on CUDA cores,
 * 2..4 on tensor cores for head dims 16, 32, 64, 5 the ops after them
 * (embedding, cross-entropy, the optimizer's, epilogue fallbacks).
 * Undefined: all of them in one (the emulated GPU). The helpers stay in
 * every part (unused ones cost a parse, not a compile). */
#ifndef ST_OPS_PART
#define ST_OPS_PART -1
#endif
#define ST_OPS_IN(k) (ST_OPS_PART < 0 || ST_OPS_PART == (k))

#define ST_LOOP(i, n)                                                          \
  for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < (n);            \
       i += (i64)gridDim.x * blockDim.x)

/* An index space of up to 8 dims and two operands' strides in it. */
struct StSpace {
  int rank;
  i64 dims[8];
  i64 a[8];
  i64 b[8];
};

ST_FN i64 st_at64(const StSpace &s, i64 e, const i64 *st) {
  i64 off = 0;
  for (int d = s.rank - 1; d >= 0; --d) {
    off += (e % s.dims[d]) * st[d];
    e /= s.dims[d];
  }
  return off;
}
/* The same with 32-bit division (a GPU's 64-bit division is a long
 * instruction sequence, and a transpose does one per dim per element)
 * where the index space has fewer than 2^31 elements (so has every dim). */
ST_FN i64 st_at(const StSpace &s, i64 e, const i64 *st) {
  i64 n = 1;
  for (int d = 0; d < s.rank; ++d)
    n *= s.dims[d];
  if (n >= 0x7fffffffLL)
    return st_at64(s, e, st);
  unsigned r = (unsigned)e;
  i64 off = 0;
  for (int d = s.rank - 1; d >= 0; --d) {
    const unsigned dim = (unsigned)s.dims[d], q = r / dim;
    off += (i64)(r - q * dim) * st[d];
    r = q;
  }
  return off;
}

/* Block reduction of one float per thread (blockDim.x == 256); thread 0
 * gets the sum. Fixed order for a given blockDim. */
ST_FN float st_block_sum(float v) {
  __shared__ float warpSums[8];
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_down_sync(0xffffffffu, v, o);
  if ((threadIdx.x & 31) == 0)
    warpSums[threadIdx.x >> 5] = v;
  __syncthreads();
  float s = 0.0f;
  if (threadIdx.x == 0)
    for (int w = 0; w < 8; ++w)
      s += warpSums[w];
  __syncthreads();
  return s;
}

#if ST_OPS_IN(0)

/* st_unary(op, x) and st_binary(op, a, b), the element-wise ops by code,
   are generated from the op table (runtimeOpDispatch() in CudaPlan.cpp). */

extern "C" __global__ void st_unary_op(int op, i64 n, const float *x, float *y, StSpace s) {
  ST_LOOP(e, n) y[e] = st_unary(op, x[s.rank ? st_at(s, e, s.a) : e]);
}

extern "C" __global__ void st_binary_op(int op, i64 n, const float *a, const float *b, float *y,
                                        StSpace s) {
  ST_LOOP(e, n) y[e] = st_binary(op, a[st_at(s, e, s.a)], b[st_at(s, e, s.b)]);
}

/* y[e] = x[base + at(e)]: transpose, broadcast, slice. */
extern "C" __global__ void st_gather(i64 n, const float *x, i64 base, float *y, StSpace s) {
  ST_LOOP(e, n) y[e] = x[base + st_at(s, e, s.a)];
}

/* Values stored in bf16 (kernel-bf16-storage: two bytes, the bf16's bits;
 * KernelMath.inc's st_widen widens one exactly). st_gather16 moves them as
 * they are (a transpose of such a value), st_gather_wide into floats (rank
 * 0: y = x). */

extern "C" __global__ void st_gather16(i64 n, const unsigned short *x, i64 base,
                                       unsigned short *y, StSpace s) {
  ST_LOOP(e, n) y[e] = x[base + st_at(s, e, s.a)];
}

extern "C" __global__ void st_gather_wide(i64 n, const unsigned short *x, i64 base, float *y,
                                          StSpace s) {
  ST_LOOP(e, n) y[e] = st_widen(x[base + (s.rank ? st_at(s, e, s.a) : e)]);
}

/* A gather that keeps the innermost dim (a transpose that leaves the last
 * axis in place, as attention's head splits and merges do): y's rows of
 * `row` 16-byte chunks are whole rows of x, moved a chunk a thread; s
 * spans y's rows, its strides (a) in chunks of x. 32-bit index math: the
 * runtime launches it for fewer than 2^31 chunks, 16-byte aligned. The
 * chunks are moved as float4 (bits as they are, f32 or bf16). */
extern "C" __global__ void st_gather_rows(i64 n, const float4 *x, i64 base, float4 *y, i64 row,
                                          StSpace s) {
  ST_LOOP(e, n) {
    const unsigned r = (unsigned)e / (unsigned)row, c = (unsigned)e - r * (unsigned)row;
    y[e] = x[base + st_at(s, r, s.a) + c];
  }
}

/* y[base + at(e)] = x[e]: pad (after a zero fill). */
extern "C" __global__ void st_scatter(i64 n, const float *x, i64 base, float *y, StSpace s) {
  ST_LOOP(e, n) y[base + st_at(s, e, s.a)] = x[e];
}

extern "C" __global__ void st_accumulate(i64 n, float *y, const float *x) {
  ST_LOOP(e, n) y[e] += x[e];
}

extern "C" __global__ void st_divide(i64 n, float *y, float d) { ST_LOOP(e, n) y[e] /= d; }

/* y[r] = sum_j x[r, j]: a block per row. */
extern "C" __global__ void st_row_sums(i64 rows, i64 len, const float *x, float *y) {
  for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
    float v = 0.0f;
    for (i64 j = threadIdx.x; j < len; j += blockDim.x)
      v += x[r * len + j];
    v = st_block_sum(v);
    if (threadIdx.x == 0)
      y[r] = v;
  }
}

/* y[o, j] = sum_r x[o, r, j], rows in order: a thread per (o, j); x in
 * f32 or (st_column_sums16) bf16. */
template <typename X>
ST_FN void st_column_sums_of(i64 outer, i64 nred, i64 inner, const X *x, float *y) {
  ST_LOOP(e, outer * inner) {
    i64 o = e / inner, j = e % inner;
    const X *src = x + o * nred * inner + j;
    float s = 0.0f;
    for (i64 r = 0; r < nred; ++r)
      s += st_widen(src[r * inner]);
    y[e] = s;
  }
}
extern "C" __global__ void st_column_sums(i64 outer, i64 nred, i64 inner, const float *x,
                                          float *y) {
  st_column_sums_of(outer, nred, inner, x, y);
}
extern "C" __global__ void st_column_sums16(i64 outer, i64 nred, i64 inner,
                                            const unsigned short *x, float *y) {
  st_column_sums_of(outer, nred, inner, x, y);
}

/* Softmax of each row (KernelMath.inc's st_softmax_row, as every executor);
 * row r's causal position is r % period. A thread per row. */
extern "C" __global__ void st_softmax_rows(i64 rows, i64 len, int causal, i64 period,
                                           const float *x, float *y) {
  ST_LOOP(r, rows) {
    st_softmax_row(x + r * len, y + r * len, len, causal ? r % period + 1 : len);
  }
}

/* attention_grad's rows (KernelMath.inc's st_softmax_grad_row): with P
 * (the softmax rows) and dP in ds, ds = P (dP - rowsum(P dP)) scale, and 0
 * past the causal position r % period. A thread per row. */
extern "C" __global__ void st_softmax_grad_rows(i64 rows, i64 len, int causal, i64 period,
                                                float scale, const float *p, float *ds) {
  ST_LOOP(r, rows) {
    st_softmax_grad_row(p + r * len, ds + r * len, len, causal ? r % period + 1 : len, scale);
  }
}

/* LayerNorm (beta != 0) or RmsNorm of each row (KernelMath.inc's
 * st_norm_row). */
extern "C" __global__ void st_norm_rows(i64 rows, i64 d, float eps, const float *x,
                                        const float *gamma, const float *beta, float *y) {
  ST_LOOP(r, rows) {
    st_norm_row(x + r * d, gamma, beta, y + r * d, d, eps);
  }
}

/* norm_grad's epilogue (kernel-norm-grad-epilogue: KernelMath.inc's
 * st_norm_grad_epilogue and its ST_NG_* bits) on element i of the rows:
 * element i of `add` read in four bytes or in two (ST_NG_ADD16), the value
 * stored in four bytes or in two (ST_NG_OUT16: the bf16's bits, exact as
 * it is rounded). */
ST_FN void st_norm_grad_put(int epi, const void *add, void *dx, i64 i, float v) {
  float a = 0.0f;
  if (epi & ST_NG_ADD)
    a = (epi & ST_NG_ADD16) ? st_widen(((const unsigned short *)add)[i])
                            : ((const float *)add)[i];
  v = st_norm_grad_epilogue(epi, v, a);
  if (epi & ST_NG_OUT16)
    ((unsigned short *)dx)[i] = (unsigned short)((unsigned int)st_bits_of(v) >> 16);
  else
    ((float *)dx)[i] = v;
}

/* norm_grad (KernelMath.inc's st_norm_grad_row): dx of each row through
 * the epilogue, its mean and rstd into mean[r], rstd[r]. A thread per row.
 * The *_x16 forms take x in bf16, two bytes an element
 * (kernel-bf16-storage), the *_dy16 forms dy. */
template <typename X, typename DY>
ST_FN void st_norm_grad_rows_of(i64 rows, i64 d, float eps, int centered, const X *x,
                                const float *gamma, const DY *dy, int epi, const void *add,
                                void *dx, float *mean, float *rstd) {
  ST_LOOP(r, rows) {
    st_norm_grad_row_put(x + r * d, gamma, dy + r * d, d, eps, centered != 0, mean + r, rstd + r,
                         [&](i64 j, float v) { st_norm_grad_put(epi, add, dx, r * d + j, v); });
  }
}
/* The norm_grad row kernels' entry points: NAME over x of type X and dy
 * of type DY. */
#define ST_NORM_GRAD_ENTRY(NAME, OF, X, DY)                                                      \
  extern "C" __global__ void NAME(i64 rows, i64 d, float eps, int centered, const X *x,          \
                                  const float *gamma, const DY *dy, int epi, const void *add,    \
                                  void *dx, float *mean, float *rstd) {                          \
    OF(rows, d, eps, centered, x, gamma, dy, epi, add, dx, mean, rstd);                          \
  }
ST_NORM_GRAD_ENTRY(st_norm_grad_rows, st_norm_grad_rows_of, float, float)
ST_NORM_GRAD_ENTRY(st_norm_grad_rows_x16, st_norm_grad_rows_of, unsigned short, float)
ST_NORM_GRAD_ENTRY(st_norm_grad_rows_dy16, st_norm_grad_rows_of, float, unsigned short)
ST_NORM_GRAD_ENTRY(st_norm_grad_rows_x16_dy16, st_norm_grad_rows_of, unsigned short,
                   unsigned short)

/* norm_grad, the parameters: chunk c's partial sums over its rows in
 * order (st_norm_param_accumulate, as the CPU's st_norm_grad_chunk adds
 * them), a thread per (chunk, column); pb null: RmsNorm. The sums stay in
 * registers until the chunk is done (in pg and pb, each row's sum was a
 * load and a store through memory that the next row's loads had to wait
 * for: a thread's rows in a chain of round trips, not loads in flight). */
template <typename X, typename DY>
ST_FN void st_norm_param_partials_of(i64 rows, i64 d, i64 per, i64 chunks, const X *x,
                                     const DY *dy, const float *mean, const float *rstd,
                                     float *pg, float *pb) {
  ST_LOOP(e, chunks * d) {
    i64 c = e / d, j = e % d, end = (c + 1) * per < rows ? (c + 1) * per : rows;
    float g = 0.0f, b = 0.0f;
    // (two loops, each with pointers the compiler sees: a pointer chosen
    // at run time between &b and null put b in local memory, ptxas -v's
    // stack frame of 8 bytes, a load and a store a row)
    if (pb)
      for (i64 r = c * per; r < end; ++r)
        st_norm_param_accumulate(x + r * d, dy + r * d, mean[r], rstd[r], j, (i64)1, &g, &b);
    else
      for (i64 r = c * per; r < end; ++r)
        st_norm_param_accumulate(x + r * d, dy + r * d, mean[r], rstd[r], j, (i64)1, &g,
                                 (float *)0);
    pg[e] = g;
    if (pb)
      pb[e] = b;
  }
}
#define ST_NORM_PARTIALS_ENTRY(NAME, X, DY)                                                      \
  extern "C" __global__ void NAME(i64 rows, i64 d, i64 per, i64 chunks, const X *x, const DY *dy, \
                                  const float *mean, const float *rstd, float *pg, float *pb) {  \
    st_norm_param_partials_of(rows, d, per, chunks, x, dy, mean, rstd, pg, pb);                  \
  }
ST_NORM_PARTIALS_ENTRY(st_norm_param_partials, float, float)
ST_NORM_PARTIALS_ENTRY(st_norm_param_partials_x16, unsigned short, float)
ST_NORM_PARTIALS_ENTRY(st_norm_param_partials_dy16, float, unsigned short)
ST_NORM_PARTIALS_ENTRY(st_norm_param_partials_x16_dy16, unsigned short, unsigned short)

/* ... then the chunks in order (st_norm_param_combine, which loads eight
 * partials before it adds them), a thread per column. */
extern "C" __global__ void st_norm_param_grad(i64 d, i64 chunks, const float *pg,
                                              const float *pb, float *dgamma, float *dbeta) {
  ST_LOOP(j, d) {
    dgamma[j] = st_norm_param_combine(pg, chunks, d, j);
    if (pb)
      dbeta[j] = st_norm_param_combine(pb, chunks, d, j);
  }
}

/* The row kernels by half-warps (KernelMath.inc's st_*_row16: the same
 * values as the thread-per-row kernels above, bit for bit, with coalesced
 * loads). ST_HALF_ROWS runs `body` for row r of `rows` with ok = whether
 * this half-warp has a row: the loop is the same for both half-warps of a
 * warp (its variable is the warp's first row), so their shuffles meet.
 * blockDim.x: a multiple of 32. */
#define ST_HALF_ROWS(rows, body)                                                \
  for (i64 w_ = (blockIdx.x * (i64)blockDim.x + threadIdx.x) / 32 * 2;          \
       w_ < (rows); w_ += (i64)gridDim.x * blockDim.x / 16) {                    \
    const i64 r = w_ + ((threadIdx.x >> 4) & 1);                                \
    const bool ok = r < (rows);                                                 \
    const i64 rr = ok ? r : 0;                                                  \
    body                                                                        \
  }

extern "C" __global__ void st_softmax_rows16(i64 rows, i64 len, int causal, i64 period,
                                             const float *x, float *y) {
  ST_HALF_ROWS(rows, {
    st_softmax_row16(x + rr * len, y + rr * len, ok ? len : 0,
                     ok ? (causal ? rr % period + 1 : len) : 0);
  })
}

extern "C" __global__ void st_softmax_grad_rows16(i64 rows, i64 len, int causal, i64 period,
                                                  float scale, const float *p, float *ds) {
  ST_HALF_ROWS(rows, {
    st_softmax_grad_row16(p + rr * len, ds + rr * len, ok ? len : 0,
                          ok ? (causal ? rr % period + 1 : len) : 0, scale);
  })
}

extern "C" __global__ void st_norm_rows16(i64 rows, i64 d, float eps, const float *x,
                                          const float *gamma, const float *beta, float *y) {
  ST_HALF_ROWS(rows, { st_norm_row16(x + rr * d, gamma, beta, y + rr * d, ok ? d : 0, eps); })
}

template <typename X, typename DY>
ST_FN void st_norm_grad_rows16_of(i64 rows, i64 d, float eps, int centered, const X *x,
                                  const float *gamma, const DY *dy, int epi, const void *add,
                                  void *dx, float *mean, float *rstd) {
  ST_HALF_ROWS(rows, {
    st_norm_grad_row16_put(x + rr * d, gamma, dy + rr * d, ok ? d : 0, eps, centered != 0,
                           mean + rr, rstd + rr, [&](i64 j, float v) {
                             st_norm_grad_put(epi, add, dx, rr * d + j, v);
                           });
  })
}
ST_NORM_GRAD_ENTRY(st_norm_grad_rows16, st_norm_grad_rows16_of, float, float)
ST_NORM_GRAD_ENTRY(st_norm_grad_rows16_x16, st_norm_grad_rows16_of, unsigned short, float)
ST_NORM_GRAD_ENTRY(st_norm_grad_rows16_dy16, st_norm_grad_rows16_of, float, unsigned short)
ST_NORM_GRAD_ENTRY(st_norm_grad_rows16_x16_dy16, st_norm_grad_rows16_of, unsigned short,
                   unsigned short)

/* Column sums in two passes, for few columns over many rows (a bias
 * gradient: [8192, 768] -> [768] had 768 threads, each reading a strided
 * column): part[o, c, j] = rows c*per .. of column j in order, a thread
 * per (o, c, j), consecutive threads on consecutive columns (coalesced);
 * then y[o, j] = the chunks' partials in order. A fixed order for given
 * sizes: runs repeat bit for bit. */
template <typename X>
ST_FN void st_column_partials_of(i64 outer, i64 nred, i64 inner, i64 per, i64 chunks,
                                 const X *x, float *part) {
  ST_LOOP(e, outer * chunks * inner) {
    i64 j = e % inner, c = (e / inner) % chunks, o = e / (inner * chunks);
    i64 r0 = c * per, r1 = r0 + per < nred ? r0 + per : nred;
    const X *src = x + o * nred * inner + j;
    float s = 0.0f;
    for (i64 r = r0; r < r1; ++r)
      s += st_widen(src[r * inner]);
    part[e] = s;
  }
}
extern "C" __global__ void st_column_partials(i64 outer, i64 nred, i64 inner, i64 per,
                                              i64 chunks, const float *x, float *part) {
  st_column_partials_of(outer, nred, inner, per, chunks, x, part);
}
extern "C" __global__ void st_column_partials16(i64 outer, i64 nred, i64 inner, i64 per,
                                                i64 chunks, const unsigned short *x,
                                                float *part) {
  st_column_partials_of(outer, nred, inner, per, chunks, x, part);
}

extern "C" __global__ void st_column_combine(i64 outer, i64 chunks, i64 inner, const float *part,
                                             float *y) {
  ST_LOOP(e, outer * inner) {
    i64 o = e / inner, j = e % inner;
    float s = 0.0f;
    for (i64 c = 0; c < chunks; ++c)
      s += part[(o * chunks + c) * inner + j];
    y[e] = s;
  }
}
#endif /* ST_OPS_IN(0) */

/* Fused causal (or full) attention without the T x T matrix, a thread per
 * query row (forward, dQ) or key row (dK, dV), head dims D of 8 to 64
 * (instantiated below; 128 would spill registers), f32. Each row streams over the keys (queries) once
 * per pass with the online softmax (Milakov & Gimelshein 2018, "Online
 * normalizer calculation for softmax"; FlashAttention, Dao et al. 2022):
 * running max m and sum l, the accumulator rescaled by e^(m_old - m_new).
 * Query row i (of tq) sees keys 0..i when causal, as the softmax rows of
 * the GEMM path (period tq). The order of additions differs from the
 * GEMM path's, so the values agree to f32 rounding, not bit for bit.
 * q, o: [rows = batch * tq, D]; k, v: [batch * tk, D]. */
/* Rows of D floats (D a multiple of 4, rows 16-byte aligned: CudaPlan.cpp
 * checks) are read four floats a load; sums still add one product at a
 * time in d order, so the values are those of one float a load. */
#ifndef ST_HAVE_LD4
ST_FN float4 st_ld4(const float *p) { return *reinterpret_cast<const float4 *>(p); }
#endif
/* s + a[0] b[0] + ... + a[D-1] b[D-1], in order (b read four at a time). */
template <int D> ST_FN float st_dot_in_order(float s, const float *a, const float *b) {
  for (int d = 0; d < D; d += 4) {
    const float4 b4 = st_ld4(b + d);
    s += a[d] * b4.x;
    s += a[d + 1] * b4.y;
    s += a[d + 2] * b4.z;
    s += a[d + 3] * b4.w;
  }
  return s;
}
/* acc[d] += p x[d] for every d (x read four at a time). */
template <int D> ST_FN void st_axpy_row(float *acc, float p, const float *x) {
  for (int d = 0; d < D; d += 4) {
    const float4 x4 = st_ld4(x + d);
    acc[d] += p * x4.x;
    acc[d + 1] += p * x4.y;
    acc[d + 2] += p * x4.z;
    acc[d + 3] += p * x4.w;
  }
}

/* One score s of the online softmax: the running max m and sum l take it;
 * p = e^(s - m) after; returns the factor earlier terms are rescaled by
 * (1 while the max holds, 0 for the first score). */
ST_FN float st_online_step(float s, bool first, float &m, float &l, float &p) {
  float c = 1.0f;
  if (first || s > m) {
    c = first ? 0.0f : st_exp(m - s);
    l *= c;
    m = s;
  }
  p = st_exp(s - m);
  l += p;
  return c;
}

#define ST_NEG_INF st_float_bits((int)0xff800000u)
/* bf16 (train.attention {bf16}): the keys 32 at a time, as the tensor-core
 * kernels take them, each weight rounded to bf16 before it multiplies its
 * value row (OpSemantics.h's attentionChunkWeights). */
template <int D>
ST_FN void st_flash_fwd(i64 rows, i64 tq, i64 tk, int causal, float scale, const float *q,
                        const float *k, const float *v, float *o, int bf16) {
  ST_LOOP(r, rows) {
    const i64 b = r / tq, i = r % tq, end = causal ? (i + 1 < tk ? i + 1 : tk) : tk;
    const float *kb = k + b * tk * D, *vb = v + b * tk * D;
    float qr[D], acc[D];
    for (int d = 0; d < D; ++d) {
      qr[d] = q[r * D + d];
      acc[d] = 0.0f;
    }
    float m = 0.0f, l = 0.0f;
    for (i64 j0 = 0; bf16 && j0 < end; j0 += 32) {
      const i64 n = end - j0 < 32 ? end - j0 : 32;
      float sc[32], mx = j0 == 0 ? ST_NEG_INF : m;
      for (i64 j = 0; j < n; ++j) {
        sc[j] = st_dot_in_order<D>(0.0f, qr, kb + (j0 + j) * D) * scale;
        mx = fmaxf(mx, sc[j]);
      }
      const float c = j0 == 0 ? 0.0f : st_exp(m - mx);
      l *= c;
      for (int d = 0; d < D; ++d)
        acc[d] *= c;
      m = mx;
      for (i64 j = 0; j < n; ++j) {
        const float p = st_exp(sc[j] - m);
        l += p;
        st_axpy_row<D>(acc, st_round_bf16(p), vb + (j0 + j) * D);
      }
    }
    for (i64 j = 0; !bf16 && j < end; ++j) {
      const float s = st_dot_in_order<D>(0.0f, qr, kb + j * D);
      float p;
      const float c = st_online_step(s * scale, j == 0, m, l, p);
      if (c != 1.0f) // a new max: the sum so far rescaled
        for (int d = 0; d < D; ++d)
          acc[d] *= c;
      st_axpy_row<D>(acc, p, vb + j * D);
    }
    for (int d = 0; d < D; ++d)
      o[r * D + d] = end > 0 ? acc[d] / l : 0.0f;
  }
}

/* Backward, per query row: the row's softmax max m and sum l (pass 1),
 * inner = sum_j P_ij dP_ij with dP_ij = g_i . v_j (pass 2), then
 * dQ_i = sum_j dS_ij k_j, dS_ij = P_ij (dP_ij - inner) scale (pass 3);
 * m, l and inner go to stats[3 r ..] for the key-row kernel. */
template <int D>
ST_FN void st_flash_bwd_q(i64 rows, i64 tq, i64 tk, int causal, float scale, const float *q,
                          const float *k, const float *v, const float *g, float *dq,
                          float *stats, int bf16) {
  ST_LOOP(r, rows) {
    const i64 b = r / tq, i = r % tq, end = causal ? (i + 1 < tk ? i + 1 : tk) : tk;
    // The q and g rows are read where they are (cached): registers hold
    // only the dQ accumulator (D = 64 spilled with the rows in them).
    const float *kb = k + b * tk * D, *vb = v + b * tk * D, *qr = q + r * D, *gr = g + r * D;
    float acc[D];
    for (int d = 0; d < D; ++d)
      acc[d] = 0.0f;
    float m = 0.0f, l = 0.0f;
    for (i64 j = 0; j < end; ++j) {
      const float s = st_dot_in_order<D>(0.0f, qr, kb + j * D);
      float p;
      st_online_step(s * scale, j == 0, m, l, p);
    }
    // (Passes 2 and 3 read one float a load: four at a time, D = 64
    // spills registers.)
    float inner = 0.0f;
    for (i64 j = 0; j < end; ++j) {
      float s = 0.0f, dp = 0.0f;
      for (int d = 0; d < D; ++d) {
        s += qr[d] * kb[j * D + d];
        dp += gr[d] * vb[j * D + d];
      }
      inner += st_exp(s * scale - m) / l * dp;
    }
    for (i64 j = 0; j < end; ++j) {
      float s = 0.0f, dp = 0.0f;
      for (int d = 0; d < D; ++d) {
        s += qr[d] * kb[j * D + d];
        dp += gr[d] * vb[j * D + d];
      }
      float ds = st_exp(s * scale - m) / l * (dp - inner) * scale;
      if (bf16) // (attention_grad's `bf16`: dS rounded before its product)
        ds = st_round_bf16(ds);
      for (int d = 0; d < D; ++d)
        acc[d] += ds * kb[j * D + d];
    }
    for (int d = 0; d < D; ++d)
      dq[r * D + d] = acc[d];
    stats[3 * r] = m;
    stats[3 * r + 1] = l;
    stats[3 * r + 2] = inner;
  }
}

/* Backward, per key row c (of batch * tk): dV_j = sum_i P_ij g_i and
 * dK_j = sum_i dS_ij q_i over the queries that see key j, with P from the
 * query rows' m and l and dS from their inner (st_flash_bwd_q's stats). */
template <int D>
ST_FN void st_flash_bwd_kv(i64 keys, i64 tq, i64 tk, int causal, float scale, const float *q,
                           const float *k, const float *v, const float *g, const float *stats,
                           float *dk, float *dv, int bf16) {
  ST_LOOP(c, keys) {
    const i64 b = c / tk, j = c % tk;
    const float *qb = q + b * tq * D, *gb = g + b * tq * D, *sb = stats + 3 * b * tq;
    const float *kr = k + c * D, *vr = v + c * D; // read where they are (cached)
    float ak[D], av[D];
    for (int d = 0; d < D; ++d) {
      ak[d] = 0.0f;
      av[d] = 0.0f;
    }
    for (i64 i = causal ? j : 0; i < tq; ++i) {
      float s = 0.0f, dp = 0.0f;
      for (int d = 0; d < D; ++d) {
        s += qb[i * D + d] * kr[d];
        dp += gb[i * D + d] * vr[d];
      }
      float p = st_exp(s * scale - sb[3 * i]) / sb[3 * i + 1];
      float ds = p * (dp - sb[3 * i + 2]) * scale;
      if (bf16) { // (attention_grad's `bf16`: P and dS rounded before their products)
        p = st_round_bf16(p);
        ds = st_round_bf16(ds);
      }
      for (int d = 0; d < D; ++d) {
        av[d] += p * gb[i * D + d];
        ak[d] += ds * qb[i * D + d];
      }
    }
    for (int d = 0; d < D; ++d) {
      dk[c * D + d] = ak[d];
      dv[c * D + d] = av[d];
    }
  }
}

#define ST_FLASH_FOR(D)                                                                          \
  extern "C" __global__ void st_flash_fwd_d##D(i64 rows, i64 tq, i64 tk, int causal,             \
                                               float scale, const float *q, const float *k,      \
                                               const float *v, float *o, int bf16) {             \
    st_flash_fwd<D>(rows, tq, tk, causal, scale, q, k, v, o, bf16);                              \
  }                                                                                              \
  extern "C" __global__ void st_flash_bwd_q_d##D(i64 rows, i64 tq, i64 tk, int causal,           \
                                                 float scale, const float *q, const float *k,    \
                                                 const float *v, const float *g, float *dq,      \
                                                 float *stats, int bf16) {                       \
    st_flash_bwd_q<D>(rows, tq, tk, causal, scale, q, k, v, g, dq, stats, bf16);                 \
  }                                                                                              \
  extern "C" __global__ void st_flash_bwd_kv_d##D(i64 keys, i64 tq, i64 tk, int causal,          \
                                                  float scale, const float *q, const float *k,   \
                                                  const float *v, const float *g,                \
                                                  const float *stats, float *dk, float *dv,      \
                                                  int bf16) {                                    \
    st_flash_bwd_kv<D>(keys, tq, tk, causal, scale, q, k, v, g, stats, dk, dv, bf16);            \
  }
#if ST_OPS_IN(1)
ST_FLASH_FOR(8)
ST_FLASH_FOR(16)
ST_FLASH_FOR(32)
ST_FLASH_FOR(64)
#endif

/* ---- Fused attention on tensor cores ----------------------------------
 * The same attention as st_flash_* above (online softmax, no T x T
 * matrix; FlashAttention-2's loop structure, Dao 2023, arXiv:2307.08691),
 * with the inner products on bf16 tensor cores: mma.sync m16n8k16 (PTX
 * ISA, "Matrix Fragments for mma.m16n8k16": lane l, g = l >> 2, t = l & 3;
 * A holds rows g and g + 8, columns 2t, 2t + 1 and those + 8; B holds
 * rows k = 2t, 2t + 1 and those + 8 of column g; C/D rows g and g + 8,
 * columns 2t, 2t + 1), f32 accumulation. Each f32 operand is split into
 * three bf16 parts that add up to it exactly (st_split_pair: 8 + 8 + 8
 * significant bits), and a product is the sum of the part products
 * hi*hi, hi*mid, mid*hi, hi*lo, lo*hi and mid*mid (each exact in f32);
 * the terms left out are below 2^-24 of the product, so the result is an
 * f32 inner product up to rounding, not a bf16 one. A warp skips the part
 * products whose parts are zero in all its lanes (operands already bf16,
 * as bf16-storage plans' Q, K, V are, take one product instead of six).
 * A warp takes 16 query rows (or, for dK and dV, 16 key rows), a block's
 * warps consecutive ones of one (batch, head), and the block steps through
 * the other side 32 rows at a time: each chunk is staged in shared memory
 * once (st_stage32), and every warp reads its fragments from there. Needs sm_80 or later;
 * CudaPlan.cpp picks these kernels where the GPU has them and D is 16, 32
 * or 64. q, o, g: [bh, tq, D]; k, v: [bh, tk, D]; stats as st_flash_bwd_q's.
 * q, k, v and g may be bf16 in two bytes (StIn), widened as they load. */
#if defined(ST_EMU_MMA)
ST_FN void st_mma_bf16(float *c, const unsigned *a, const unsigned *b) { ST_EMU_MMA(c, a, b); }
ST_FN unsigned st_warp_or(unsigned x) { return ST_EMU_WARP_OR(x); }
#else
ST_FN void st_mma_bf16(float *c, const unsigned *a, const unsigned *b) {
#if __CUDA_ARCH__ >= 800
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
               "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
  __trap(); /* CudaPlan.cpp launches these kernels on sm_80 and later only */
#endif
}
ST_FN unsigned st_warp_or(unsigned x) {
#if __CUDA_ARCH__ >= 800
  return __reduce_or_sync(0xffffffffu, x);
#else
  for (int o = 1; o < 32; o <<= 1)
    x |= __shfl_xor_sync(0xffffffffu, x, o);
  return x;
#endif
}
#endif
ST_FN float st_lane_shfl(float v, int src) { return __shfl_sync(0xffffffffu, v, src); }

/* The loops over a warp's fragments and accumulator tiles (constant trip
 * counts) fully unrolled, so that their arrays (acc[D / 8][4], s[4][4], the
 * fragments' parts) are indexed by constants and stay in registers: left to
 * the compiler, the D = 64 kernels kept acc and s in local memory (a stack
 * frame of 192 bytes in the forward, 384 in dK/dV's kernel; ptxas -v), a
 * load and a store around every mma. NvrtcTest checks the frames are
 * empty. (No effect on the values: the same operations in the same order.) */
#if defined(__CUDACC_RTC__) || defined(__CUDACC__)
#define ST_UNROLL _Pragma("unroll")
#else
#define ST_UNROLL
#endif
/* A fragment (4 registers) or B fragment (2), as its three bf16 parts;
 * `any`: bit 0 when some lane's middle part is not zero, bit 1 its low part. */
template <int N> struct StSplit {
  unsigned p[3][N];
  unsigned any;
};
/* Register r of a fragment from the two values it holds (x0 in its low
 * half): the high parts keep the top 16 bits of each float (truncation),
 * the middle parts those of the remainder, the low parts the rest, exactly. */
template <int N> ST_FN void st_split_pair(StSplit<N> &f, int r, float x0, float x1, unsigned &nz) {
  unsigned u0 = (unsigned)st_bits_of(x0), u1 = (unsigned)st_bits_of(x1);
  float r0 = x0 - st_float_bits((int)(u0 & 0xffff0000u)), r1 = x1 - st_float_bits((int)(u1 & 0xffff0000u));
  unsigned v0 = (unsigned)st_bits_of(r0), v1 = (unsigned)st_bits_of(r1);
  float s0 = r0 - st_float_bits((int)(v0 & 0xffff0000u)), s1 = r1 - st_float_bits((int)(v1 & 0xffff0000u));
  unsigned w0 = (unsigned)st_bits_of(s0), w1 = (unsigned)st_bits_of(s1);
  f.p[0][r] = (u0 >> 16) | (u1 & 0xffff0000u);
  f.p[1][r] = (v0 >> 16) | (v1 & 0xffff0000u);
  f.p[2][r] = (w0 >> 16) | (w1 & 0xffff0000u);
  nz |= (f.p[1][r] ? 1u : 0u) | (f.p[2][r] ? 2u : 0u);
}
/* c += a b for f32 a and b given as parts: the six products that matter,
 * smallest first; a product whose parts are zero in every lane is skipped
 * (warp-uniform: every lane takes the same branches). */
ST_FN void st_mma_split(float *c, const StSplit<4> &a, const StSplit<2> &b) {
  if ((a.any & 1u) && (b.any & 1u))
    st_mma_bf16(c, a.p[1], b.p[1]);
  if (a.any & 2u)
    st_mma_bf16(c, a.p[2], b.p[0]);
  if (b.any & 2u)
    st_mma_bf16(c, a.p[0], b.p[2]);
  if (a.any & 1u)
    st_mma_bf16(c, a.p[1], b.p[0]);
  if (b.any & 1u)
    st_mma_bf16(c, a.p[0], b.p[1]);
  st_mma_bf16(c, a.p[0], b.p[0]);
}
/* Where block bh's rows of an attention operand lie (OpSemantics.h's
 * HeadRows): row t of block bh at (bh / heads) sb + (bh % heads) sh + t st
 * from the operand's start. [BH, T, D] heads: heads 1, sb T D, st D; part
 * p of a packed [B, T, P, H, D] (kernel-attention-layout): heads H,
 * sb T P H D, sh D, st P H D, the start moved to the part. */
struct StRows {
  i64 sb, sh, st;
};
ST_FN i64 st_row0(StRows r, i64 heads, i64 bh) { return (bh / heads) * r.sb + (bh % heads) * r.sh; }

/* An operand of the attention kernels: floats, or bf16 in two bytes
 * (kernel-bf16-storage's values: half != 0), widened exactly on load. */
struct StIn {
  const void *p;
  int half;
};
ST_FN float st_in(StIn x, i64 i) {
  return x.half ? st_widen(((const unsigned short *)x.p)[i]) : ((const float *)x.p)[i];
}
ST_FN StIn st_in_plus(StIn x, i64 i) {
  StIn y = x;
  y.p = x.half ? (const void *)((const unsigned short *)x.p + i) : (const void *)((const float *)x.p + i);
  return y;
}
/* A result element: f32, f32 rounded to bf16 (halves bit 4), or the
 * rounded bf16's bits in two bytes (bit 5): a result kernel-bf16-storage
 * stores in bf16 (kernel.store_bf16). */
ST_FN void st_store_out(void *o, i64 i, float v, int halves) {
  if (halves & 32)
    ((unsigned short *)o)[i] = (unsigned short)((unsigned int)st_bits_of(st_round_bf16(v)) >> 16);
  else
    ((float *)o)[i] = (halves & 16) ? st_round_bf16(v) : v;
}
/* Two bf16 values side by side (element i even, so 4-byte aligned) as
 * one register of a fragment: the first in the low half. */
ST_FN unsigned st_pair16(StIn m, i64 i) {
  return *(const unsigned *)((const unsigned short *)m.p + i);
}
/* An operand in two bytes is bf16 already: its fragment is its bits, with
 * no middle or low parts (nothing to split, no vote). */
template <int N> ST_FN void st_bf16_only(StSplit<N> &f) {
  for (int r = 0; r < N; ++r)
    f.p[1][r] = f.p[2][r] = 0u;
  f.any = 0u;
}
/* A: rows 0..15 of m (row-major, ld elements a row; rows >= rows read as
 * 0), columns k0 .. k0 + 15 (ld and k0 even). */
ST_FN StSplit<4> st_frag_a(StIn m, i64 ld, i64 rows, int k0) {
  const int lane = (int)(threadIdx.x & 31u), g = lane >> 2, t = lane & 3;
  if (m.half) {
    StSplit<4> f;
    ST_UNROLL for (int h = 0; h < 2; ++h) {
      const i64 row = (g + 8 * h) * ld + k0 + 2 * t;
      const bool ok = g + 8 * h < rows;
      f.p[0][h] = ok ? st_pair16(m, row) : 0u;
      f.p[0][2 + h] = ok ? st_pair16(m, row + 8) : 0u;
    }
    st_bf16_only(f);
    return f;
  }
  float x[2][4];
  ST_UNROLL for (int h = 0; h < 2; ++h) {
    const i64 row = (g + 8 * h) * ld + k0 + 2 * t;
    const bool ok = g + 8 * h < rows;
    x[h][0] = ok ? st_in(m, row) : 0.0f;
    x[h][1] = ok ? st_in(m, row + 1) : 0.0f;
    x[h][2] = ok ? st_in(m, row + 8) : 0.0f;
    x[h][3] = ok ? st_in(m, row + 9) : 0.0f;
  }
  StSplit<4> f;
  unsigned nz = 0;
  st_split_pair(f, 0, x[0][0], x[0][1], nz);
  st_split_pair(f, 1, x[1][0], x[1][1], nz);
  st_split_pair(f, 2, x[0][2], x[0][3], nz);
  st_split_pair(f, 3, x[1][2], x[1][3], nz);
  f.any = st_warp_or(nz);
  return f;
}
/* Two floats rounded to bf16 (nearest, ties to even) as one register:
 * the first in the low half. */
ST_FN unsigned st_pack_bf16(float x0, float x1) {
  return ((unsigned)st_bits_of(st_round_bf16(x0)) >> 16) |
         ((unsigned)st_bits_of(st_round_bf16(x1)) & 0xffff0000u);
}
/* A from two accumulator tiles (16 x 8 each, C layout) side by side: the
 * 16 x 16 operand they make has exactly the A layout. bf16: the values
 * rounded to bf16, one part (attention_grad's `bf16`: P and dS are
 * rounded before their products); else split exactly. */
ST_FN StSplit<4> st_frag_a_acc(const float *c0, const float *c1, int bf16) {
  StSplit<4> f;
  if (bf16) {
    f.p[0][0] = st_pack_bf16(c0[0], c0[1]);
    f.p[0][1] = st_pack_bf16(c0[2], c0[3]);
    f.p[0][2] = st_pack_bf16(c1[0], c1[1]);
    f.p[0][3] = st_pack_bf16(c1[2], c1[3]);
    st_bf16_only(f);
    return f;
  }
  unsigned nz = 0;
  st_split_pair(f, 0, c0[0], c0[1], nz);
  st_split_pair(f, 1, c0[2], c0[3], nz);
  st_split_pair(f, 2, c1[0], c1[1], nz);
  st_split_pair(f, 3, c1[2], c1[3], nz);
  f.any = st_warp_or(nz);
  return f;
}
/* B[k][n] = m[n][k0 + k]: the columns of B are rows of m (ld floats
 * apart; rows >= rows read as 0). */
ST_FN StSplit<2> st_frag_b_rows(StIn m, i64 ld, i64 rows, int k0) {
  const int lane = (int)(threadIdx.x & 31u), g = lane >> 2, t = lane & 3;
  const i64 row = g * ld + k0 + 2 * t;
  const bool ok = g < rows;
  StSplit<2> f;
  if (m.half) {
    f.p[0][0] = ok ? st_pair16(m, row) : 0u;
    f.p[0][1] = ok ? st_pair16(m, row + 8) : 0u;
    st_bf16_only(f);
    return f;
  }
  unsigned nz = 0;
  st_split_pair(f, 0, ok ? st_in(m, row) : 0.0f, ok ? st_in(m, row + 1) : 0.0f, nz);
  st_split_pair(f, 1, ok ? st_in(m, row + 8) : 0.0f, ok ? st_in(m, row + 9) : 0.0f, nz);
  f.any = st_warp_or(nz);
  return f;
}
/* B[k][n] = m[k][n]: the rows of B are rows of m (rows >= rows read as 0). */
ST_FN StSplit<2> st_frag_b_cols(StIn m, i64 ld, i64 rows) {
  const int lane = (int)(threadIdx.x & 31u), g = lane >> 2, t = lane & 3;
  if (m.half) { // (rows k and k + 1 of column g: two loads, one register)
    const unsigned short *b = (const unsigned short *)m.p;
    StSplit<2> f;
    ST_UNROLL for (int r = 0; r < 2; ++r) {
      const int k = 2 * t + 8 * r;
      const unsigned lo = k < rows ? b[k * ld + g] : 0u, hi = k + 1 < rows ? b[(k + 1) * ld + g] : 0u;
      f.p[0][r] = lo | (hi << 16);
    }
    st_bf16_only(f);
    return f;
  }
  float x[4];
  ST_UNROLL for (int e = 0; e < 4; ++e) {
    const int k = 2 * t + (e & 1) + 8 * (e >> 1);
    x[e] = k < rows ? st_in(m, k * ld + g) : 0.0f;
  }
  StSplit<2> f;
  unsigned nz = 0;
  st_split_pair(f, 0, x[0], x[1], nz);
  st_split_pair(f, 1, x[2], x[3], nz);
  f.any = st_warp_or(nz);
  return f;
}
ST_FN i64 st_min64(i64 a, i64 b) { return a < b ? a : b; }
/* A block's group of tiles: its warps take consecutive 16-row tiles of
 * one (batch, head) block `b`, the group's rows `first` to `first + span`
 * (span = 16 rows a warp), this warp's from r0 (`rows` of them: 0 past the
 * end). The blocks of the grid take the groups in turn (ST_BLOCK_GROUPS:
 * the loop is block-uniform, so the block can share staged rows). */
struct StGroup {
  i64 b, first, span, r0, rows;
};
ST_FN StGroup st_group(i64 grp, i64 n) {
  StGroup s;
  s.span = (i64)(blockDim.x >> 1);
  const i64 groups = (n + s.span - 1) / s.span;
  s.b = grp / groups;
  s.first = (grp % groups) * s.span;
  s.r0 = s.first + (i64)(threadIdx.x >> 5) * 16;
  s.rows = s.r0 < n ? st_min64(16, n - s.r0) : 0;
  return s;
}
#define ST_BLOCK_GROUPS(grp, bh, n)                                                             \
  for (i64 grp = blockIdx.x; grp < (bh) * (((n) + (blockDim.x >> 1) - 1) / (blockDim.x >> 1)); \
       grp += gridDim.x)
/* Rows 0 .. n-1 (n <= 32) of x, ld elements apart, copied by the whole
 * block into sm, four bytes a thread at a time (consecutive threads,
 * consecutive words: coalesced), ST_SM_LD(D) elements a row: the pad puts
 * the eight rows a fragment load reads in different banks. Returns the
 * copy, read by the fragment loads as x would be (rows ST_SM_LD(D) apart).
 * A staged chunk is read by every warp of the block instead of each warp
 * reading its fragments from global memory (FlashAttention-2's tiles in
 * shared memory). */
#define ST_SM_LD(D) ((D) + 8)
template <int D> ST_FN StIn st_stage32(unsigned *sm, StIn x, i64 ld, i64 n) {
  const int words = x.half ? D / 2 : D, ldw = x.half ? ST_SM_LD(D) / 2 : ST_SM_LD(D);
  const i64 ldx = x.half ? ld / 2 : ld; /* (ld even: CudaPlan.cpp's layouts) */
  const unsigned *src = (const unsigned *)x.p;
  for (int e = (int)threadIdx.x; e < 32 * words; e += (int)blockDim.x) {
    const int row = e / words, w = e % words;
    if (row < n)
      sm[row * ldw + w] = src[row * ldx + w];
  }
  return StIn{sm, x.half};
}

/* S = scale A B (16 rows x 32 columns) for a 16-row A tile at a and the 32
 * rows of b from j0 (the columns of S): s[nb][i] as C tiles. Rows of a lie
 * lda elements apart, of b ldb (D for [.., T, D] heads; more where the
 * heads of a packed [B, T, P, H, D] interleave: StRows). */
template <int D>
ST_FN void st_scores32(float (*s)[4], StIn a, i64 aRows, i64 lda, StIn b, i64 bRows, i64 ldb) {
  ST_UNROLL for (int nb = 0; nb < 4; ++nb)
    ST_UNROLL for (int i = 0; i < 4; ++i)
      s[nb][i] = 0.0f;
  ST_UNROLL for (int kc = 0; kc < D; kc += 16) {
    const StSplit<4> fa = st_frag_a(a, lda, aRows, kc);
    ST_UNROLL for (int nb = 0; nb < 4; ++nb)
      st_mma_split(s[nb], fa, st_frag_b_rows(st_in_plus(b, nb * 8 * ldb), ldb, bRows - nb * 8, kc));
  }
}
/* acc (16 x D, C tiles) += P m, P the 16 x 32 C tiles p (rounded to bf16
 * first where bf16), m's 32 rows (ldm elements apart). */
template <int D>
ST_FN void st_times_rows(float (*acc)[4], float (*p)[4], StIn m, i64 mRows, i64 ldm, int bf16) {
  ST_UNROLL for (int kc = 0; kc < 2; ++kc) {
    const StSplit<4> fa = st_frag_a_acc(p[2 * kc], p[2 * kc + 1], bf16);
    ST_UNROLL for (int nd = 0; nd < D / 8; ++nd)
      st_mma_split(acc[nd], fa,
                   st_frag_b_cols(st_in_plus(m, kc * 16 * ldm + nd * 8), ldm, mRows - kc * 16));
  }
}
/* Row h (0: g, 1: g + 8) of this lane's C values: the max, then the
 * lane group's (the four lanes holding that row). */
ST_FN float st_group_max(float v) {
  const int lane = (int)(threadIdx.x & 31u);
  v = fmaxf(v, st_lane_shfl(v, lane ^ 1));
  return fmaxf(v, st_lane_shfl(v, lane ^ 2));
}
ST_FN float st_group_sum(float v) {
  const int lane = (int)(threadIdx.x & 31u);
  v += st_lane_shfl(v, lane ^ 1);
  return v + st_lane_shfl(v, lane ^ 2);
}

template <int D>
ST_FN void st_flash_mma_fwd(i64 bh, i64 tq, i64 tk, int causal, float scale, i64 heads,
                            StRows rq, StRows rk, StRows ro, StIn q, StIn k, StIn v, void *o,
                            int halves) {
  __shared__ unsigned smK[32 * ST_SM_LD(D)], smV[32 * ST_SM_LD(D)];
  const int lane = (int)(threadIdx.x & 31u), g = lane >> 2, t = lane & 3;
  ST_BLOCK_GROUPS(grp, bh, tq) {
    const StGroup gr = st_group(grp, tq);
    const i64 b = gr.b, r0 = gr.r0, rows = gr.rows;
    const StIn qt = st_in_plus(q, st_row0(rq, heads, b) + r0 * rq.st),
               kb = st_in_plus(k, st_row0(rk, heads, b)), vb = st_in_plus(v, st_row0(rk, heads, b));
    // (the keys this warp's rows see, and those the block's see)
    const i64 kend = causal ? st_min64(tk, r0 + 16) : tk,
              bend = causal ? st_min64(tk, gr.first + gr.span) : tk;
    float acc[D / 8][4], m[2] = {ST_NEG_INF, ST_NEG_INF}, l[2] = {0.0f, 0.0f};
    ST_UNROLL for (int nd = 0; nd < D / 8; ++nd)
      ST_UNROLL for (int i = 0; i < 4; ++i)
        acc[nd][i] = 0.0f;
    for (i64 j0 = 0; j0 < bend; j0 += 32) {
      __syncthreads(); /* (every warp is done with the chunk before) */
      const StIn ks = st_stage32<D>(smK, st_in_plus(kb, j0 * rk.st), rk.st, st_min64(32, tk - j0));
      const StIn vs = st_stage32<D>(smV, st_in_plus(vb, j0 * rk.st), rk.st, st_min64(32, tk - j0));
      __syncthreads();
      if (rows == 0 || j0 >= kend)
        continue; /* (warp-uniform) */
      float s[4][4];
      st_scores32<D>(s, qt, rows, rq.st, ks, tk - j0, ST_SM_LD(D));
      float mx[2] = {m[0], m[1]};
      ST_UNROLL for (int nb = 0; nb < 4; ++nb)
        ST_UNROLL for (int i = 0; i < 4; ++i) {
          const i64 row = r0 + g + 8 * (i >> 1), key = j0 + nb * 8 + 2 * t + (i & 1);
          const bool ok = key < tk && (!causal || key <= row);
          s[nb][i] = ok ? s[nb][i] * scale : ST_NEG_INF;
          mx[i >> 1] = fmaxf(mx[i >> 1], s[nb][i]);
        }
      ST_UNROLL for (int h = 0; h < 2; ++h) {
        mx[h] = st_group_max(mx[h]);
        const float c = m[h] == ST_NEG_INF ? 0.0f : st_exp(m[h] - mx[h]);
        l[h] *= c;
        m[h] = mx[h];
        ST_UNROLL for (int nd = 0; nd < D / 8; ++nd) {
          acc[nd][2 * h] *= c;
          acc[nd][2 * h + 1] *= c;
        }
      }
      ST_UNROLL for (int nb = 0; nb < 4; ++nb)
        ST_UNROLL for (int i = 0; i < 4; ++i) {
          const float p = s[nb][i] == ST_NEG_INF ? 0.0f : st_exp(s[nb][i] - m[i >> 1]);
          s[nb][i] = p;
          l[i >> 1] += p;
        }
      st_times_rows<D>(acc, s, vs, tk - j0, ST_SM_LD(D), halves & 64);
    }
    if (rows == 0)
      continue;
    ST_UNROLL for (int h = 0; h < 2; ++h)
      l[h] = st_group_sum(l[h]);
    ST_UNROLL for (int nd = 0; nd < D / 8; ++nd)
      ST_UNROLL for (int i = 0; i < 4; ++i) {
        const int row = g + 8 * (i >> 1);
        if (row < rows)
          st_store_out(o, st_row0(ro, heads, b) + (r0 + row) * ro.st + nd * 8 + 2 * t + (i & 1),
                       l[i >> 1] > 0.0f ? acc[nd][i] / l[i >> 1] : 0.0f, halves);
      }
  }
}

/* dQ by query tiles, and each row's m, l and inner (st_flash_bwd_q's
 * stats): pass 1 the online max and sums (inner = sum_j P_ij dP_ij, dP =
 * g V^T), pass 2 dS = P (dP - inner) scale and dQ = dS K. */
template <int D>
ST_FN void st_flash_mma_bwd_q(i64 bh, i64 tq, i64 tk, int causal, float scale, i64 heads,
                              StRows rq, StRows rk, StRows ro, StIn q, StIn k, StIn v, StIn g_,
                              void *dq, int halves, float *stats) {
  __shared__ unsigned smK[32 * ST_SM_LD(D)], smV[32 * ST_SM_LD(D)];
  const int lane = (int)(threadIdx.x & 31u), g = lane >> 2, t = lane & 3;
  ST_BLOCK_GROUPS(grp, bh, tq) {
    const StGroup gr = st_group(grp, tq);
    const i64 b = gr.b, r0 = gr.r0, rows = gr.rows;
    const StIn qt = st_in_plus(q, st_row0(rq, heads, b) + r0 * rq.st),
               gt = st_in_plus(g_, st_row0(ro, heads, b) + r0 * ro.st);
    const StIn kb = st_in_plus(k, st_row0(rk, heads, b)), vb = st_in_plus(v, st_row0(rk, heads, b));
    const i64 kend = causal ? st_min64(tk, r0 + 16) : tk,
              bend = causal ? st_min64(tk, gr.first + gr.span) : tk;
    float m[2] = {ST_NEG_INF, ST_NEG_INF}, l[2] = {0.0f, 0.0f}, inner[2] = {0.0f, 0.0f};
    float s[4][4], dp[4][4];
    // (the chunk of K and V at j0 staged by the block; this warp's scores
    // from it, masked and scaled)
#define ST_MMA_STAGE                                                                            \
  __syncthreads();                                                                              \
  const StIn ks = st_stage32<D>(smK, st_in_plus(kb, j0 * rk.st), rk.st, st_min64(32, tk - j0)); \
  const StIn vs = st_stage32<D>(smV, st_in_plus(vb, j0 * rk.st), rk.st, st_min64(32, tk - j0)); \
  __syncthreads();                                                                              \
  if (rows == 0 || j0 >= kend)                                                                  \
    continue;
#define ST_MMA_SCORES                                                                           \
  st_scores32<D>(s, qt, rows, rq.st, ks, tk - j0, ST_SM_LD(D));                                 \
  st_scores32<D>(dp, gt, rows, ro.st, vs, tk - j0, ST_SM_LD(D));                                \
  ST_UNROLL for (int nb = 0; nb < 4; ++nb)                                                      \
    ST_UNROLL for (int i = 0; i < 4; ++i) {                                                     \
      const i64 row = r0 + g + 8 * (i >> 1), key = j0 + nb * 8 + 2 * t + (i & 1);              \
      const bool ok = key < tk && (!causal || key <= row);                                      \
      s[nb][i] = ok ? s[nb][i] * scale : ST_NEG_INF;                                            \
    }
    for (i64 j0 = 0; j0 < bend; j0 += 32) {
      ST_MMA_STAGE
      ST_MMA_SCORES
      float mx[2] = {m[0], m[1]};
      ST_UNROLL for (int nb = 0; nb < 4; ++nb)
        ST_UNROLL for (int i = 0; i < 4; ++i)
          mx[i >> 1] = fmaxf(mx[i >> 1], s[nb][i]);
      ST_UNROLL for (int h = 0; h < 2; ++h) {
        mx[h] = st_group_max(mx[h]);
        const float c = m[h] == ST_NEG_INF ? 0.0f : st_exp(m[h] - mx[h]);
        l[h] *= c;
        inner[h] *= c;
        m[h] = mx[h];
      }
      ST_UNROLL for (int nb = 0; nb < 4; ++nb)
        ST_UNROLL for (int i = 0; i < 4; ++i) {
          const float p = s[nb][i] == ST_NEG_INF ? 0.0f : st_exp(s[nb][i] - m[i >> 1]);
          l[i >> 1] += p;
          inner[i >> 1] += p * dp[nb][i];
        }
    }
    ST_UNROLL for (int h = 0; h < 2; ++h) {
      l[h] = st_group_sum(l[h]);
      inner[h] = l[h] > 0.0f ? st_group_sum(inner[h]) / l[h] : 0.0f;
    }
    float acc[D / 8][4];
    ST_UNROLL for (int nd = 0; nd < D / 8; ++nd)
      ST_UNROLL for (int i = 0; i < 4; ++i)
        acc[nd][i] = 0.0f;
    for (i64 j0 = 0; j0 < bend; j0 += 32) {
      ST_MMA_STAGE
      ST_MMA_SCORES
      ST_UNROLL for (int nb = 0; nb < 4; ++nb)
        ST_UNROLL for (int i = 0; i < 4; ++i) {
          const int h = i >> 1;
          const float p = s[nb][i] == ST_NEG_INF ? 0.0f : st_exp(s[nb][i] - m[h]) / l[h];
          s[nb][i] = p * (dp[nb][i] - inner[h]) * scale;
        }
      st_times_rows<D>(acc, s, ks, tk - j0, ST_SM_LD(D), halves & 64);
    }
#undef ST_MMA_STAGE
#undef ST_MMA_SCORES
    ST_UNROLL for (int nd = 0; nd < D / 8; ++nd)
      ST_UNROLL for (int i = 0; i < 4; ++i) {
        const int row = g + 8 * (i >> 1);
        if (row < rows)
          st_store_out(dq, st_row0(rq, heads, b) + (r0 + row) * rq.st + nd * 8 + 2 * t + (i & 1),
                       acc[nd][i], halves);
      }
    if (t == 0)
      ST_UNROLL for (int h = 0; h < 2; ++h)
        if (g + 8 * h < rows) {
          float *st = stats + 3 * (b * tq + r0 + g + 8 * h);
          st[0] = m[h];
          st[1] = l[h];
          st[2] = inner[h];
        }
  }
}

/* dK and dV by key tiles: for the queries that see them, P^T and dS^T
 * from the query rows' stats, dV = P^T g and dK = dS^T Q. */
template <int D>
ST_FN void st_flash_mma_bwd_kv(i64 bh, i64 tq, i64 tk, int causal, float scale, i64 heads,
                               StRows rq, StRows rk, StRows ro, StIn q, StIn k, StIn v, StIn g_,
                               const float *stats, void *dk, void *dv, int halves) {
  __shared__ unsigned smQ[32 * ST_SM_LD(D)], smG[32 * ST_SM_LD(D)];
  const int lane = (int)(threadIdx.x & 31u), g = lane >> 2, t = lane & 3;
  ST_BLOCK_GROUPS(grp, bh, tk) {
    const StGroup gr = st_group(grp, tk);
    const i64 b = gr.b, c0 = gr.r0, keys = gr.rows;
    const i64 k0 = st_row0(rk, heads, b) + c0 * rk.st;
    const StIn kt = st_in_plus(k, k0), vt = st_in_plus(v, k0);
    const StIn qb = st_in_plus(q, st_row0(rq, heads, b)), gb = st_in_plus(g_, st_row0(ro, heads, b));
    const float *sb = stats + 3 * b * tq;
    float ak[D / 8][4], av[D / 8][4];
    ST_UNROLL for (int nd = 0; nd < D / 8; ++nd)
      ST_UNROLL for (int i = 0; i < 4; ++i)
        ak[nd][i] = av[nd][i] = 0.0f;
    // The queries that see the block's keys, 32 at a time, staged by the
    // block; a warp skips the chunks whose queries all precede its keys.
    for (i64 i0 = causal ? gr.first : 0; i0 < tq; i0 += 32) {
      __syncthreads(); /* (every warp is done with the chunk before) */
      const StIn qs = st_stage32<D>(smQ, st_in_plus(qb, i0 * rq.st), rq.st, st_min64(32, tq - i0));
      const StIn gs = st_stage32<D>(smG, st_in_plus(gb, i0 * ro.st), ro.st, st_min64(32, tq - i0));
      __syncthreads();
      if (keys == 0 || (causal && i0 + 31 < c0))
        continue; /* (warp-uniform) */
      float s[4][4], dp[4][4];
      st_scores32<D>(s, kt, keys, rk.st, qs, tq - i0, ST_SM_LD(D));
      st_scores32<D>(dp, vt, keys, rk.st, gs, tq - i0, ST_SM_LD(D));
      ST_UNROLL for (int nb = 0; nb < 4; ++nb)
        ST_UNROLL for (int i = 0; i < 4; ++i) {
          const i64 key = c0 + g + 8 * (i >> 1), query = i0 + nb * 8 + 2 * t + (i & 1);
          const bool ok = query < tq && key < tk && (!causal || key <= query);
          const float *st = sb + 3 * (ok ? query : 0);
          const float p = ok ? st_exp(s[nb][i] * scale - st[0]) / st[1] : 0.0f;
          s[nb][i] = p;
          dp[nb][i] = ok ? p * (dp[nb][i] - st[2]) * scale : 0.0f;
        }
      st_times_rows<D>(av, s, gs, tq - i0, ST_SM_LD(D), halves & 64);
      st_times_rows<D>(ak, dp, qs, tq - i0, ST_SM_LD(D), halves & 64);
    }
    ST_UNROLL for (int nd = 0; nd < D / 8; ++nd)
      ST_UNROLL for (int i = 0; i < 4; ++i) {
        const int row = g + 8 * (i >> 1);
        if (row < keys) {
          const i64 at = k0 + row * rk.st + nd * 8 + 2 * t + (i & 1);
          st_store_out(dk, at, ak[nd][i], halves);
          st_store_out(dv, at, av[nd][i], halves);
        }
      }
  }
}

/* q, k, v, g: floats or two-byte bf16 (kernel-bf16-storage), as `halves`
 * says: bit 0 q, bit 1 k, bit 2 v, bit 3 g; the results (o, or dq, dk, dv)
 * f32, rounded to bf16 (bit 4) or in two bytes (bit 5): st_store_out; bit
 * 6 (the backward): P and dS rounded to bf16 before their products
 * (attention_grad's `bf16`), one tensor-core product each instead of three.
 * Rows as StRows say: rq of q and dq, rk of k, v, dk and dv, ro of o and g. */
#define ST_FLASH_MMA_FOR(D)                                                                      \
  extern "C" __global__ void st_flash_mma_fwd_d##D(                                              \
      i64 bh, i64 tq, i64 tk, int causal, float scale, i64 heads, StRows rq, StRows rk,          \
      StRows ro, const void *q, const void *k, const void *v, int halves, void *o) {             \
    st_flash_mma_fwd<D>(bh, tq, tk, causal, scale, heads, rq, rk, ro, StIn{q, halves & 1},      \
                        StIn{k, halves & 2}, StIn{v, halves & 4}, o, halves);                    \
  }                                                                                              \
  extern "C" __global__ void st_flash_mma_bwd_q_d##D(                                            \
      i64 bh, i64 tq, i64 tk, int causal, float scale, i64 heads, StRows rq, StRows rk,          \
      StRows ro, const void *q, const void *k, const void *v, const void *g, int halves,         \
      void *dq, float *stats) {                                                                  \
    st_flash_mma_bwd_q<D>(bh, tq, tk, causal, scale, heads, rq, rk, ro, StIn{q, halves & 1},    \
                          StIn{k, halves & 2}, StIn{v, halves & 4}, StIn{g, halves & 8}, dq,     \
                          halves, stats);                                                        \
  }                                                                                              \
  extern "C" __global__ void st_flash_mma_bwd_kv_d##D(                                           \
      i64 bh, i64 tq, i64 tk, int causal, float scale, i64 heads, StRows rq, StRows rk,          \
      StRows ro, const void *q, const void *k, const void *v, const void *g, int halves,         \
      const float *stats, void *dk, void *dv) {                                                  \
    st_flash_mma_bwd_kv<D>(bh, tq, tk, causal, scale, heads, rq, rk, ro, StIn{q, halves & 1},   \
                           StIn{k, halves & 2}, StIn{v, halves & 4}, StIn{g, halves & 8}, stats, \
                           dk, dv, halves);                                                      \
  }
#if ST_OPS_IN(2)
ST_FLASH_MMA_FOR(16)
#endif
#if ST_OPS_IN(3)
ST_FLASH_MMA_FOR(32)
#endif
#if ST_OPS_IN(4)
ST_FLASH_MMA_FOR(64)
#endif

#if ST_OPS_IN(5)
/* The packed heads (kernel-attention-layout) for the kernels that read
 * [BH, T, D] floats: dst[bh, t, :] = the row at StRows r of src (floats,
 * or two-byte bf16 where half), widened; and the result put back, rounded
 * or in two bytes as `halves` says (st_store_out). */
extern "C" __global__ void st_heads_gather(i64 bh, i64 t, i64 d, i64 heads, StRows r,
                                           const void *src, int half, float *dst) {
  ST_LOOP(e, bh * t * d) {
    const i64 b = e / (t * d), i = (e / d) % t;
    dst[e] = st_in(StIn{src, half}, st_row0(r, heads, b) + i * r.st + e % d);
  }
}
extern "C" __global__ void st_heads_scatter(i64 bh, i64 t, i64 d, i64 heads, StRows r,
                                            const float *src, void *dst, int halves) {
  ST_LOOP(e, bh * t * d) {
    const i64 b = e / (t * d), i = (e / d) % t;
    st_store_out(dst, st_row0(r, heads, b) + i * r.st + e % d, src[e], halves);
  }
}

/* y[r, :] = table[ids[r], :] (ids checked on the host). */
extern "C" __global__ void st_embedding(i64 rows, i64 d, const float *table, const float *ids,
                                        float *y) {
  ST_LOOP(e, rows * d) {
    i64 r = e / d, j = e % d;
    y[e] = table[(i64)ids[r] * d + j];
  }
}

/* y ([V, d]) = 0, then y[ids[r], :] += g[r, :], rows in order (the
 * reference's loop), with no atomics: each id's rows as a list in order,
 * then a thread per (id, column) adding its rows' values down its list,
 * from 0. (A thread per column walking every row, as before, made each
 * column a chain of as many dependent read-modify-writes as there are
 * rows: 2 ms of an 8,192-row step on an H200.) The lists: rows in chunks
 * of `chunk`; a thread per row finds the next row of its id in its chunk
 * (next[r], -1 at the chunk's end) and whether it is its chunk's first
 * (first[c * V + id] = r; first is all -1 before) or last (last[...] = r)
 * of its id; a thread per id links each chunk's last row to the next
 * chunk's first (head[id]: its first row, -1 for none). */
extern "C" __global__ void st_scatter_links(i64 rows, i64 vocab, i64 chunk, const float *ids,
                                            int *next, int *first, int *last) {
  ST_LOOP(r, rows) {
    const i64 c = r / chunk, c0 = c * chunk, c1 = c0 + chunk < rows ? c0 + chunk : rows;
    const float id = ids[r];
    bool leads = true;
    for (i64 q = c0; q < r && leads; ++q)
      leads = ids[q] != id;
    int n = -1;
    for (i64 q = r + 1; q < c1 && n < 0; ++q)
      if (ids[q] == id)
        n = (int)q;
    next[r] = n;
    const i64 slot = c * vocab + (i64)id;
    if (leads)
      first[slot] = (int)r;
    if (n < 0)
      last[slot] = (int)r;
  }
}
extern "C" __global__ void st_scatter_heads(i64 chunks, i64 vocab, const int *first,
                                            const int *last, int *next, int *head) {
  ST_LOOP(v, vocab) {
    int h = -1, tail = -1;
    for (i64 c = 0; c < chunks; ++c) {
      const int f = first[c * vocab + v];
      if (f < 0)
        continue;
      if (tail < 0)
        h = f;
      else
        next[tail] = f;
      tail = last[c * vocab + v];
    }
    head[v] = h;
  }
}
extern "C" __global__ void st_scatter_rows(i64 vocab, i64 d, const int *head, const int *next,
                                           const float *g, float *y) {
  ST_LOOP(e, vocab * d) {
    const i64 v = e / d, j = e % d;
    float s = 0.0f;
    for (int r = head[v]; r >= 0; r = next[r])
      s += g[(i64)r * d + j];
    y[e] = s;
  }
}

extern "C" __global__ void st_one_hot(i64 rows, i64 c, const float *ids, float *y) {
  ST_LOOP(r, rows) y[r * c + (i64)ids[r]] = 1.0f;
}

/* loss[r] = log sum_j exp(x[r, j] - max) + max - x[r, t[r]]: KernelMath.inc's
 * st_cross_entropy_row, as the CPU executors compute it. */
extern "C" __global__ void st_cross_entropy_rows(i64 rows, i64 c, const float *logits,
                                                 const float *tgt, float *loss) {
  ST_LOOP(r, rows) {
    loss[r] = st_cross_entropy_row(logits + r * c, c, (i64)tgt[r]);
  }
}

/* A block reduction whose result every thread gets (max, or sum); fixed
 * order for a given blockDim (== 256). */
ST_FN float st_block_all(float v, int isMax) {
  __shared__ float part[8];
  __shared__ float result;
  for (int o = 16; o > 0; o >>= 1) {
    float w = __shfl_down_sync(0xffffffffu, v, o);
    v = isMax ? fmaxf(v, w) : v + w;
  }
  if ((threadIdx.x & 31) == 0)
    part[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float s = part[0];
    for (int w = 1; w < 8; ++w)
      s = isMax ? fmaxf(s, part[w]) : s + part[w];
    result = s;
  }
  __syncthreads();
  float r = result;
  __syncthreads(); /* before a next call reuses part and result */
  return r;
}

/* The same losses with a block per row (blockDim.x == 256): for wide rows
 * (a vocabulary), where a thread per row would read thousands of values
 * alone. */
extern "C" __global__ void st_cross_entropy_block_rows(i64 rows, i64 c, const float *logits,
                                                       const float *tgt, float *loss) {
  for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
    const float *x = logits + r * c;
    float mx = __int_as_float(0xff800000); /* -inf */
    for (i64 j = threadIdx.x; j < c; j += blockDim.x)
      mx = fmaxf(mx, x[j]);
    mx = st_block_all(mx, 1);
    float sum = 0.0f;
    for (i64 j = threadIdx.x; j < c; j += blockDim.x)
      sum += st_exp(x[j] - mx);
    sum = st_block_all(sum, 0);
    if (threadIdx.x == 0)
      loss[r] = logf(sum) + mx - x[(i64)tgt[r]];
  }
}

/* y[0] = (sum of x in order) / n: the reference's order, so one thread
 * adds, but from shared memory: the block copies x in 2,048 at a time,
 * coalesced, then thread 0 adds them (one thread reading x from global
 * memory itself waited out a load's latency every few elements: 0.3 ms
 * for gpt-small's 8,192 losses in the H200 profiles). One block. */
extern "C" __global__ void st_mean(i64 n, const float *x, float *y) {
  __shared__ float chunk[2048];
  if (blockIdx.x != 0)
    return;
  float s = 0.0f;
  for (i64 e0 = 0; e0 < n; e0 += 2048) {
    const i64 m = n - e0 < 2048 ? n - e0 : 2048;
    for (i64 e = threadIdx.x; e < m; e += blockDim.x)
      chunk[e] = x[e0 + e];
    __syncthreads();
    if (threadIdx.x == 0)
      for (i64 e = 0; e < m; ++e)
        s += chunk[e];
    __syncthreads();
  }
  if (threadIdx.x == 0)
    y[0] = n ? s / (float)n : 0.0f;
}

extern "C" __global__ void st_descend(i64 n, const float *p, const float *dir, const float *lr,
                                      float *y) {
  ST_LOOP(e, n) y[e] = p[e] - lr[0] * dir[e];
}

/* Newton-Schulz's norm in two launches: part[b] = the sum of squares of
 * x[b span .. (b + 1) span) (a block of 256 per span; one block alone
 * over all of a 768 x 3,072 matrix read it at one SM's rate), then
 * norm[0] = sqrt(the parts' sum) + 1e-7 (one block of 256). The split is
 * fixed by n: runs repeat bit for bit. */
extern "C" __global__ void st_sumsq_parts(i64 n, i64 span, const float *x, float *part) {
  const i64 lo = blockIdx.x * span, hi = lo + span < n ? lo + span : n;
  float v = 0.0f;
  for (i64 e = lo + threadIdx.x; e < hi; e += blockDim.x)
    v += x[e] * x[e];
  v = st_block_sum(v);
  if (threadIdx.x == 0)
    part[blockIdx.x] = v;
}
extern "C" __global__ void st_norm_plus_eps(i64 parts, const float *part, float *norm) {
  float v = 0.0f;
  for (i64 e = threadIdx.x; e < parts; e += blockDim.x)
    v += part[e];
  v = st_block_sum(v);
  if (threadIdx.x == 0)
    norm[0] = sqrtf(v) + 1e-7f;
}

/* X = G / norm, as [r, s] with r <= s: G [m, n] transposed when m > n. */
extern "C" __global__ void st_ns_start(i64 m, i64 n, int transpose, const float *g,
                                       const float *norm, float *X) {
  ST_LOOP(e, m * n) {
    i64 i = e / n, j = e % n;
    X[transpose ? j * m + i : e] = g[e] / norm[0];
  }
}

/* Muon's Newton-Schulz with bf16 matrices (train.newton_schulz's bf16):
 * bf16 bits of a value, from KernelMath.inc's rounding. */
ST_FN unsigned short st_bf16_bits(float v) {
  return (unsigned short)((unsigned int)st_bits_of(st_round_bf16(v)) >> 16);
}
/* x = round(a x + y), kept in f32, and its bf16 bits in xh (y null: 0). */
extern "C" __global__ void st_ns_x16(i64 n, float a, float *x, const float *y,
                                     unsigned short *xh) {
  ST_LOOP(e, n) {
    const float v = st_round_bf16(a * x[e] + (y ? y[e] : 0.0f));
    x[e] = v;
    xh[e] = st_bf16_bits(v);
  }
}
/* B = round(b A + P) as bf16 bits: A in bf16 bits, P = c A A in f32. */
extern "C" __global__ void st_ns_b16(i64 n, float b, const unsigned short *a, const float *p,
                                     unsigned short *out) {
  ST_LOOP(e, n) out[e] = st_bf16_bits(b * st_widen(a[e]) + p[e]);
}

/* y = a x + y (a scalar). */
extern "C" __global__ void st_axpy(i64 n, float a, const float *x, float *y) {
  ST_LOOP(e, n) y[e] += a * x[e];
}

/* x = a x + y. */
extern "C" __global__ void st_scale_add(i64 n, float a, float *x, const float *y) {
  ST_LOOP(e, n) x[e] = a * x[e] + y[e];
}

/* *flag = 1 where any tensor of the table holds an inf or a NaN (equal
 * stores race harmlessly); the host zeroes it first. table: entries, total
 * blocks, then per entry its pointer, count and first block; a block
 * covers ST_FINITE_CHUNK elements of one tensor. */
#define ST_FINITE_CHUNK 4096
extern "C" __global__ void st_flag_nonfinite(const long long *table, float *flag) {
  const long long entries = table[0], blocks = table[1];
  for (long long b = blockIdx.x; b < blocks; b += gridDim.x) {
    long long lo = 0, hi = entries - 1; // the entry whose blocks hold b
    while (lo < hi) {
      const long long mid = (lo + hi + 1) / 2;
      if (table[2 + 3 * mid + 2] <= b)
        lo = mid;
      else
        hi = mid - 1;
    }
    const float *p = (const float *)table[2 + 3 * lo];
    const long long n = table[2 + 3 * lo + 1];
    const long long start = (b - table[2 + 3 * lo + 2]) * ST_FINITE_CHUNK;
    const long long end = start + ST_FINITE_CHUNK < n ? start + ST_FINITE_CHUNK : n;
    bool bad = false;
    for (long long i = start + threadIdx.x; i < end; i += blockDim.x)
      bad = bad || !(p[i] - p[i] == 0.0f); // x - x is 0 for finite x only
    if (bad)
      *flag = 1.0f;
  }
}

/* The GEMM path's train.attention {bf16}: each row of S (rows of len,
 * query row r % tq, causal: keys 0..r % tq) becomes its weights in place,
 * as OpSemantics.h's attentionChunkWeights makes them (the masked keys 0),
 * a thread a row. */
extern "C" __global__ void st_attention_weights_rows(i64 rows, i64 tq, i64 len, int causal,
                                                     float *s) {
  ST_LOOP(r, rows) {
    float *x = s + r * len;
    const i64 i = r % tq, n = causal ? (i + 1 < len ? i + 1 : len) : len;
    float m = ST_NEG_INF, l = 0.0f, last = ST_NEG_INF;
    for (i64 j = 0; j < n; ++j)
      last = fmaxf(last, x[j]);
    for (i64 j0 = 0; j0 < n; j0 += 32) {
      const i64 j1 = j0 + 32 < n ? j0 + 32 : n;
      for (i64 j = j0; j < j1; ++j)
        m = fmaxf(m, x[j]);
      const float f = st_exp(m - last);
      float sum = 0.0f;
      for (i64 j = j0; j < j1; ++j) {
        const float e = st_exp(x[j] - m);
        sum += e;
        x[j] = st_round_bf16(e) * f;
      }
      l += f * sum;
    }
    for (i64 j = 0; j < n; ++j)
      x[j] /= l;
    for (i64 j = n; j < len; ++j)
      x[j] = 0.0f;
  }
}

/* x rounded to bf16 in place, kept in f32 (a GEMM result stored in bf16
 * where values take four bytes). */
extern "C" __global__ void st_round_f32(i64 n, float *x) {
  ST_LOOP(e, n) x[e] = st_round_bf16(x[e]);
}

/* y = x + bias on every row of n (a GEMM's bias where cuBLASLt has no BIAS
 * epilogue for it: the product comes in f32), in f32 or, half != 0, as the
 * bf16 bits of the sum rounded to nearest even. */
extern "C" __global__ void st_add_bias(i64 count, i64 n, const float *x, const float *bias,
                                       void *y, int half) {
  ST_LOOP(e, count) {
    const float v = x[e] + bias[e % n];
    if (half)
      ((unsigned short *)y)[e] = (unsigned short)((unsigned int)st_bits_of(st_round_bf16(v)) >> 16);
    else
      ((float *)y)[e] = v;
  }
}

/* y = x * gelu'(a) (a GEMM's DGELU epilogue where cuBLASLt has none for
 * it: the product x comes in f32; a, GELU's input, in f32 or, ahalf != 0,
 * as bf16 bits), in f32 or, half != 0, as the bf16 bits of the product
 * rounded to nearest even. */
extern "C" __global__ void st_dgelu(i64 count, const float *x, const void *a, int ahalf, void *y,
                                    int half) {
  ST_LOOP(e, count) {
    const float in = ahalf ? st_widen(((const unsigned short *)a)[e]) : ((const float *)a)[e];
    const float v = x[e] * st_gelu_grad(in);
    if (half)
      ((unsigned short *)y)[e] = (unsigned short)((unsigned int)st_bits_of(st_round_bf16(v)) >> 16);
    else
      ((float *)y)[e] = v;
  }
}

/* GELU with its auxiliary output where cuBLASLt has no GELU_AUX epilogue
 * for a GEMM: the product x comes in f32; s = x + bias (none: bias null);
 * y[e] = gelu(s) and y[count + e] = s, in f32 or, half != 0, as the bf16
 * bits of each rounded to nearest even. */
ST_FN void st_put(void *y, i64 e, float v, int half) {
  if (half)
    ((unsigned short *)y)[e] = (unsigned short)((unsigned int)st_bits_of(st_round_bf16(v)) >> 16);
  else
    ((float *)y)[e] = v;
}
extern "C" __global__ void st_gelu_aux(i64 count, i64 n, const float *x, const float *bias,
                                       void *y, int half) {
  ST_LOOP(e, count) {
    const float s = bias ? x[e] + bias[e % n] : x[e];
    st_put(y, e, st_gelu(s), half);
    st_put(y, count + e, s, half);
  }
}

/* bf16 bits of x rounded to nearest even (KernelMath.inc's st_round_bf16). */
extern "C" __global__ void st_to_bf16(i64 n, const float *x, unsigned short *y) {
  ST_LOOP(e, n) y[e] = (unsigned short)((unsigned int)st_bits_of(st_round_bf16(x[e])) >> 16);
}
#endif /* ST_OPS_IN(5) */
