train.model @bf16 {
  train.param @w : tensor<2x2xbf16> = normal(1.0)
  train.step {
    %w = train.read @w : tensor<2x2xbf16>
    %e = train.exp %w : tensor<2x2xbf16>
    %l = train.reduce_sum %e [0, 1] : tensor<2x2xbf16> -> tensor<bf16>
    train.yield %l : tensor<bf16>
  }
}
