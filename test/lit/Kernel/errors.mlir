// RUN: stretto-opt %s -split-input-file -verify-diagnostics

// An operand must broadcast to the result shape (NumPy rules).
train.model @m {
  train.step {
  %x = train.input "x" : tensor<4x8xf32>
  %y = train.input "y" : tensor<3xf32>
  // expected-error @+1 {{'kernel.elementwise' op operand #1 of type 'tensor<3xf32>' does not broadcast to the result type 'tensor<4x8xf32>'}}
  %r = kernel.elementwise (%x, %y) : tensor<4x8xf32>, tensor<3xf32> -> tensor<4x8xf32> {
  ^bb0(%a: f32, %b: f32):
    %s = kernel.add %a, %b : f32
    kernel.yield %s : f32
  }
  %l = train.reduce_sum %r [0, 1] : tensor<4x8xf32> -> tensor<f32>
  train.yield %l : tensor<f32>
  }
}

// -----

// A kernel has one element type.
train.model @m {
  train.step {
  %x = train.input "x" : tensor<4xf64>
  // expected-error @+1 {{'kernel.elementwise' op operand #0 of type 'tensor<4xf64>' has element type 'f64', the result's is 'f32'}}
  %r = kernel.elementwise (%x) : tensor<4xf64> -> tensor<4xf32> {
  ^bb0(%a: f64):
    kernel.yield %a : f64
  }
  %l = train.reduce_sum %r [0] : tensor<4xf32> -> tensor<f32>
  train.yield %l : tensor<f32>
  }
}

// -----

// Results share one type.
train.model @m {
  train.step {
  %x = train.input "x" : tensor<4xf32>
  // expected-error @+1 {{'kernel.elementwise' op results must share one type, got 'tensor<4xf32>' (result #0) and 'tensor<1xf32>' (result #1)}}
  %r:2 = kernel.elementwise (%x) : tensor<4xf32> -> tensor<4xf32>, tensor<1xf32> {
  ^bb0(%a: f32):
    kernel.yield %a, %a : f32, f32
  }
  %l = train.reduce_sum %r#0 [0] : tensor<4xf32> -> tensor<f32>
  train.yield %l : tensor<f32>
  }
}

// -----

// A body argument has its operand's element type.
train.model @m {
  train.step {
  %x = train.input "x" : tensor<4xf32>
  // expected-error @+1 {{'kernel.elementwise' op body argument #0 has type 'f64', expected 'f32' (element of operand #0 of type 'tensor<4xf32>')}}
  %r = kernel.elementwise (%x) : tensor<4xf32> -> tensor<4xf32> {
  ^bb0(%a: f64):
    %e = kernel.exp %a : f64
    kernel.yield %e : f64
  }
  %l = train.reduce_sum %r [0] : tensor<4xf32> -> tensor<f32>
  train.yield %l : tensor<f32>
  }
}

// -----

// One body argument per operand.
train.model @m {
  train.step {
  %x = train.input "x" : tensor<4xf32>
  // expected-error @+1 {{'kernel.elementwise' op body has 2 arguments for 1 operands}}
  %r = kernel.elementwise (%x) : tensor<4xf32> -> tensor<4xf32> {
  ^bb0(%a: f32, %b: f32):
    kernel.yield %a : f32
  }
  %l = train.reduce_sum %r [0] : tensor<4xf32> -> tensor<f32>
  train.yield %l : tensor<f32>
  }
}

// -----

// The body yields one scalar per result.
train.model @m {
  train.step {
  %x = train.input "x" : tensor<4xf32>
  // expected-error @+1 {{'kernel.elementwise' op body yields 2 values for 1 results}}
  %r = kernel.elementwise (%x) : tensor<4xf32> -> tensor<4xf32> {
  ^bb0(%a: f32):
    kernel.yield %a, %a : f32, f32
  }
  %l = train.reduce_sum %r [0] : tensor<4xf32> -> tensor<f32>
  train.yield %l : tensor<f32>
  }
}

