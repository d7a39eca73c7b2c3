train.model @m {
  train.step {
  }
}
