train.model @m {
  train.step {
    %g = train.input "g" : tensor<2x4x4xf32>
    %c = train.newton_schulz %g : tensor<2x4x4xf32>
  }
}