// -----

// A body holds only kernel scalar ops.
train.model @m {
  train.step {
  %x = train.input "x" : tensor<4xf32>
  %r = kernel.elementwise (%x) : tensor<4xf32> -> tensor<4xf32> {
  ^bb0(%a: f32):
    // expected-error @+1 {{'train.constant' op is not a `kernel` scalar op; a fused kernel body holds only kernel scalar ops}}
    %c = train.constant dense<1.0> : tensor<f32>
    kernel.yield %a : f32
  }
  %l = train.reduce_sum %r [0] : tensor<4xf32> -> tensor<f32>
  train.yield %l : tensor<f32>
  }
}

// -----

// Scalar ops take one float type.
train.model @m {
  train.step {
  %x = train.input "x" : tensor<4xf32>
  %r = kernel.elementwise (%x) : tensor<4xf32> -> tensor<4xf32> {
  ^bb0(%a: f32):
    // expected-error @+1 {{'kernel.add' op result #0 must be 32-bit float or 64-bit float or bfloat16 type, but got 'i32'}}
    %i = "kernel.add"(%a, %a) : (f32, f32) -> i32
    kernel.yield %a : f32
  }
  %l = train.reduce_sum %r [0] : tensor<4xf32> -> tensor<f32>
  train.yield %l : tensor<f32>
  }
}

// -----

// kernel.yield only ends a kernel body.
train.model @m {
  train.step {
  %x = train.input "x" : tensor<f32>
  // expected-error @+1 {{'kernel.yield' op expects parent op to be one of 'kernel.elementwise, kernel.reduce'}}
  kernel.yield %x : tensor<f32>
  train.yield %x : tensor<f32>
  }
}

// -----

// kernel.gemm: contraction dims after the transposes must agree.
train.model @m {
  train.step {
  %a = train.input "a" : tensor<4x3xf32>
  %b = train.input "b" : tensor<3x5xf32>
  // expected-error @+1 {{'kernel.gemm' op contraction dims differ: op(a) has K = 4, op(b) has K = 3 (a 'tensor<4x3xf32>', b 'tensor<3x5xf32>')}}
  %r = kernel.gemm %a, %b transpose_a : tensor<4x3xf32>, tensor<3x5xf32> -> tensor<3x5xf32>
  %l = train.reduce_sum %r [0, 1] : tensor<3x5xf32> -> tensor<f32>
  train.yield %l : tensor<f32>
  }
}

// -----

// kernel.gemm: the result is op(a) x op(b).
train.model @m {
  train.step {
  %a = train.input "a" : tensor<4x3xf32>
  %b = train.input "b" : tensor<5x3xf32>
  // expected-error @+1 {{'kernel.gemm' op result type 'tensor<4x3xf32>' does not match op(a) x op(b) = 'tensor<4x5xf32>'}}
  %r = kernel.gemm %a, %b transpose_b : tensor<4x3xf32>, tensor<5x3xf32> -> tensor<4x3xf32>
  %l = train.reduce_sum %r [0, 1] : tensor<4x3xf32> -> tensor<f32>
  train.yield %l : tensor<f32>
  }
}

// -----

// kernel.gemm: b is 2-D or has a's batch dims.
train.model @m {
  train.step {
  %a = train.input "a" : tensor<2x4x3xf32>
  %b = train.input "b" : tensor<3x3x5xf32>
  // expected-error @+1 {{'kernel.gemm' op batch dims of a 'tensor<2x4x3xf32>' and b 'tensor<3x3x5xf32>' differ; b must be 2-D or have a's batch dims}}
  %r = kernel.gemm %a, %b : tensor<2x4x3xf32>, tensor<3x3x5xf32> -> tensor<2x4x5xf32>
  %l = train.reduce_sum %r [0, 1, 2] : tensor<2x4x5xf32> -> tensor<f32>
  train.yield %l : tensor<f32>
  }
}

// -----

