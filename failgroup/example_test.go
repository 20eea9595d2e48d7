package failgroup_test

import (
	"fmt"

	"github.com/courier-go/courier/failgroup"
	"github.com/courier-go/courier/store"
)

// Two dead letters rejected for one reason, their ids and sizes apart, are
// one group; a panic is grouped by its site.
func Example() {
	a := failgroup.OfDeadLetter(`subject "courier.orders": nats: maximum payload exceeded: payload is 2000000 bytes`)
	b := failgroup.OfDeadLetter(`subject "courier.refunds": nats: maximum payload exceeded: payload is 3100000 bytes`)
	fmt.Println(a.ID() == b.ID(), a.Class)
	fmt.Println(a.Pattern)

	p := failgroup.OfParked("billing", store.ReasonFailed, "handler panicked at payment.(*Service).charge (charge.go:42): card 4242 declined")
	fmt.Println(p.Class, "|", p.Site, "|", p.Pattern)
	// Output:
	// true nats
	// subject "…": nats: maximum payload exceeded: payload is # bytes
	// failed: panic | payment.(*Service).charge (charge.go:42) | card # declined
}
