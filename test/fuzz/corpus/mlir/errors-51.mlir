train.model @m {
  train.step {
    %a = train.input "a" : tensor<2x3xf32>
    %c = train.reduce_sum %a [0] : tensor<2x3xf32> -> tensor<2xf32>
  }
}
