train.model @modelops {
  train.step {
    %tok = train.input "tokens" : tensor<2x3xi32>
    %tab = train.input "table" : tensor<8x4xf32>
    %g = train.input "g" : tensor<4xf32>
    %q = train.input "q" : tensor<2x2x3x4xf32>
    %s = train.input "s" : tensor<2x3x3xf32>
    %e = train.embedding %tab[%tok] : tensor<8x4xf32>, tensor<2x3xi32> -> tensor<2x3x4xf32>
    %sm = train.softmax %s : tensor<2x3x3xf32>
    %smc = train.softmax %s causal : tensor<2x3x3xf32>
    %ln = train.layer_norm %e, %g, %g : tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>
    %ln2 = train.layer_norm %e, %g, %g {eps = 1.0e-3 : f64} : tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>
    %rn = train.rms_norm %ln, %g : tensor<2x3x4xf32>, tensor<4xf32>
    %rn2 = train.rms_norm %ln, %g {eps = 0.25 : f64} : tensor<2x3x4xf32>, tensor<4xf32>
    %att = train.attention %q, %q, %q causal {scale = 0.5 : f64} : tensor<2x2x3x4xf32>
    %att2 = train.attention %q, %q, %q {scale = 0.25 : f64} : tensor<2x2x3x4xf32>
    %sc = train.scatter_rows %rn into rows[%tok] : tensor<2x3x4xf32>, tensor<2x3xi32> -> tensor<8x4xf32>
    %oh = train.one_hot %tok : tensor<2x3xi32> -> tensor<2x3x8xf32>
    %l = train.cross_entropy %rn, %tok : tensor<2x3x4xf32>, tensor<2x3xi32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
