// Package group shares a consumer's key partitions among the instances
// that run it, for the brokers whose own consumer groups do not (NATS
// JetStream, RabbitMQ): each partition is consumed by one instance at a
// time, the partitions are spread evenly over the instances alive, and they
// move when an instance joins, leaves or falls silent. Kafka's consumer
// groups do this themselves; package broker/kafka does not use this one.
//
// # Presence
//
// Every member announces itself on the group's channel (a NATS subject, a
// RabbitMQ fanout exchange: the [Beacon]) every Config.Heartbeat, and says
// so when it leaves. A member not heard from for Config.Timeout is gone:
// killed, frozen, cut off. Each member keeps its own view of who is alive,
// timed by its own clock from the moment it heard each announcement, so no
// two clocks are compared. A member that starts listens for one Timeout
// before it takes any partition, so that it does not take them all while
// it has heard no one yet.
//
// # Assignment
//
// [Assign] maps the partitions onto the members alive, the same way on
// every member that sees the same members: each member gets the partitions
// count divided by the members, give or take one, and a partition prefers
// the members in an order of its own (rendezvous hashing), so that a
// member joining or leaving moves few partitions besides its own.
//
// # Handover, and why order survives it
//
// Views differ for a moment (one member has heard a newcomer, another not
// yet), so two members may both want a partition. The broker settles it:
// each [Owner] takes a partition only in a way the broker grants to one
// consumer at a time (a work-queue stream's consumer whose filter no other
// consumer may share on NATS; a queue with a single active consumer on
// RabbitMQ), and gives it up so that what it has not acknowledged goes back
// to the broker, ahead of everything later. The new owner therefore starts
// at or before the first message of the partition not yet applied, and
// reads it in order.
//
// The old owner may still be working through messages it received (a
// member that froze wakes up with deliveries in hand). That is safe with
// the inbox: each owner handles a key's messages in order, one at a time,
// and a message runs only once its marker is inserted, which waits for
// any other owner's transaction on the same message and finds it applied.
// So a message is applied once, and only after every earlier message of
// its key, whoever applies it.
package group
