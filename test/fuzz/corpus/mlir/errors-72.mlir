train.model @m {
  train.step {
    %x = train.input "x" : tensor<2x4xf32>
    %g = train.input "g" : tensor<2xf32>
    %c = train.rms_norm %x, %g : tensor<2x4xf32>, tensor<2xf32>
  }
}
