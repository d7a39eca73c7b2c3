train.model @k {
  train.step {
    %x = train.input "x" : tensor<4x8xf32>
    %g = train.input "g" : tensor<8xf32>
    %b = train.input "b" : tensor<8xf32>
    %e = kernel.elementwise (%x, %g) : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32> {
    ^bb0(%a: f32, %c: f32):
      %m = kernel.mul %a, %c : f32
      %t = kernel.tanh %m : f32
      kernel.yield %t : f32
    }
    %r = kernel.reduce (%e, %g) sum [1] of [4, 8] : tensor<4x8xf32>, tensor<8xf32> -> tensor<4xf32> {
    ^bb0(%a: f32, %c: f32):
      %m = kernel.mul %a, %c : f32
      kernel.yield %m : f32
    }
    %n = kernel.rows "layer_norm"(%e, %g, %b) : tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32> -> tensor<4x8xf32>
    %w = train.input "w" : tensor<8x8xf32>
    %p = kernel.gemm %n, %w transpose_b : tensor<4x8xf32>, tensor<8x8xf32> -> tensor<4x8xf32>
    %s = train.softmax %p : tensor<4x8xf32>
    %q = train.mul %s, %s : tensor<4x8xf32>
    %c0 = train.reduce_sum %q [0] : tensor<4x8xf32> -> tensor<8xf32>
    %c1 = train.reduce_sum %c0 [0] : tensor<8xf32> -> tensor<f32>
    %r1 = train.reduce_sum %r [0] : tensor<4xf32> -> tensor<f32>
    %l = train.add %c1, %r1 : tensor<f32>
    train.yield %l : tensor<f32>
  }
}
