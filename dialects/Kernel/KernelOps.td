//===- KernelOps.td - ops of the `kernel` dialect ----------*- tablegen -*-===//
#ifndef STRETTO_KERNEL_OPS
#define STRETTO_KERNEL_OPS

include "KernelDialect.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"

def Kernel_Float : AnyTypeOf<[F32, F64, BF16]>;
def Kernel_FloatTensor : RankedTensorOf<[F32, F64, BF16]>;

// Fused kernels

def Kernel_ElementwiseOp : Kernel_Op<"elementwise", [Pure, IsolatedFromAbove,
    SingleBlockImplicitTerminator<"YieldOp">]> {
  let summary = "a fused elementwise kernel over NumPy-broadcast operands";
  let description = [{
    Computes every element of its results by running the body on scalars:
    the body's block argument i is element of operand i, broadcast
    NumPy-style to the result shape (dims align at the right; each operand
    dim equals the result dim or is 1). All results share one shape; all
    operands and results share one element type. The body holds only
    `kernel` scalar ops and ends in `kernel.yield` of one scalar per result.

    `store_bf16` (set by `kernel-bf16-storage`; one f32 result only): the
    results are stored in bf16, two bytes an element, on devices that can
    (the CUDA runtime); each yielded value is rounded to the nearest bf16,
    ties to even, on every device. The tensor type stays the compute type.

    ```mlir
    %r = kernel.elementwise (%m, %v, %eps) : tensor<64x128xf32>, tensor<64x128xf32>, tensor<f32> -> tensor<64x128xf32> {
    ^bb0(%a: f32, %b: f32, %e: f32):
      %s = kernel.sqrt %b : f32
      %d = kernel.add %s, %e : f32
      %q = kernel.div %a, %d : f32
      kernel.yield %q : f32
    }
    ```
  }];
  let arguments = (ins Variadic<Kernel_FloatTensor>:$inputs, UnitAttr:$store_bf16);
  let results = (outs Variadic<Kernel_FloatTensor>:$results);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    `(` $inputs `)` attr-dict `:` type($inputs) `->` type($results) $body
  }];
  let hasVerifier = 1;
  let hasRegionVerifier = 1;
  let skipDefaultBuilders = 1;
  let builders = [OpBuilder<(ins "::mlir::TypeRange":$resultTypes,
                                 "::mlir::ValueRange":$inputs)>];
  let extraClassDeclaration = [{
    ::mlir::RankedTensorType getResultType() {
      return ::llvm::cast<::mlir::RankedTensorType>(getResult(0).getType());
    }
    ::mlir::Block &getBodyBlock() { return getBody().front(); }
  }];
}

def Kernel_ReduceOp : Kernel_Op<"reduce", [Pure, IsolatedFromAbove,
    SingleBlockImplicitTerminator<"YieldOp">]> {
  let summary = "a fused elementwise body summed over a leading or trailing run of dims";
  let description = [{
    Runs the body, as `kernel.elementwise` does, over every element of the
    iteration shape `space` (operands broadcast NumPy-style to it), and sums
    the body's one value over the dims `dims` of `space`: the result's shape
    is `space` without `dims`. `dims` is sorted, unique and a leading run
    (column sums, as a bias gradient) or a trailing run (row sums, as a norm
    backward or a gradient norm) of the non-unit dims of `space`.

    The sums run in a fixed order that does not depend on the thread count:
    trailing runs in blocks of 16384 elements, each with 16 interleaved
    partial sums (the C++ inner loop vectorises), blocks added in order;
    leading runs row by row in order.

    ```mlir
    %n = kernel.reduce (%g) sum [0, 1] of [64, 128] : tensor<64x128xf32> -> tensor<f32> {
    ^bb0(%a: f32):
      %s = kernel.mul %a, %a : f32
      kernel.yield %s : f32
    }
    ```
  }];
  let arguments = (ins Variadic<Kernel_FloatTensor>:$inputs, DenseI64ArrayAttr:$dims,
                       DenseI64ArrayAttr:$space);
  let results = (outs Kernel_FloatTensor:$result);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    `(` $inputs `)` `sum` $dims `of` $space attr-dict `:` type($inputs) `->` type($result) $body
  }];
  let hasVerifier = 1;
  let hasRegionVerifier = 1;
  let skipDefaultBuilders = 1;
  let builders = [OpBuilder<(ins "::mlir::Type":$resultType, "::mlir::ValueRange":$inputs,
                                 "::llvm::ArrayRef<int64_t>":$dims,
                                 "::llvm::ArrayRef<int64_t>":$space)>];
  let extraClassDeclaration = [{
    ::mlir::RankedTensorType getResultType() {
      return ::llvm::cast<::mlir::RankedTensorType>(getResult().getType());
    }
    ::mlir::Block &getBodyBlock() { return getBody().front(); }
    /// True when `dims` is the trailing run (row sums), false when leading.
    bool reducesTrailing();
  }];
}

