train.model @m attributes {trainer = {sync = "async"}} {
}
