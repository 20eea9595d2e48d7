package webhook

import (
	"strings"

	"github.com/courier-go/courier/broker/wire"
)

// Header names of a webhook request (see package broker/wire). The
// webhook-* names are the Standard Webhooks ones, on every request; the
// Courier-* names are sent in BodyRaw mode only, unsigned.
const (
	HeaderID          = wire.HeaderWebhookID
	HeaderTimestamp   = wire.HeaderWebhookTimestamp
	HeaderSignature   = wire.HeaderWebhookSignature
	HeaderContentType = wire.HeaderContentType
	HeaderTopic       = wire.HeaderTopic
	HeaderKey         = wire.HeaderKey
	HeaderType        = wire.HeaderType
	HeaderVersion     = wire.HeaderVersion
	HeaderOccurredAt  = wire.HeaderOccurredAt
	HeaderNames       = wire.HeaderNames
)

// unsignedHeaders are the headers of BodyRaw mode that carry the message,
// which no signature covers: a Handler refuses a request that carries any.
func unsignedHeaders() []string {
	return []string{HeaderTopic, HeaderKey, HeaderType, HeaderVersion, HeaderOccurredAt, HeaderNames}
}

// validValue reports whether s survives as an HTTP header value unchanged:
// no control characters but tab, no white space at either end.
func validValue(s string) bool {
	if s != strings.TrimSpace(s) || strings.Trim(s, "\t ") != s {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < 0x20 && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}
