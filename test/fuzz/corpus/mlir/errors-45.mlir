train.model @m {
  train.step {
    %a = train.input "a" : tensor<2x3xi32>
    %c = train.reshape %a : tensor<2x3xi32> -> tensor<6xf32>
  }
}
