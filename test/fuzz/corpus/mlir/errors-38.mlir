train.model @m {
  train.step {
    %a = train.input "a" : tensor<2x4xf32>
    %b = train.input "b" : tensor<4x5xf32>
    %c = train.matmul %a, %b : tensor<2x4xf32>, tensor<4x5xf32> -> tensor<2x4xf32>
  }
}