def Kernel_RowsOp : Kernel_Op<"rows", [Pure, AllTypesMatch<["input", "result"]>]> {
  let summary = "a row-wise normalisation over the last dim: softmax, layer_norm or rms_norm";
  let description = [{
    One generated kernel per op, run row by row (a row is the last dim):
    - `softmax` (no params; `causal`: row r of each trailing [T, T] block
      keeps entries 0..r mod T, the rest are 0),
    - `layer_norm` (params gamma, beta [len]; biased variance; `eps`),
    - `rms_norm` (param gamma [len]; `eps`),
    with the `train` op's semantics and the reference executor's order of
    floating-point operations, so results match it bit for bit. The row
    function is one body for the C++ (OpenMP over rows) target; the CUDA C
    target runs a half-warp per row through its 16-lane twin (`st_*_row16`,
    the same additions in the same order).

    `store_bf16` (set by `kernel-bf16-storage` on a norm, f32 only): each
    result element is rounded to bf16 and stored in the target's bf16 slot
    (two bytes on the CUDA target), as a `store_bf16` elementwise kernel's.

    ```mlir
    %y = kernel.rows "layer_norm"(%x, %g, %b) {eps = 1.0e-05 : f64} : tensor<64x128xf32>, tensor<128xf32>, tensor<128xf32> -> tensor<64x128xf32>
    ```
  }];
  let arguments = (ins Kernel_FloatTensor:$input, Variadic<Kernel_FloatTensor>:$params,
                       StrAttr:$fn, UnitAttr:$causal,
                       DefaultValuedAttr<F64Attr, "1.0e-5">:$eps, UnitAttr:$store_bf16);
  let results = (outs Kernel_FloatTensor:$result);
  let assemblyFormat = [{
    $fn `(` $input (`,` $params^)? `)` (`causal` $causal^)? attr-dict `:` type($input)
    (`,` type($params)^)? `->` type($result)
  }];
  let hasVerifier = 1;
}

def Kernel_YieldOp : Kernel_Op<"yield", [Pure, Terminator,
    ParentOneOf<["ElementwiseOp", "ReduceOp"]>]> {
  let summary = "the scalar values of one element of each result";
  let arguments = (ins Variadic<Kernel_Float>:$values);
  let assemblyFormat = "$values attr-dict `:` type($values)";
  let builders = [OpBuilder<(ins), [{ build($_builder, $_state, ::mlir::ValueRange()); }]>];
}


