train.model @m attributes {trainer = {optimizer = "lion"}} {
}
