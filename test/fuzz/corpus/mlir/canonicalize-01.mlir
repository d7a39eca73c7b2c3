train.model @add_zero_same_shape {
  train.step {
    %x = train.input "x" : tensor<4xbf16>
    %z = train.constant dense<0.0> : tensor<4xbf16>
    %a = train.add %z, %x : tensor<4xbf16>
    %b = train.add %a, %z : tensor<4xbf16>
    %l = train.reduce_sum %b [0] : tensor<4xbf16> -> tensor<bf16>
    train.yield %l : tensor<bf16>
  }
}
