train.model @m {
  train.step {
    %c = "train.constant"() <{value = dense<1.000000e+00> : tensor<2xf32>}> : () -> tensor<3xf32>
  }
}
