train.model @m attributes {trainer = {lr = "fast"}} {
}