// kernel.gemm: operands are matrices.
train.model @m {
  train.step {
  %a = train.input "a" : tensor<4xf32>
  %b = train.input "b" : tensor<4x5xf32>
  // expected-error @+1 {{'kernel.gemm' op operands need rank >= 2, got 'tensor<4xf32>' and 'tensor<4x5xf32>'}}
  %r = kernel.gemm %a, %b : tensor<4xf32>, tensor<4x5xf32> -> tensor<5xf32>
  %l = train.reduce_sum %r [0] : tensor<5xf32> -> tensor<f32>
  train.yield %l : tensor<f32>
  }
}

// -----

// kernel.gemm: one element type.
train.model @m {
  train.step {
  %a = train.input "a" : tensor<4x4xf64>
  %b = train.input "b" : tensor<4x4xf32>
  // expected-error @+1 {{'kernel.gemm' op operands and result must share one element type, got 'tensor<4x4xf64>', 'tensor<4x4xf32>' -> 'tensor<4x4xf32>'}}
  %r = kernel.gemm %a, %b : tensor<4x4xf64>, tensor<4x4xf32> -> tensor<4x4xf32>
  %l = train.reduce_sum %r [0, 1] : tensor<4x4xf32> -> tensor<f32>
  train.yield %l : tensor<f32>
  }
}

// -----

// A reduced dim must exist in the iteration shape.
train.model @m {
  train.step {
  %x = train.input "x" : tensor<4x8xf32>
  %y = train.input "y" : tensor<2x3x4xf32>
  // expected-error @+1 {{'kernel.reduce' op reduced dim 2 is out of range for the 2-d iteration shape [4, 8]}}
  %r = kernel.reduce (%x) sum [2] of [4, 8] : tensor<4x8xf32> -> tensor<4xf32> {
  ^bb0(%a: f32):
    kernel.yield %a : f32
  }
  %z = train.constant dense<0.0> : tensor<f32>
  train.yield %z : tensor<f32>
  }
}

// -----

// Reduced dims are sorted and unique.
train.model @m {
  train.step {
  %x = train.input "x" : tensor<4x8xf32>
  %y = train.input "y" : tensor<2x3x4xf32>
  // expected-error @+1 {{'kernel.reduce' op reduced dims [1, 0] must be sorted and unique}}
  %r = kernel.reduce (%x) sum [1, 0] of [4, 8] : tensor<4x8xf32> -> tensor<f32> {
  ^bb0(%a: f32):
    kernel.yield %a : f32
  }
  %z = train.constant dense<0.0> : tensor<f32>
  train.yield %z : tensor<f32>
  }
}

// -----

// Only leading or trailing runs have a loop nest.
train.model @m {
  train.step {
  %x = train.input "x" : tensor<4x8xf32>
  %y = train.input "y" : tensor<2x3x4xf32>
  // expected-error @+1 {{'kernel.reduce' op reduced dims [1] are neither a leading nor a trailing run of the iteration shape [2, 3, 4]}}
  %r = kernel.reduce (%y) sum [1] of [2, 3, 4] : tensor<2x3x4xf32> -> tensor<2x4xf32> {
  ^bb0(%a: f32):
    kernel.yield %a : f32
  }
  %z = train.constant dense<0.0> : tensor<f32>
  train.yield %z : tensor<f32>
  }
}

// -----

// The result is the iteration shape without the reduced dims.
train.model @m {
  train.step {
  %x = train.input "x" : tensor<4x8xf32>
  %y = train.input "y" : tensor<2x3x4xf32>
  // expected-error @+1 {{'kernel.reduce' op result type 'tensor<8xf32>' is not the iteration shape [4, 8] without dims [1]}}
  %r = kernel.reduce (%x) sum [1] of [4, 8] : tensor<4x8xf32> -> tensor<8xf32> {
  ^bb0(%a: f32):
    kernel.yield %a : f32
  }
  %z = train.constant dense<0.0> : tensor<f32>
  train.yield %z : tensor<f32>
  }
}

