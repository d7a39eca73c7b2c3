train.model @m {
  train.step {
    "train.yield"() : () -> ()
  }
}
