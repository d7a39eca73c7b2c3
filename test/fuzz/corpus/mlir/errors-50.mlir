train.model @m {
  train.step {
    %a = train.input "a" : tensor<2x3xf32>
    %c = train.reduce_sum %a [2] : tensor<2x3xf32> -> tensor<2x3xf32>
  }
}