// -----

// Operands broadcast to the iteration shape.
train.model @m {
  train.step {
  %x = train.input "x" : tensor<4x8xf32>
  %y = train.input "y" : tensor<2x3x4xf32>
  // expected-error @+1 {{'kernel.reduce' op operand #0 of type 'tensor<4x8xf32>' does not broadcast to the iteration shape [4, 3]}}
  %r = kernel.reduce (%x) sum [1] of [4, 3] : tensor<4x8xf32> -> tensor<4xf32> {
  ^bb0(%a: f32):
    kernel.yield %a : f32
  }
  %z = train.constant dense<0.0> : tensor<f32>
  train.yield %z : tensor<f32>
  }
}

// -----

// At least one dim is reduced.
train.model @m {
  train.step {
  %x = train.input "x" : tensor<4x8xf32>
  %y = train.input "y" : tensor<2x3x4xf32>
  // expected-error @+1 {{'kernel.reduce' op needs at least one reduced dim (use kernel.elementwise)}}
  %r = kernel.reduce (%x) sum [] of [4, 8] : tensor<4x8xf32> -> tensor<4x8xf32> {
  ^bb0(%a: f32):
    kernel.yield %a : f32
  }
  %z = train.constant dense<0.0> : tensor<f32>
  train.yield %z : tensor<f32>
  }
}

// -----

// A reduction body yields one value.
train.model @m {
  train.step {
  %x = train.input "x" : tensor<4x8xf32>
  // expected-error @+1 {{'kernel.reduce' op body yields 2 values for 1 results}}
  %r = kernel.reduce (%x) sum [1] of [4, 8] : tensor<4x8xf32> -> tensor<4xf32> {
  ^bb0(%a: f32):
    kernel.yield %a, %a : f32, f32
  }
  %z = train.constant dense<0.0> : tensor<f32>
  train.yield %z : tensor<f32>
  }
}

// -----

// An unknown row function.
train.model @m {
  train.step {
  %x = train.input "x" : tensor<4x8xf32>
  %g = train.input "g" : tensor<8xf32>
  %h = train.input "h" : tensor<4xf32>
  // expected-error @+1 {{'kernel.rows' op unknown row function "max"; expected softmax, layer_norm or rms_norm}}
  %r = kernel.rows "max" (%x) : tensor<4x8xf32> -> tensor<4x8xf32>
  %z = train.constant dense<0.0> : tensor<f32>
  train.yield %z : tensor<f32>
  }
}

// -----

// Layer norm takes gamma and beta.
train.model @m {
  train.step {
  %x = train.input "x" : tensor<4x8xf32>
  %g = train.input "g" : tensor<8xf32>
  %h = train.input "h" : tensor<4xf32>
  // expected-error @+1 {{'kernel.rows' op "layer_norm" takes 2 params, got 1}}
  %r = kernel.rows "layer_norm" (%x, %g) : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %z = train.constant dense<0.0> : tensor<f32>
  train.yield %z : tensor<f32>
  }
}

// -----

// A param holds one value per element of a row.
train.model @m {
  train.step {
  %x = train.input "x" : tensor<4x8xf32>
  %g = train.input "g" : tensor<8xf32>
  %h = train.input "h" : tensor<4xf32>
  // expected-error @+1 {{'kernel.rows' op param #0 of type 'tensor<4xf32>' must be 'tensor<8xf32>' (one value per element of a row)}}
  %r = kernel.rows "rms_norm" (%x, %h) : tensor<4x8xf32>, tensor<4xf32> -> tensor<4x8xf32>
  %z = train.constant dense<0.0> : tensor<f32>
  train.yield %z : tensor<f32>
  }
}

// -----

// Only softmax is causal.
train.model @m {
  train.step {
  %x = train.input "x" : tensor<4x8xf32>
  %g = train.input "g" : tensor<8xf32>
  %h = train.input "h" : tensor<4xf32>
  // expected-error @+1 {{'kernel.rows' op only softmax is causal}}
  %r = kernel.rows "rms_norm" (%x, %g) causal : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %z = train.constant dense<0.0> : tensor<f32>
  train.yield %z : tensor<f32>
  }
}