def Kernel_GemmOp : Kernel_Op<"gemm", [Pure, AttrSizedOperandSegments]> {
  let summary = "a library GEMM: alpha * op(a) * op(b), op = optional transpose";
  let description = [{
    Matrix product through the BLAS library of the target (OpenBLAS on
    CPU, cuBLASLt on GPU). `transpose_a` / `transpose_b` swap the last two
    dims of the operand, as the library's transpose flags do, so no
    transposed copy is made. Shapes follow `train.matmul`:
    `op(a) [..., M, K] x op(b) [K, N] -> [..., M, N]` (b shared by the
    batch) or `op(a) [..., M, K] x op(b) [..., K, N]` with equal batch dims.

    `store_bf16` (set by `kernel-bf16-storage`; f32 results only): the
    result is rounded to the nearest bf16, ties to even, and stored in two
    bytes an element on devices that can (the CUDA runtime: cuBLASLt writes
    bf16); the C++ runtimes keep the rounded value in four.

    `bias` (set by `kernel-gemm-epilogue`): a vector of N values added to
    every row of the product in f32 before the result is rounded or
    stored: cuBLASLt's BIAS epilogue on the GPU, the same sum after the
    library GEMM on the CPU.

    `dgelu` (set by `kernel-gemm-epilogue`): a tensor of the result's shape,
    the input `x` of a tanh-form GELU; each element of the product is
    multiplied by `gelu'(x)` in f32 before the result is rounded or stored
    (a GELU's backward: the gradient of its input from the gradient of its
    output). cuBLASLt's DGELU epilogue on the GPU, `x` its auxiliary input;
    the same product after the library GEMM on the CPU. A GEMM has a `bias`
    or a `dgelu`, not both.

    `bias_grad` (set by `kernel-gemm-epilogue`): the result has one row more
    than the product, `[M + 1, N]`: rows `0..M-1` hold the product, row `M`
    the sum of `op(b)`'s K rows (each column summed over the contraction:
    the bias gradient of the linear layer whose weight gradient the product
    is, `op(a) = x^T`, `b = dy`). cuBLASLt's BGRADA epilogue on the GPU (in
    its column-major view our b is its A); the same sums after the library
    GEMM on the CPU, in increasing row order as `train.reduce_sum` makes
    them. 2-D operands, `b` not transposed, `alpha` 1, no other epilogue,
    f32 storage.

    `gelu_aux` (set by `kernel-gemm-epilogue`): the result is `[2, ...]`,
    two values of the product's shape: first `gelu(s)` (tanh form), then
    `s` itself, where `s` is the product plus the `bias` (if any), in f32;
    both are then rounded or stored as the result is. cuBLASLt's
    GELU_AUX_BIAS (GELU_AUX) epilogue on the GPU, `s` its auxiliary output
    (kept for the GELU's backward); the same after the library GEMM on
    the CPU. Not with `dgelu` or `bias_grad`.

    ```mlir
    %dw = kernel.gemm %x, %dy transpose_a : tensor<64x128xf32>, tensor<64x384xf32> -> tensor<128x384xf32>
    %y = kernel.gemm %x, %w bias %b : tensor<64x128xf32>, tensor<128x384xf32>, tensor<384xf32> -> tensor<64x384xf32>
    %dh = kernel.gemm %dy, %w2 transpose_b dgelu(%h : tensor<64x384xf32>) : tensor<64x128xf32>, tensor<384x128xf32> -> tensor<64x384xf32>
    %dwb = kernel.gemm %x, %dy transpose_a {bias_grad} : tensor<64x128xf32>, tensor<64x384xf32> -> tensor<129x384xf32>
    %ys = kernel.gemm %x, %w bias %b {gelu_aux} : tensor<64x128xf32>, tensor<128x384xf32>, tensor<384xf32> -> tensor<2x64x384xf32>
    ```
  }];
  let arguments = (ins Kernel_FloatTensor:$a, Kernel_FloatTensor:$b,
                       Optional<Kernel_FloatTensor>:$bias,
                       Optional<Kernel_FloatTensor>:$dgelu,
                       UnitAttr:$transpose_a, UnitAttr:$transpose_b,
                       DefaultValuedAttr<F64Attr, "1.0">:$alpha, UnitAttr:$store_bf16,
                       UnitAttr:$bias_grad, UnitAttr:$gelu_aux);
  let results = (outs Kernel_FloatTensor:$result);
  let assemblyFormat = [{
    $a `,` $b (`transpose_a` $transpose_a^)? (`transpose_b` $transpose_b^)? (`bias` $bias^)?
    (`dgelu` `(` $dgelu^ `:` type($dgelu) `)`)? attr-dict
    `:` type($a) `,` type($b) (`,` type($bias)^)? `->` type($result)
  }];
  let hasVerifier = 1;
}

def Kernel_AttentionOp : Kernel_Op<"attention", [Pure]> {
  let summary = "train.attention reading its heads where a fused QKV GEMM wrote them";
  let description = [{
    `train.attention` (same `scale`, `causal`) whose q, k and v are parts
    0, 1 and 2 of `qkv` `[B, T, 3, H, D]` (a fused QKV projection's result,
    reshaped) and whose result is written `[B, T, H, D]`, the layout the
    output projection reads: `q = qkv[:, :, 0]` transposed to
    `[B, H, T, D]`, and so on; the result is train.attention's transposed
    back. Set by `kernel-attention-layout`, so that no head transposes are
    made: the runtimes read each head's rows in place.

    `store_bf16` (carried from `kernel.store_bf16`): the result is rounded
    to bf16 and, on devices that can, stored in two bytes. `bf16` as
    `train.attention`'s (the weights rounded to bf16 before they multiply v).

    ```mlir
    %o = kernel.attention %qkv causal {scale = 0.125 : f64} : tensor<8x64x3x4x16xf32> -> tensor<8x64x4x16xf32>
    ```
  }];
  let arguments = (ins Kernel_FloatTensor:$qkv, F64Attr:$scale, UnitAttr:$causal,
                       UnitAttr:$store_bf16, UnitAttr:$bf16);
  let results = (outs Kernel_FloatTensor:$result);
  let assemblyFormat = "$qkv (`causal` $causal^)? attr-dict `:` type($qkv) `->` type($result)";
  let hasVerifier = 1;
}

