package main

import (
	"net/url"
	"strings"
)

// redact hides the password in a URL.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}

func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}
