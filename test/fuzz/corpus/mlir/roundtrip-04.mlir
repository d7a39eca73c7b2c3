train.model @constants {
  train.step {
    %a = train.constant dense<2.0> : tensor<f32>
    %b = train.constant dense<[1.0, 2.0, 3.0]> : tensor<3xf32>
    %c = train.constant dense<[0, 7]> : tensor<2xi32>
    %d = train.constant {tag = "x"} dense<0.5> : tensor<2x2xbf16>
    %l = train.add %a, %a : tensor<f32>
    train.yield %l : tensor<f32>
  }
}
