train.model @m {
  train.state @s : tensor<4xf32> = zeros(0.0)
  train.step {
    %x = train.input "x" : tensor<4xbf16>
    train.write %x to @s : tensor<4xbf16>
    %l = train.reduce_sum %x [0] : tensor<4xbf16> -> tensor<bf16>
    train.yield %l : tensor<bf16>
  }
}
