package dashboard

import "net/url"

// tenantName returns the name of the tenant the segment seg of a request's
// path (percent-encoded as it came) stands for; ok is false when it
// stands for none.
func tenantName(seg string) (name string, ok bool) {
	s, err := url.PathUnescape(seg)
	if err != nil {
		return "", false
	}
	return unsegment(s)
}

// tenantLink is the path of a tenant's overview, under the dashboard's
// prefix.
func tenantLink(name string) string { return "/t/" + segment(name) + "/" }
