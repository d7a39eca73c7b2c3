train.model @m {
  train.step {
    %a = train.input "a" : tensor<2x1xf32>
    %b = train.input "b" : tensor<3xf32>
    %c = train.sub %a, %b : tensor<2x1xf32>, tensor<3xf32> -> tensor<2x1xf32>
  }
}
