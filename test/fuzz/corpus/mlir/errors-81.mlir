train.model @m {
  train.step {
    %u = train.input "u" : tensor<3x4xf32>
    %i = train.input "i" : tensor<2x3xi32>
    %c = train.scatter_rows %u into rows[%i] : tensor<3x4xf32>, tensor<2x3xi32> -> tensor<8x4xf32>
  }
}
