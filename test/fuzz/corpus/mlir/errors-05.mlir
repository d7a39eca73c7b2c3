train.model @m attributes {trainer = {optimizer = 1}} {
}
