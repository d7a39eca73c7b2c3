train.model @m {
  train.step {
    %t = train.input "t" : tensor<8x4xf32>
    %i = train.input "i" : tensor<2x3xi32>
    %c = train.embedding %t[%i] : tensor<8x4xf32>, tensor<2x3xi32> -> tensor<2x3x8xf32>
  }
}
