//===- KernelPasses.td - passes producing `kernel` IR ------*- tablegen -*-===//
#ifndef STRETTO_KERNEL_PASSES
#define STRETTO_KERNEL_PASSES

include "mlir/Pass/PassBase.td"

def KernelFuseElementwise : Pass<"kernel-fuse-elementwise", "::stretto::train::ModelOp"> {
  let summary = "Groups chains of `train` elementwise ops into `kernel.elementwise`";
  let description = [{
    In every phase of a `train.model` (`train.step`, `train.update`,
    `train.outer`), each elementwise op (add, sub, mul, div, max, min, pow,
    gt, neg, exp, log, sqrt, rsqrt, tanh, cos, gelu, gelu_grad, relu, silu, erf, and
    `train.descend`, which is p - lr·dir) whose result is used outside a
    kernel becomes the root of one `kernel.elementwise`. The kernel absorbs,
    transitively, every elementwise producer of its operands that

    - has the root's result type (a smaller producer, e.g. a learning-rate
      scalar, would be recomputed for every element: it stays outside, as
      its own kernel, and is broadcast in),
    - has all its uses in the kernel (single-use intermediates: a value also
      read elsewhere is materialised once),
    - has the root's pipeline `stage`, and
    - is not a `train.round_bf16` of a value that something else reads
      unrounded (a linear layer's sum that its GELU reads in f32): that
      rounding is a stored value of its own, so that its readers read two
      bytes rather than keep the f32 sum alive for them.

    A producer read by several kernels is recomputed in each of them instead
    of materialised when it is one instruction (add, sub, mul, max, min,
    neg, relu) with at most one operand of its result's type, the others
    smaller and broadcast (a bias add, a scale by a scalar), and every user
    is an elementwise op of its type, block and stage: each kernel then
    reads that operand where it would have read the result (no more bytes)
    and the producer's own pass disappears. A bias add read by GELU in the
    forward and by its derivative in the backward is the case in point.

    First, a `train.reshape` whose operand is the only use of an
    elementwise op with operands all of its result's type, and whose users
    are all fusible, moves above that op: the op reads reshaped operands
    (views) and makes the reshape's type, so it joins the kernel of its
    reader (norm_grad's `[rows, d]` gradient rounded to bf16 and then
    reshaped to `[b, t, d]` for the residual add: one kernel, not a
    rounding pass of its own). The values do not change.

    Other operands become kernel operands, deduplicated, in order of first
    use. Kernels have one result; `max-ops` bounds their size (0: none).

    Before:
    ```mlir
    %q = train.div %v, %bc : tensor<64x128xf32>, tensor<f32> -> tensor<64x128xf32>
    %s = train.sqrt %q : tensor<64x128xf32>
    %d = train.add %s, %eps : tensor<64x128xf32>, tensor<f32> -> tensor<64x128xf32>
    ```
    After:
    ```mlir
    %d = kernel.elementwise (%v, %bc, %eps) : tensor<64x128xf32>, tensor<f32>, tensor<f32> -> tensor<64x128xf32> {
    ^bb0(%a: f32, %b: f32, %c: f32):
      %0 = kernel.div %a, %b : f32
      %1 = kernel.sqrt %0 : f32
      %2 = kernel.add %1, %c : f32
      kernel.yield %2 : f32
    }
    ```
  }];
  let dependentDialects = ["::stretto::kernel::KernelDialect"];
  let options = [
    Option<"maxOps", "max-ops", "int64_t", "0",
           "largest number of train ops in one kernel (0: unbounded)">,
  ];
}

def KernelLowerMatmul : Pass<"kernel-lower-matmul", "::stretto::train::ModelOp"> {
  let summary = "Turns `train.matmul` into library GEMMs, folding transposes into flags";
  let description = [{
    In every phase of a `train.model`, each `train.matmul` becomes a
    `kernel.gemm`. An operand produced by a `train.transpose` that swaps the
    last two dims (and keeps the others) is replaced by the transpose's input
    with the GEMM's transpose flag set, so the backward pass's `xᵀ·dy` and
    `dy·wᵀ` make no transposed copies; a transpose left without uses is
    erased. The op keeps its pipeline `stage`.

    Before:
    ```mlir
    %xt = train.transpose %x [1, 0] : tensor<64x128xf32> -> tensor<128x64xf32>
    %dw = train.matmul %xt, %dy : tensor<128x64xf32>, tensor<64x384xf32> -> tensor<128x384xf32>
    ```
    After:
    ```mlir
    %dw = kernel.gemm %x, %dy transpose_a : tensor<64x128xf32>, tensor<64x384xf32> -> tensor<128x384xf32>
    ```
  }];
  let dependentDialects = ["::stretto::kernel::KernelDialect"];
}

