package setting_test

import (
	"strings"
	"testing"

	"github.com/courier-go/courier/internal/setting"
)

func TestTopicSet(t *testing.T) {
	in, err := setting.TopicSet("p: C.HoldKeys", nil)
	if in != nil || err != nil {
		t.Fatalf("empty list: %v, %v; want no set", in != nil, err)
	}
	in, err = setting.TopicSet("p: C.HoldKeys", []string{"orders", "payments"})
	if err != nil || !in("orders") || !in("payments") || in("users") || in("*") {
		t.Fatalf("orders,payments: %v", err)
	}
	in, err = setting.TopicSet("p: C.HoldKeys", []string{"*"})
	if err != nil || !in("orders") || !in("anything") {
		t.Fatalf("*: %v", err)
	}
	for _, c := range []struct {
		topics []string
		want   string
	}{
		{[]string{"orders", ""}, "p: C.HoldKeys[1] is empty"},
		{[]string{" "}, "p: C.HoldKeys[0] is empty"},
		{[]string{"*", "orders"}, `p: C.HoldKeys holds "*" and other topics`},
		{[]string{"orders", "*"}, `p: C.HoldKeys holds "*" and other topics`},
		{[]string{"*", "*"}, `p: C.HoldKeys holds "*" and other topics`},
		{[]string{"orders", "orders"}, `p: C.HoldKeys names topic "orders" twice`},
	} {
		if _, err := setting.TopicSet("p: C.HoldKeys", c.topics); err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%q: %v; want %q…", c.topics, err, c.want)
		}
	}
}
