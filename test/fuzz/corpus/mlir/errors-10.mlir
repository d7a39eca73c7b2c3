train.model @m attributes {trainer = {micro_batches = 0}} {
}
