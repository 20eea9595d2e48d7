package main

import "strings"

func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}