def KernelFuseReductions : Pass<"kernel-fuse-reductions", "::stretto::train::ModelOp"> {
  let summary = "Fuses a `train.reduce_sum` into the elementwise kernel that feeds it";
  let description = [{
    Runs after `kernel-fuse-elementwise`. A `train.reduce_sum` whose operand
    is the one result of a `kernel.elementwise` used by nothing else (same
    block and pipeline `stage`) becomes one `kernel.reduce`: the kernel's
    body summed over the reduced dims, so the elementwise values are never
    stored. It applies when the reduced dims are a leading run (column sums:
    bias gradients) or a trailing run (row sums: norm backward, gradient
    norms) of the non-unit dims, and every broadcast operand is contiguous
    or constant along the kernel's inner loop (the reduced run for row sums,
    the kept run for column sums). Other reductions are left as they are.

    Before:
    ```mlir
    %sq = kernel.elementwise (%g) : tensor<64x128xf32> -> tensor<64x128xf32> {
    ^bb0(%a: f32):
      %0 = kernel.mul %a, %a : f32
      kernel.yield %0 : f32
    }
    %n = train.reduce_sum %sq [0, 1] : tensor<64x128xf32> -> tensor<f32>
    ```
    After:
    ```mlir
    %n = kernel.reduce (%g) sum [0, 1] of [64, 128] : tensor<64x128xf32> -> tensor<f32> {
    ^bb0(%a: f32):
      %0 = kernel.mul %a, %a : f32
      kernel.yield %0 : f32
    }
    ```
  }];
  let dependentDialects = ["::stretto::kernel::KernelDialect"];
}

def KernelLowerRows : Pass<"kernel-lower-rows", "::stretto::train::ModelOp"> {
  let summary = "Turns `train.softmax`, `train.layer_norm` and `train.rms_norm` into `kernel.rows`";
  let description = [{
    In every phase of a `train.model`, each softmax (causal or not), layer
    norm and RMS norm becomes a `kernel.rows` of the same function, operands
    and `eps`, keeping its pipeline `stage`: one generated row kernel each,
    for the C++ and the CUDA C targets.

    Before:
    ```mlir
    %y = train.layer_norm %x, %g, %b : tensor<64x128xf32>, tensor<128xf32>, tensor<128xf32>
    ```
    After:
    ```mlir
    %y = kernel.rows "layer_norm"(%x, %g, %b) {eps = 1.0e-05 : f64} : tensor<64x128xf32>, tensor<128xf32>, tensor<128xf32> -> tensor<64x128xf32>
    ```
  }];
  let dependentDialects = ["::stretto::kernel::KernelDialect"];
}

