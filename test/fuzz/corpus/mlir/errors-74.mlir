train.model @m {
  train.step {
    %x = train.input "x" : tensor<2x4xf32>
    %g = train.input "g" : tensor<4xf32>
    %c = train.rms_norm %x, %g {eps = -1.0e-5 : f64} : tensor<2x4xf32>, tensor<4xf32>
  }
}
