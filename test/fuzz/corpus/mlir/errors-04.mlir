train.model @m attributes {trainer = {total_steps = 100.0}} {
}