def Kernel_AttentionGradOp : Kernel_Op<"attention_grad", [Pure]> {
  let summary = "train.attention_grad in kernel.attention's layout";
  let description = [{
    `train.attention_grad` (same `scale`, `causal`) of a `kernel.attention`:
    q, k and v are read from `qkv` `[B, T, 3, H, D]`, the result gradient
    `grad` is `[B, T, H, D]`, and dq, dk and dv are written as parts 0, 1
    and 2 of a `[B, T, 3, H, D]` result: the gradient of the fused QKV
    projection's result, reshaped, with no head transposes. Set by
    `kernel-attention-layout`; `store_bf16` as `kernel.attention`'s;
    `bf16` as `train.attention_grad`'s (P and dS rounded to bf16 before
    their products).

    ```mlir
    %d = kernel.attention_grad %qkv, %g causal {scale = 0.125 : f64} : tensor<8x64x3x4x16xf32>, tensor<8x64x4x16xf32> -> tensor<8x64x3x4x16xf32>
    ```
  }];
  let arguments = (ins Kernel_FloatTensor:$qkv, Kernel_FloatTensor:$grad, F64Attr:$scale,
                       UnitAttr:$causal, UnitAttr:$store_bf16, UnitAttr:$bf16);
  let results = (outs Kernel_FloatTensor:$result);
  let assemblyFormat = [{
    $qkv `,` $grad (`causal` $causal^)? attr-dict `:` type($qkv) `,` type($grad) `->` type($result)
  }];
  let hasVerifier = 1;
}

// Scalar ops of kernel bodies (semantics of the `train` op of the same name)

class Kernel_ScalarBinaryOp<string mnemonic, string what, list<Trait> traits = []>
    : Kernel_Op<mnemonic, !listconcat([Pure, SameOperandsAndResultType], traits)> {
  let summary = what;
  let arguments = (ins Kernel_Float:$lhs, Kernel_Float:$rhs);
  let results = (outs Kernel_Float:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($result)";
}

def Kernel_AddOp : Kernel_ScalarBinaryOp<"add", "a + b", [Commutative]>;
def Kernel_SubOp : Kernel_ScalarBinaryOp<"sub", "a - b">;
def Kernel_MulOp : Kernel_ScalarBinaryOp<"mul", "a * b", [Commutative]>;
def Kernel_DivOp : Kernel_ScalarBinaryOp<"div", "a / b">;
def Kernel_MaxOp : Kernel_ScalarBinaryOp<"max", "b if a < b else a (std::max)">;
def Kernel_MinOp : Kernel_ScalarBinaryOp<"min", "b if b < a else a (std::min)">;
def Kernel_PowOp : Kernel_ScalarBinaryOp<"pow", "a ^ b">;
def Kernel_GtOp : Kernel_ScalarBinaryOp<"gt", "1 where a > b, else 0">;

class Kernel_ScalarUnaryOp<string mnemonic, string what>
    : Kernel_Op<mnemonic, [Pure, SameOperandsAndResultType]> {
  let summary = what;
  let arguments = (ins Kernel_Float:$input);
  let results = (outs Kernel_Float:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
}

def Kernel_NegOp : Kernel_ScalarUnaryOp<"neg", "-x">;
def Kernel_ExpOp : Kernel_ScalarUnaryOp<"exp", "e^x">;
def Kernel_LogOp : Kernel_ScalarUnaryOp<"log", "natural log">;
def Kernel_SqrtOp : Kernel_ScalarUnaryOp<"sqrt", "square root">;
def Kernel_RsqrtOp : Kernel_ScalarUnaryOp<"rsqrt", "1/sqrt(x)">;
def Kernel_TanhOp : Kernel_ScalarUnaryOp<"tanh", "tanh">;
def Kernel_CosOp : Kernel_ScalarUnaryOp<"cos", "cosine">;
def Kernel_GeluOp : Kernel_ScalarUnaryOp<"gelu",
    "GELU, tanh form: 0.5x(1+tanh(sqrt(2/pi)(x+0.044715x^3)))">;
def Kernel_GeluGradOp : Kernel_ScalarUnaryOp<"gelu_grad",
    "d/dx gelu(x): 0.5(1+t) + 0.5x(1-t^2)k(1+3*0.044715x^2), t = tanh(u)">;
def Kernel_ReluOp : Kernel_ScalarUnaryOp<"relu", "x if x > 0 else 0">;
def Kernel_SiluOp : Kernel_ScalarUnaryOp<"silu", "x / (1 + e^-x)">;
def Kernel_ErfOp : Kernel_ScalarUnaryOp<"erf", "the error function">;
def Kernel_RoundBf16Op : Kernel_ScalarUnaryOp<"round_bf16",
    "x rounded to the nearest bf16, ties to even">;

#endif // STRETTO_KERNEL_OPS
