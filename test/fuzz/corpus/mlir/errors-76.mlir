train.model @m {
  train.step {
    %q = train.input "q" : tensor<1x2x3x4xf32>
    %k = train.input "k" : tensor<1x2x5x4xf32>
    %c = "train.attention"(%q, %k, %k) <{scale = 0.5 : f64}> : (tensor<1x2x3x4xf32>, tensor<1x2x5x4xf32>, tensor<1x2x5x4xf32>) -> tensor<1x2x3x4xf32>
  }
}
