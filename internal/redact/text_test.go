package redact_test

import (
	"strings"
	"testing"

	"github.com/courier-go/courier/internal/redact"
)

func TestText(t *testing.T) {
	for text, want := range map[string]string{
		"charge failed: dial postgres://billing:hunter22@db:5432/pay: connection refused": "charge failed: dial postgres://billing:xxxxx@db:5432/pay: connection refused",
		`call "https://api.example/v1/charge?api_key=sk_live_123" failed: 401`:            `call "https://api.example/v1/charge?api_key=xxxxx" failed: 401`,
		"open (mysql://app:s3cret@db/shop): password s3cret rejected":                     "open (mysql://app:xxxxx@db/shop): password xxxxx rejected",
		"dsn root:topsecret@tcp(db:3306)/app, refused":                                    "dsn root:xxxxx@tcp(db:3306)/app, refused",
		"host=db user=app password='it''s secret' sslmode=require: timeout":               "host=db user=app password='xxxxx' sslmode=require: timeout",
		"token=abcd1234 expired":                                         "token=xxxxx expired",
		"url=nats://s3cr3tt0k3n@nats:4222 closed":                        "url=nats://xxxxx@nats:4222 closed",
		"card 4242 declined\n\ngoroutine 1 [running]:\nmain.charge(0x1)": "card 4242 declined\n\ngoroutine 1 [running]:\nmain.charge(0x1)",
		"order 17: out of stock (sku ABC-1), retry at 10:30":             "order 17: out of stock (sku ABC-1), retry at 10:30",
		"":       "",
		"   ":    "   ",
		"a\tb c": "a\tb c",
	} {
		if got := redact.Text(text); got != want {
			t.Errorf("Text(%q)\n got %q\nwant %q", text, got, want)
		}
	}
}

// FuzzText checks that Text never fails, keeps text that quotes no URL,
// DSN or key=value pair as it is, and hides the password of a URL put
// anywhere in any text, wherever else the text repeats it.
func FuzzText(f *testing.F) {
	f.Add("error: ", "app", "hunter22", " failed")
	f.Add(`"`, "u", "p4ssw0rd", `" password p4ssw0rd`)
	f.Add("password='", "root", "secret-1", "")
	f.Add("a:b@c ", "user", "pass", " d=e")
	f.Fuzz(func(t *testing.T, prefix, user, pw, suffix string) {
		for _, s := range []string{prefix, suffix, prefix + suffix} {
			got := redact.Text(s)
			if !strings.ContainsAny(s, ":@=") && got != s {
				t.Fatalf("Text(%q) = %q: changed text that quotes nothing secret", s, got)
			}
		}
		if len(pw) < 4 || strings.Trim(pw, "abcdefghijklmnopqrstuvwABCDEFGHIJKLMNOPQRSTUVWYZ0123456789_-") != "" ||
			user == "" || strings.Trim(user, "abcdefghijklmnopqrstuvwxyz0123456789") != "" {
			return
		}
		text := prefix + " postgres://" + user + ":" + pw + "@db.example:5432/app " + suffix
		if got := redact.Text(text); strings.Contains(got, pw) {
			t.Fatalf("Text(%q) = %q: the password %q shows", text, got, pw)
		}
	})
}
