train.model @embedding_cross_entropy {
  train.param @wte : tensor<8x4xf32> = normal(0.02) {role = "embedding"}
  train.step {
    %tok = train.input "tokens" : tensor<2x3xi32>
    %tgt = train.input "targets" : tensor<2x3xi32>
    %e = train.read @wte : tensor<8x4xf32>
    %x = train.embedding %e[%tok] : tensor<8x4xf32>, tensor<2x3xi32> -> tensor<2x3x4xf32>
    %l = train.cross_entropy %x, %tgt : tensor<2x3x4xf32>, tensor<2x3xi32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
