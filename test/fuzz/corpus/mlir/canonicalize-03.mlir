train.model @add_nonzero {
  train.step {
    %x = train.input "x" : tensor<2xf32>
    %one = train.constant dense<1.0> : tensor<f32>
    %mix = train.constant dense<[0.0, 1.0]> : tensor<2xf32>
    %a = train.add %x, %one : tensor<2xf32>, tensor<f32> -> tensor<2xf32>
    %b = train.add %a, %mix : tensor<2xf32>
    %l = train.reduce_sum %b [0] : tensor<2xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
