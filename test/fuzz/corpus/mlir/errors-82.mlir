train.model @m {
  train.step {
    %i = train.input "i" : tensor<2x3xi32>
    %c = train.one_hot %i : tensor<2x3xi32> -> tensor<3x8xf32>
  }
}
