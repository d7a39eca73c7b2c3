train.model @m {
  train.step {
    %x = train.input "x" : tensor<2x4xbf16>
    %g = train.input "g" : tensor<4xf32>
    %c = train.rms_norm %x, %g : tensor<2x4xbf16>, tensor<4xf32>
  }
}