// -----

// A causal softmax needs [T, T] blocks.
train.model @m {
  train.step {
  %x = train.input "x" : tensor<4x8xf32>
  %g = train.input "g" : tensor<8xf32>
  %h = train.input "h" : tensor<4xf32>
  // expected-error @+1 {{'kernel.rows' op a causal softmax needs square trailing [T, T] blocks, got 'tensor<4x8xf32>'}}
  %r = kernel.rows "softmax" (%x) causal : tensor<4x8xf32> -> tensor<4x8xf32>
  %z = train.constant dense<0.0> : tensor<f32>
  train.yield %z : tensor<f32>
  }
}

// -----

// store_bf16 stores f32 results in bf16, not f64 ones.
train.model @m {
  train.step {
  %x = train.input "x" : tensor<4xf64>
  // expected-error @+1 {{'kernel.elementwise' op stores bf16 only from f32 results, not 'f64'}}
  %r = kernel.elementwise (%x) {store_bf16} : tensor<4xf64> -> tensor<4xf64> {
  ^bb0(%a: f64):
    kernel.yield %a : f64
  }
  %l = train.reduce_sum %r [0] : tensor<4xf64> -> tensor<f64>
  train.yield %l : tensor<f64>
  }
}

// -----

// store_bf16 has one result.
train.model @m {
  train.step {
  %x = train.input "x" : tensor<4xf32>
  // expected-error @+1 {{'kernel.elementwise' op stores bf16 only with one result, not 2}}
  %r:2 = kernel.elementwise (%x) {store_bf16} : tensor<4xf32> -> tensor<4xf32>, tensor<4xf32> {
  ^bb0(%a: f32):
    kernel.yield %a, %a : f32, f32
  }
  %l = train.reduce_sum %r#0 [0] : tensor<4xf32> -> tensor<f32>
  train.yield %l : tensor<f32>
  }
}

// -----

// A GEMM stores bf16 only from an f32 result.
train.model @m {
  train.step {
  %x = train.input "x" : tensor<4x8xf64>
  %w = train.input "w" : tensor<8x6xf64>
  // expected-error @+1 {{'kernel.gemm' op stores bf16 only from an f32 result, not 'f64'}}
  %y = kernel.gemm %x, %w {store_bf16} : tensor<4x8xf64>, tensor<8x6xf64> -> tensor<4x6xf64>
  %l = train.reduce_sum %y [0, 1] : tensor<4x6xf64> -> tensor<f64>
  train.yield %l : tensor<f64>
  }
}

// -----

// kernel.gemm: a bias is one value per result column.
train.model @m {
  train.step {
  %a = train.input "a" : tensor<4x3xf32>
  %b = train.input "b" : tensor<3x5xf32>
  %c = train.input "c" : tensor<4xf32>
  // expected-error @+1 {{'kernel.gemm' op bias must be a vector of the result's 5 columns in 'f32', got 'tensor<4xf32>'}}
  %r = kernel.gemm %a, %b bias %c : tensor<4x3xf32>, tensor<3x5xf32>, tensor<4xf32> -> tensor<4x5xf32>
  %l = train.reduce_sum %r [0, 1] : tensor<4x5xf32> -> tensor<f32>
  train.yield %l : tensor<f32>
  }
}

// -----

// kernel.gemm: DGELU's input has the result's type.
train.model @m {
  train.step {
  %a = train.input "a" : tensor<4x3xf32>
  %b = train.input "b" : tensor<3x5xf32>
  %x = train.input "x" : tensor<4x3xf32>
  // expected-error @+1 {{'kernel.gemm' op dgelu (the GELU's input) must have the result's type 'tensor<4x5xf32>', got 'tensor<4x3xf32>'}}
  %r = kernel.gemm %a, %b dgelu(%x : tensor<4x3xf32>) : tensor<4x3xf32>, tensor<3x5xf32> -> tensor<4x5xf32>
  %l = train.reduce_sum %r [0, 1] : tensor<4x5xf32> -> tensor<f32>
  train.yield %l : tensor<f32>
  }
}

