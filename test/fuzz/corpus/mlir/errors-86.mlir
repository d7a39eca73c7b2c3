train.model @m {
  train.step {
    %l = train.input "l" : tensor<2x5xf32>
    %t = train.input "t" : tensor<2xi32>
    %c = train.cross_entropy %l, %t : tensor<2x5xf32>, tensor<2xi32> -> tensor<bf16>
  }
}
