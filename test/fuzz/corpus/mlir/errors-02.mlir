train.model @m attributes {trainer = {lr = 1.0e-3, learning_rate = 1.0e-3}} {
}
