train.model @m {
  train.step {
    %c = train.constant 1.0 : f32
  }
}
