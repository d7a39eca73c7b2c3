train.model @two_reads {
  train.param @w : tensor<3xf32> = zeros
  train.step {
    %x = train.input "x" : tensor<3xf32>
    %w1 = train.read @w : tensor<3xf32>
    %a = train.mul %w1, %x : tensor<3xf32>
    %w2 = train.read @w : tensor<3xf32>
    %b = train.exp %w2 : tensor<3xf32>
    %y = train.add %a, %b : tensor<3xf32>
    %l = train.reduce_sum %y [0] : tensor<3xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
