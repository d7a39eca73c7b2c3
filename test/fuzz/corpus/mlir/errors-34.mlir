train.model @m {
  train.step {
    %a = train.input "a" : tensor<4xf32>
    %b = train.input "b" : tensor<4x3xf32>
    %c = train.matmul %a, %b : tensor<4xf32>, tensor<4x3xf32> -> tensor<3xf32>
  }
}
