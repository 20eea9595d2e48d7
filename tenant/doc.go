// Package tenant runs Courier for many tenants, each with a database of
// its own or a schema of its own in a shared PostgreSQL database, from
// one fleet of relay processes instead of a relay per tenant.
//
// # Tenants
//
// A [Tenant] is a name and the URL of its database, in a form package
// store/dburl opens: a SQLite file, a schema of a shared PostgreSQL
// database (search_path), a PostgreSQL database, or a MySQL/MariaDB
// database. One Fleet, and one Consumer, serve tenants of every kind at
// once. The package's tests run the fleet over each kind and over all of
// them in one fleet, and the consumer over each kind, on real PostgreSQL
// and MariaDB servers. Each tenant's database is migrated as any Courier
// database is (courier migrate creates a missing schema or SQLite file,
// not a missing database on a server).
//
// # The relay fleet
//
// A [Fleet] reads the tenants from a [Source] ([List], [File], or [Query]
// against a catalogue database), again every Config.Refresh, so tenants
// come and go without a restart. An entry that is not a valid tenant (see
// [Sift]) is rejected on its own: logged once, reported by
// [Fleet.Status], and left out, while the other tenants are served
// ([Sieve] does this for the Fleet, the Consumer, and any program that
// reads a Source). Each tenant it serves has a relay of its
// own (package relay) on its own database: its own claims, leases,
// retries, dead letters and scheduled messages. No batch, lease or broker
// call holds two tenants' messages, so a tenant whose database is slow,
// down or holds a poison key delays nothing but its own messages. Every
// message leaves stamped with its tenant's name in [Header], which
// producers cannot set.
//
// # Bounded connections
//
// At most Config.MaxOpen tenants have their database open at once, each
// with Config.Relay.Concurrency connections (1 by default): a thousand
// tenants do not hold a thousand idle connections. While other tenants
// wait for a place, a tenant that has found nothing to publish for
// Config.IdleAfter, or has had its place for Config.Turn, closes its
// database and gives its place to the tenant that has waited longest: the
// tenants take turns, and a busy tenant cannot keep the others out. Set
// MaxOpen to at least the tenants that are busy at once: past it, a
// tenant's messages wait for its turn. A tenant whose
// database cannot be opened, or whose claims fail, waits for its next try
// (1s, doubling up to 30s) without holding a place.
//
// # Several processes
//
// Processes given the same Config.Members database share the tenants:
// each records a heartbeat there ([store.Operations.Beat]) and serves the
// tenants that rendezvous hashing over the live members gives it
// ([Owner]). When a process stops, it leaves at once; when it dies, its
// heartbeat expires after three beats and the others take its tenants
// over, and the leases of the rows it held expire after LeaseDuration, as
// with any relay. While the members change, two processes may serve a
// tenant for a moment: the rows' leases keep that correct (each row is
// leased by one relay, each key's rows are published in order), as they
// do for several relays on one database.
//
// # Consumers
//
// A [Consumer] is one inbox consumer (package inbox) over a subscription
// carrying every tenant's messages: it applies each message in the
// database of the tenant its Header names, the inbox marker and the
// handler's effects in one transaction there, so a redelivery is a
// duplicate in that tenant's database, exactly as with one database. The
// handler finds the tenant with [From] and its database with [DB].
// Failures, parked deliveries and their replays stay in the tenant's
// database; a message of no tenant, or of one the Source does not list
// even when read again, is parked in ConsumerConfig.Refused and never
// touches a tenant's database. At most ConsumerConfig.MaxOpen tenants'
// databases are open at once, the least recently used closed first.
//
// # Operations
//
// [Fleet.Status] reports the members, the tenants served and each one's
// errors and totals. The courier command serves the same fleet (courier
// relay --tenants-file, --tenants or --tenants-query), and its status,
// dlq, cleanup and dashboard commands take --tenant to work on one
// tenant's database; docs/operations.md has the details.
package tenant