def KernelBf16Storage : Pass<"kernel-bf16-storage", "::stretto::train::ModelOp"> {
  let summary = "Stores in bf16 the rounded values whose readers take bf16";
  let description = [{
    Runs last in the kernel pipeline. A `kernel.elementwise` with one f32
    result whose body yields a `kernel.round_bf16` (a rounding point of
    `train-mixed-precision`: its values are bf16 already) and whose every
    reader takes bf16 as it is gets `store_bf16`. Such readers are a
    `kernel.gemm` (cuBLASLt's bf16 operand, no conversion before the GEMM),
    a `kernel.elementwise` or `kernel.reduce` (its load widens), a
    `train.reduce_sum` (the CUDA runtime's column sums widen), a norm's
    `kernel.rows` reading it as the input x or a `train.norm_grad` as x or
    as the output's gradient dy (the row functions widen), a `train.attention` or `train.attention_grad` (q, k,
    v and the output's gradient: the fused kernels' loads widen), and a
    `train.reshape`, `train.transpose` or a `train.slice` of whole leading
    rows (every dim before its axis 1: a view) whose readers are such
    readers (bf16 moved as bf16). The CUDA runtime keeps the value in two bytes an
    element; the C++ runtimes keep the same rounded value in four. No value
    changes: a kernel that yields anything else, has several results, or
    has another reader (softmax, a slice of inner rows, norm_grad's gain,
    a gradient handed on) is left as it is.

    A `kernel.gemm` with an f32 result whose every reader (through
    reshapes) is a fused kernel that rounds it to bf16 before any other use
    (every use of its block argument is a `kernel.round_bf16`: the rounding
    `train-mixed-precision` put after the matmul) gets `store_bf16` too:
    cuBLASLt writes the rounded product in bf16 and the kernels load it.
    Rounding a value twice gives what rounding it once does, so no value
    changes. f32 plans have no rounding points, so nothing is marked.

    A `store_bf16` kernel that only rounds a value stored rounded in two
    bytes already (a `store_bf16` GEMM's result, or a view of one) is a
    copy: its readers read that value and the kernel goes (the GEMM before
    a norm's backward, whose rounding kernel was there for norm_grad's dy).

    Last, a `train.attention` or `train.attention_grad`, or a norm's
    `kernel.rows` (not a softmax), whose one reader is such a `store_bf16`
    kernel that only rounds it takes the rounding in: the attention gets
    the discardable unit attribute `kernel.store_bf16`, the rows op its
    `store_bf16` (the result is rounded to bf16 and stored as a
    `store_bf16` value is), the kernel's readers read it, and the kernel
    goes: one launch and a four-byte round trip of the result fewer.

    Before:
    ```mlir
    %wb = kernel.elementwise(%w) : tensor<128x384xf32> -> tensor<128x384xf32> {
    ^bb0(%a: f32):
      %r = kernel.round_bf16 %a : f32
      kernel.yield %r : f32
    }
    %y = kernel.gemm %x, %wb : tensor<64x128xf32>, tensor<128x384xf32> -> tensor<64x384xf32>
    ```
    After:
    ```mlir
    %wb = kernel.elementwise(%w) {store_bf16} : tensor<128x384xf32> -> tensor<128x384xf32> {
    ^bb0(%a: f32):
      %r = kernel.round_bf16 %a : f32
      kernel.yield %r : f32
    }
    %y = kernel.gemm %x, %wb : tensor<64x128xf32>, tensor<128x384xf32> -> tensor<64x384xf32>
    ```
  }];
  let dependentDialects = ["::stretto::kernel::KernelDialect"];
}


def KernelNormGradEpilogue : Pass<"kernel-norm-grad-epilogue", "::stretto::train::ModelOp"> {
  let summary = "Adds the residual gradient to norm_grad's dx rows and rounds them where they are made";
  let description = [{
    Runs after `kernel-bf16-storage`. A transformer block's backward reads
    a norm's dx rows (a `train.slice` of `train.norm_grad`'s leading rows,
    maybe reshaped) only to add them to the residual stream's gradient,
    in a fused kernel of its own that reads them back: in f32
    `dx + r`; in a bf16 plan `bf16(r + bf16(dx))` stored in two bytes, or
    `bf16(dx)` alone after the final norm. Where that kernel is the view's
    one reader, has one result of the view's type, is on the norm_grad's
    pipeline stage, and its body is exactly one of those forms, the
    norm_grad takes it in: `plus %r` (where `r` has the norm_grad input's
    type and is defined before it) and, for the bf16 forms, the
    discardable attribute `kernel.store_bf16`. The kernel's readers read
    the view, and the kernel goes: one launch and a round trip of the rows
    fewer a norm (24 kernels of gpt-small's step). The bf16 forms fold only
    where the kernel is `store_bf16` (its readers take two-byte values,
    which the rows then are) and the f32 form only where it is not. No
    value changes: the runtimes compute `bf16(r + bf16(dx))` in the same
    order.

    Before:
    ```mlir
    %g = train.norm_grad %x, %gamma, %dy centered {eps = 1.0e-05 : f64} : tensor<4x8xf32>, tensor<8xf32> -> tensor<6x8xf32>
    %dx = train.slice %g axis = 0 offset = 0 : tensor<6x8xf32> -> tensor<4x8xf32>
    %s = kernel.elementwise(%dx, %r) {store_bf16} : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32> {
    ^bb0(%a: f32, %b: f32):
      %0 = kernel.round_bf16 %a : f32
      %1 = kernel.add %b, %0 : f32
      %2 = kernel.round_bf16 %1 : f32
      kernel.yield %2 : f32
    }
    ```
    After:
    ```mlir
    %g = train.norm_grad %x, %gamma, %dy plus %r : tensor<4x8xf32> centered {eps = 1.0e-05 : f64, kernel.store_bf16} : tensor<4x8xf32>, tensor<8xf32> -> tensor<6x8xf32>
    %dx = train.slice %g axis = 0 offset = 0 : tensor<6x8xf32> -> tensor<4x8xf32>
    ```
  }];
  let dependentDialects = ["::stretto::kernel::KernelDialect"];
}

def KernelGemmEpilogue : Pass<"kernel-gemm-epilogue", "::stretto::train::ModelOp"> {
  let summary = "Moves a GEMM's bias add, the GELU after it (keeping its input), GELU's backward after it and the bias gradient beside it into the GEMM (cuBLASLt's BIAS, GELU_AUX, DGELU and BGRADA epilogues)";
  let description = [{
    Runs after `kernel-bf16-storage`. A `kernel.gemm` without a bias whose
    every reader is a `kernel.elementwise` (same block and pipeline `stage`)
    that adds one and the same vector of the result's N columns to it,
    first thing (the GEMM's block argument has one use: that `kernel.add`),
    takes the vector as its `bias`: the sum is made in f32 inside the GEMM,
    before the result is rounded or stored (on the GPU, cuBLASLt's BIAS
    epilogue). Each reader then reads the sum where it read the product;
    the add goes, and the vector's operand with it when nothing else reads
    it. No value changes (the same f32 sum, rounded where it was).

    When every reader now rounds the sum to bf16 first (a bf16 plan:
    `train-mixed-precision` rounds a linear layer's product only after its
    bias add), the GEMM stores the sum rounded (`store_bf16`, as
    `kernel-bf16-storage` would). A reader left doing nothing but handing
    the value on (`kernel.yield` of its argument, or of its rounding when
    both it and the GEMM are `store_bf16`) goes too: its readers read the
    GEMM. One launch and a round trip of the result fewer for each such
    bias add. A product rounded before its add, and a vector stored in bf16
    (the epilogue reads f32), are left as they are.

    The same for a GELU's backward: a `kernel.gemm` whose every reader
    multiplies the product, first thing, by `kernel.gelu_grad` of one and
    the same input of the result's type takes that input as its `dgelu`
    (the product times GELU's derivative made in f32 inside the GEMM; on
    the GPU, cuBLASLt's DGELU epilogue with the input as its auxiliary
    operand); the mul goes, and the gelu_grad when nothing else reads it.
    In a bf16 plan (`train-mixed-precision` rounds neither factor, only
    their product) the GEMM then stores the rounded product and the
    rounding kernel goes: a GPT's MLP backward makes the input gradient of
    its GELU in the GEMM that makes the output gradient.

    And for a linear layer's bias gradient: a `kernel.gemm` making a weight
    gradient `op(a) b` (2-D, `b` not transposed, f32, `alpha` 1, no other
    epilogue) whose `b` (or another reshape of the same values with b's
    columns last) is also summed over every dim but the last by a
    `train.reduce_sum` in the same block and stage becomes one GEMM with
    `bias_grad`: its result `[M + 1, N]` holds the product and, in its
    last row, the column sums (cuBLASLt's BGRADA epilogue); the weight
    gradient is its leading-row slice, the bias gradient its last row
    reshaped (views). It is made where the later of the two was, when the
    earlier one's readers all come after that. One launch and a read of
    dy fewer for each linear layer's backward.

    And for a GELU of a linear layer's output: a `kernel.gemm` (f32, not
    stored rounded, no `dgelu`) read by one `kernel.elementwise` that only
    applies `kernel.gelu` to it (and rounds the result, `store_bf16`) and
    by others that read the sum itself (an f32 plan: the GELU's backward)
    or, where the GELU's result is rounded, only round it (`store_bf16`:
    the backward's bf16 copy) becomes one GEMM with `gelu_aux`: its result
    `[2, ...]` holds gelu(sum) and the sum (rounded and stored in bf16 when
    the GELU's is: cuBLASLt's GELU_AUX or GELU_AUX_BIAS epilogue, the sum
    its auxiliary output); the GELU's result and the sum are views of its
    halves, and the GELU kernel and the roundings go. `train-mixed-precision`
    lets a GELU read its linear layer's sum unrounded for this. One launch
    and a round trip of the activation fewer for each GELU MLP's forward.

    Before:
    ```mlir
    %y = kernel.gemm %x, %w : tensor<64x128xf32>, tensor<128x384xf32> -> tensor<64x384xf32>
    %z = kernel.elementwise(%y, %b) : tensor<64x384xf32>, tensor<384xf32> -> tensor<64x384xf32> {
    ^bb0(%a: f32, %c: f32):
      %0 = kernel.add %a, %c : f32
      %1 = kernel.gelu %0 : f32
      kernel.yield %1 : f32
    }
    ```
    After:
    ```mlir
    %y = kernel.gemm %x, %w bias %b : tensor<64x128xf32>, tensor<128x384xf32>, tensor<384xf32> -> tensor<64x384xf32>
    %z = kernel.elementwise(%y) : tensor<64x384xf32> -> tensor<64x384xf32> {
    ^bb0(%a: f32):
      %1 = kernel.gelu %a : f32
      kernel.yield %1 : f32
    }
    ```
    and, for a GELU's backward,
    ```mlir
    %p = kernel.gemm %dy, %w transpose_b : tensor<64x384xf32>, tensor<128x384xf32> -> tensor<64x128xf32>
    %dx = kernel.elementwise(%p, %x) : tensor<64x128xf32>, tensor<64x128xf32> -> tensor<64x128xf32> {
    ^bb0(%a: f32, %b: f32):
      %0 = kernel.gelu_grad %b : f32
      %1 = kernel.mul %a, %0 : f32
      kernel.yield %1 : f32
    }
    ```
    becomes
    ```mlir
    %dx = kernel.gemm %dy, %w transpose_b dgelu(%x : tensor<64x128xf32>) : tensor<64x384xf32>, tensor<128x384xf32> -> tensor<64x128xf32>
    ```
  }];
  let dependentDialects = ["::stretto::kernel::KernelDialect"];
}

def KernelAttentionLayout : Pass<"kernel-attention-layout", "::stretto::train::ModelOp"> {
  let summary = "Reads attention's heads where the fused QKV GEMM wrote them (no head transposes)";
  let description = [{
    A model with a fused QKV projection splits its result `[B, T, 3·C]`
    into heads as `[B, T, 3, H, D]`, transposed to `[3, B, H, T, D]` and
    sliced into q, k and v `[B, H, T, D]`; the attention's result is
    transposed back to `[B, T, H, D]` for the output projection, and the
    backward transposes the output's gradient in and dq, dk and dv out the
    same way. Each transpose is a copy of its tensor.

    A `train.attention` whose q, k and v are parts 0, 1 and 2 of one such
    split (leading slices of a transpose by `[2, 0, 3, 1, 4]` of a
    `[B, T, 3, H, D]` value, reshaped) and whose every reader is a
    transpose by `[0, 2, 1, 3]` becomes a `kernel.attention` of the packed
    value: its result is the transposes' result. A `train.attention_grad`
    of such q, k and v whose result gradient is a transpose by
    `[0, 2, 1, 3]` of a `[B, T, H, D]` value and whose every reader is a
    transpose by `[1, 3, 0, 2, 4]` becomes a `kernel.attention_grad` of the
    packed value and that gradient. `scale`, `causal`, the pipeline `stage`
    and `kernel.store_bf16` (as `store_bf16`) carry over; the transposes,
    slices and reshapes left unread go. All ops of a match share one stage.
    No value changes: the runtimes compute the same sums in the same order,
    reading each head's rows where they lie. Attentions of another shape
    (q and k rotated after the split, as RoPE does; repeated key heads) are
    left as they are.

    Before:
    ```mlir
    %x = train.reshape %y : tensor<8x64x192xf32> -> tensor<8x64x3x4x16xf32>
    %t = train.transpose %x [2, 0, 3, 1, 4] : tensor<8x64x3x4x16xf32> -> tensor<3x8x4x64x16xf32>
    %s0 = train.slice %t axis = 0 offset = 0 : tensor<3x8x4x64x16xf32> -> tensor<1x8x4x64x16xf32>
    %q = train.reshape %s0 : tensor<1x8x4x64x16xf32> -> tensor<8x4x64x16xf32>
    ... %k and %v from offsets 1 and 2 ...
    %a = train.attention %q, %k, %v causal {scale = 0.25 : f64} : tensor<8x4x64x16xf32>
    %o = train.transpose %a [0, 2, 1, 3] : tensor<8x4x64x16xf32> -> tensor<8x64x4x16xf32>
    ```
    After:
    ```mlir
    %x = train.reshape %y : tensor<8x64x192xf32> -> tensor<8x64x3x4x16xf32>
    %o = kernel.attention %x causal {scale = 0.25 : f64} : tensor<8x64x3x4x16xf32> -> tensor<8x64x4x16xf32>
    ```
  }];
  let dependentDialects = ["::stretto::kernel::KernelDialect"];
}

#endif // STRETTO_KERNEL_PASSES
