train.model @m {
  train.step {
    %x = train.input "x" : tensor<2x3x4xf32>
    %t = train.transpose %x [1, 2, 0] : tensor<2x3x4xf32> -> tensor<3x4xf32>
  }
}
