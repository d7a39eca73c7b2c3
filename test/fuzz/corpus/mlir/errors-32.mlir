train.model @m {
  train.step {
    %a = train.input "a" : tensor<2xf32>
    %c = "train.div"(%a, %a) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xbf16>
  }
}
