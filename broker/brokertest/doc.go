// Package brokertest is the conformance suite of Courier's brokers: the
// behaviour a broker.Publisher and a broker.Subscriber promise, written once
// and run against every broker package. A broker's test file calls [Run]
// with a [Harness]: the broker's [Features], stated in one place, and a
// function that builds a fresh destination (a stream, a topic, a queue) for
// each test:
//
//	func TestConformance(t *testing.T) {
//		brokertest.Run(t, brokertest.Harness{
//			Features: brokertest.Features{Dedup: true, PerKeyOrder: true, …},
//			New: func(t testing.TB) brokertest.Instance {
//				… // a fresh destination, removed by t.Cleanup
//				return brokertest.Instance{Topic: topic, Publisher: pub, Subscribe: …, Unreachable: …}
//			},
//		})
//	}
//
// What every broker is tested for:
//
//   - Publish acknowledges each message (nil errors) and the messages reach
//     the destination.
//   - Payloads and headers round-trip byte for byte: every byte value 0–255,
//     an empty payload, unicode keys and header values, the message's id,
//     type, version, content type and time (needs a Subscriber or Stored).
//   - An unreachable broker fails every message with an error wrapping
//     broker.ErrUnavailable and none wrapping broker.ErrRejected: an outage
//     never makes dead letters (needs Unreachable).
//
// And what a broker declares in its Features:
//
//   - Dedup: a message published twice (same id) is stored once.
//   - OversizeBytes: a message with a payload of that size is refused with
//     an error that counts against it (not broker.ErrUnavailable), wrapping
//     broker.ErrRejected when OversizeRejected says the refusal is
//     permanent; the other messages of the call are published.
//   - Subscriber (Instance.Subscribe set): a delivery neither acknowledged
//     nor dropped comes again after Close, to the next subscriber; Retry
//     redelivers after its delay with Attempt counted up; an acknowledged or
//     dropped delivery does not come again; RedeliversAfter and
//     AttemptsSurviveClose refine what is checked.
//   - PerKeyOrder: the messages of each key, published by one publisher over
//     several calls, reach the subscriber in publish order.
//   - SharedKeys (Instance.SubscribeShared set): two instances of a consumer
//     that shares its keys split the partitions; each key's messages go to
//     one of them, in order; when one closes, the other takes its
//     partitions and goes on with its keys, in order, with nothing
//     delivered twice (its predecessor settled what it had).
//   - PausedInstance (Instance.SharedRecipe set): the pause sweep. Two
//     instances of such a consumer, each a process of its own (this test
//     binary again: the package's TestMain calls [Child] with an [Opener]
//     that reads the recipe), receive a steady stream of messages while
//     one of them is stopped (SIGSTOP) for each of [Pauses]' durations, on
//     both sides of every boundary of the consumer's [Timing]; its
//     connections are cut for as long (a proxy in front of each of
//     Instance.BrokerAddrs stops forwarding); or two of its messages take
//     longer to apply than the broker's ack wait and the timeout. The
//     instances append each message they apply to one log, whose order
//     is the order of application across the processes: every message
//     must be applied, each key's for the first time in the order
//     published; a message applied again (what the next owner of a
//     partition receives of what the last did not acknowledge) is
//     counted, and an inbox would skip it. The cases run at once, each on
//     a destination of its own, with Harness.ShortTiming: cuts of nine
//     tenths and twice the timeout. With Harness.Long (a broker test's
//     -long) they run with Harness.Timing too, cuts as long as every
//     pause, each case ten times.
//
// And what a publisher declares itself, by implementing broker.OrderKeeper:
//
//   - PipelinedKeyOrder: many messages of each key in one call are stored in
//     call order, also around a message rejected for good (OversizeBytes
//     with OversizeRejected). What happens after a failure that is not for
//     good needs the broker's own fault injection: each broker package
//     tests it.
//
// Every test gets a destination of its own and talks to the broker for
// real; nothing is mocked. The tests run in parallel unless Features.Serial.
package brokertest
