train.model @m {
  train.step {
    %t = train.input "t" : tensor<8xf32>
    %i = train.input "i" : tensor<2xi32>
    %c = train.embedding %t[%i] : tensor<8xf32>, tensor<2xi32> -> tensor<2xf32>
  }
}
