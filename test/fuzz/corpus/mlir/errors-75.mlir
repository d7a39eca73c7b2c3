train.model @m {
  train.step {
    %q = train.input "q" : tensor<2x3x4xf32>
    %c = train.attention %q, %q, %q {scale = 0.5 : f64} : tensor<2x3x4xf32>
  }
}