// -----

// kernel.gemm: one epilogue, a bias or a dgelu.
train.model @m {
  train.step {
  %a = train.input "a" : tensor<4x3xf32>
  %b = train.input "b" : tensor<3x5xf32>
  %c = train.input "c" : tensor<5xf32>
  %x = train.input "x" : tensor<4x5xf32>
  // expected-error @+1 {{'kernel.gemm' op has a bias and a dgelu; cuBLASLt's epilogues take one of them}}
  %r = kernel.gemm %a, %b bias %c dgelu(%x : tensor<4x5xf32>) : tensor<4x3xf32>, tensor<3x5xf32>, tensor<5xf32> -> tensor<4x5xf32>
  %l = train.reduce_sum %r [0, 1] : tensor<4x5xf32> -> tensor<f32>
  train.yield %l : tensor<f32>
  }
}

// -----

train.model @attention_not_packed {
  train.step {
    %x = train.input "x" : tensor<2x8x2x8xf32>
    // expected-error @+1 {{'kernel.attention' op qkv must be [B, T, 3, H, D], got 'tensor<2x8x2x8xf32>'}}
    %o = kernel.attention %x {scale = 0.35 : f64} : tensor<2x8x2x8xf32> -> tensor<2x8x2x8xf32>
    %s = train.reduce_sum %o [0, 1, 2, 3] : tensor<2x8x2x8xf32> -> tensor<f32>
    train.yield %s : tensor<f32>
  }
}

// -----

train.model @attention_result {
  train.step {
    %x = train.input "x" : tensor<2x8x3x2x8xf32>
    // expected-error @+1 {{'kernel.attention' op result 'tensor<2x2x8x8xf32>' should be 'tensor<2x8x2x8xf32>' ([B, T, H, D] of qkv 'tensor<2x8x3x2x8xf32>')}}
    %o = kernel.attention %x {scale = 0.35 : f64} : tensor<2x8x3x2x8xf32> -> tensor<2x2x8x8xf32>
    %s = train.reduce_sum %o [0, 1, 2, 3] : tensor<2x2x8x8xf32> -> tensor<f32>
    train.yield %s : tensor<f32>
  }
}

// -----

train.model @attention_grad_grad {
  train.step {
    %x = train.input "x" : tensor<2x8x3x2x8xf32>
    %g = train.input "g" : tensor<2x2x8x8xf32>
    // expected-error @+1 {{'kernel.attention_grad' op grad 'tensor<2x2x8x8xf32>' should be 'tensor<2x8x2x8xf32>' ([B, T, H, D] of qkv 'tensor<2x8x3x2x8xf32>')}}
    %d = kernel.attention_grad %x, %g {scale = 0.35 : f64} : tensor<2x8x3x2x8xf32>, tensor<2x2x8x8xf32> -> tensor<2x8x3x2x8xf32>
    %s = train.reduce_sum %d [0, 1, 2, 3, 4] : tensor<2x8x3x2x8xf32> -> tensor<f32>
    train.yield %s : tensor<f32>
  }
}

// -----

train.model @attention_grad_result {
  train.step {
    %x = train.input "x" : tensor<2x8x3x2x8xf32>
    %g = train.input "g" : tensor<2x8x2x8xf32>
    // expected-error @+1 {{'kernel.attention_grad' op result 'tensor<3x2x2x8x8xf32>' should stack dq, dk and dv as qkv 'tensor<2x8x3x2x8xf32>'}}
    %d = kernel.attention_grad %x, %g {scale = 0.35 : f64} : tensor<2x8x3x2x8xf32>, tensor<2x8x2x8xf32> -> tensor<3x2x2x8x8xf32>
    %s = train.reduce_sum %d [0, 1, 2, 3, 4] : tensor<3x2x2x8x8xf32> -> tensor<f32>
    train.yield %s : tensor<f32>
  }
}

