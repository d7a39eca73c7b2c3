train.model @nonscalar {
  train.param @w : tensor<3xf32> = normal(1.0)
  train.step {
    %w = train.read @w : tensor<3xf32>
    "train.yield"(%w) : (tensor<3xf32>) -> ()
  }
}
