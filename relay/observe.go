package relay

import "github.com/courier-go/courier/relay/settings"

// Observer is told what a relay does, as it does it, for metrics: package
// metrics implements it with Prometheus. It is settings.Observer, which
// the CDC relay (relay/cdc) takes too; see there for its methods.
type Observer = settings.Observer

// NopObserver does nothing. Embed it in an Observer to implement only the
// methods you need. It is settings.NopObserver.
type NopObserver = settings.NopObserver
