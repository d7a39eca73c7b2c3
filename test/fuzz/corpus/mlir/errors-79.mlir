train.model @m {
  train.step {
    %t = train.input "t" : tensor<8x4xf32>
    %i = train.input "i" : tensor<3xi32>
    %c = train.embedding %t[%i] : tensor<8x4xf32>, tensor<3xi32> -> tensor<3x4xbf16>
  }
}
