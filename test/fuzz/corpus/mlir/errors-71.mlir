train.model @m {
  train.step {
    %x = train.input "x" : tensor<2x4xf32>
    %g = train.input "g" : tensor<4xf32>
    %c = "train.layer_norm"(%x, %g, %g) : (tensor<2x4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<4x2xf32>
  }
}