// -----

train.model @attention_bf16_store {
  train.step {
    %x = train.input "x" : tensor<2x8x3x2x8xbf16>
    // expected-error @+1 {{'kernel.attention' op stores bf16 only from an f32 result, not 'bf16'}}
    %o = kernel.attention %x {scale = 0.35 : f64, store_bf16} : tensor<2x8x3x2x8xbf16> -> tensor<2x8x2x8xbf16>
    %s = train.reduce_sum %o [0, 1, 2, 3] : tensor<2x8x2x8xbf16> -> tensor<f32>
    train.yield %s : tensor<f32>
  }
}

// -----

// kernel.gemm: bias_grad's result has one row more than the product.
train.model @m {
  train.step {
  %a = train.input "a" : tensor<4x3xf32>
  %b = train.input "b" : tensor<4x5xf32>
  // expected-error @+1 {{'kernel.gemm' op result type 'tensor<3x5xf32>' does not match op(a) x op(b) with its row of column sums = 'tensor<4x5xf32>'}}
  %r = kernel.gemm %a, %b transpose_a {bias_grad} : tensor<4x3xf32>, tensor<4x5xf32> -> tensor<3x5xf32>
  %l = train.reduce_sum %r [0, 1] : tensor<3x5xf32> -> tensor<f32>
  train.yield %l : tensor<f32>
  }
}

// -----

// kernel.gemm: bias_grad sums b's rows as cuBLASLt's BGRADA does: b not
// transposed, 2-D, alpha 1, nothing else.
train.model @m {
  train.step {
  %a = train.input "a" : tensor<4x3xf32>
  %b = train.input "b" : tensor<5x4xf32>
  // expected-error @+1 {{'kernel.gemm' op bias_grad needs 2-D operands, b not transposed, alpha 1, no bias or dgelu and an f32 result}}
  %r = kernel.gemm %a, %b transpose_a transpose_b {bias_grad} : tensor<4x3xf32>, tensor<5x4xf32> -> tensor<4x5xf32>
  %l = train.reduce_sum %r [0, 1] : tensor<4x5xf32> -> tensor<f32>
  train.yield %l : tensor<f32>
  }
}

// -----

// kernel.gemm: gelu_aux's result holds gelu(sum) and the sum: [2, ...].
train.model @m {
  train.step {
  %a = train.input "a" : tensor<4x3xf32>
  %b = train.input "b" : tensor<3x8xf32>
  // expected-error @+1 {{'kernel.gemm' op result type 'tensor<4x8xf32>' does not match op(a) x op(b) twice (gelu_aux) = 'tensor<2x4x8xf32>'}}
  %r = kernel.gemm %a, %b {gelu_aux} : tensor<4x3xf32>, tensor<3x8xf32> -> tensor<4x8xf32>
  %l = train.reduce_sum %r [0, 1] : tensor<4x8xf32> -> tensor<f32>
  train.yield %l : tensor<f32>
  }
}

// -----

// kernel.gemm: one GELU epilogue at a time.
train.model @m {
  train.step {
  %a = train.input "a" : tensor<4x3xf32>
  %b = train.input "b" : tensor<3x8xf32>
  %x = train.input "x" : tensor<2x4x8xf32>
  // expected-error @+1 {{'kernel.gemm' op gelu_aux takes no dgelu or bias_grad besides (one epilogue)}}
  %r = kernel.gemm %a, %b dgelu(%x : tensor<2x4x8xf32>) {gelu_aux} : tensor<4x3xf32>, tensor<3x8xf32> -> tensor<2x4x8xf32>
  %l = train.reduce_sum %r [0, 1, 2] : tensor<2x4x8xf32> -> tensor<f32>
  train.yield %l : tensor<f32>
  }
}
