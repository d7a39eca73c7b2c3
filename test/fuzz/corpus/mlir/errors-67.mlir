train.model @m {
  train.step {
    %x = train.input "x" : tensor<2x4xf32>
    %g = train.input "g" : tensor<4xf32>
    %b = train.input "b" : tensor<1x4xf32>
    %c = train.layer_norm %x, %g, %b : tensor<2x4xf32>, tensor<4xf32>, tensor<1x4xf32>
  }
}
