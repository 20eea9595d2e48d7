package nats

// BatchEveryRun makes p send every run of several messages of one key as
// atomic batches, whatever they cost (Publish before BatchTime), for the
// benchmarks that compare the ways.
func BatchEveryRun(p *Publisher) { p.batchAll = true }
