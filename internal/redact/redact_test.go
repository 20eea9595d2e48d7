package redact_test

import (
	"errors"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/courier-go/courier/internal/redact"
)

func TestURL(t *testing.T) {
	for raw, want := range map[string]string{
		// user information
		"postgres://app:secret@db:5432/shop":                             "postgres://app:xxxxx@db:5432/shop",
		"postgresql://app@db/shop?search_path=orders":                    "postgresql://app@db/shop?search_path=orders",
		"amqp://guest:guest@h:5672/":                                     "amqp://guest:xxxxx@h:5672/",
		"amqp://guest@h:5672/":                                           "amqp://guest@h:5672/",
		"amqps://u:p%40ss@rabbit:5671/shop?exchange=events&prefix=shop.": "amqps://u:xxxxx@rabbit:5671/shop?exchange=events&prefix=shop.",
		"amqp://u:p@ss@h/":                                               "amqp://u:xxxxx@h/",
		"nats://a:1,tls://u:p@b:2":                                       "nats://a:1,tls://u:xxxxx@b:2",
		"nats://s3cr3tt0k3n@h:4222":                                      "nats://xxxxx@h:4222",
		"kafka://h1:9092,h2:9092?x=y:z":                                  "kafka://h1:9092,h2:9092?x=y:z",
		"amqp://u:p,ss@h/":                                               "amqp://u:xxxxx@h/",
		"mysql://app:secret@db:3306/shop?timeout=5s":                     "mysql://app:xxxxx@db:3306/shop?timeout=5s",
		// passwords with unencoded /, ? or #: whatever a parser reads
		"mysql://u:p#ss@h/db":     "mysql://u:xxxxx@h/db",
		"amqp://u:pa/ss@h/vhost":  "amqp://u:xxxxx@h/vhost",
		"amqp://u:12/34@h/":       "amqp://u:xxxxx@h/",
		"postgres://u:p?ss@h/db":  "postgres://u:xxxxx@h/db",
		"nats://tok/en@h:4222":    "nats://xxxxx@h:4222",
		"mysql://u:100%@db/shop":  "mysql://u:xxxxx@db/shop",
		"amqp://u:hunter2@x:bad/": "amqp://u:xxxxx@x:bad/",
		"https://u:pa/ss@h/hook":  "https://u:xxxxx@h/hook",
		// secret parameters
		"postgres://app@db/shop?password=secret&sslmode=require":  "postgres://app@db/shop?password=xxxxx&sslmode=require",
		"postgres://app@db/shop?sslpassword=secret&sslkey=/k.pem": "postgres://app@db/shop?sslpassword=xxxxx&sslkey=xxxxx",
		"postgres://db/shop?Pass%77ord=secret":                    "postgres://db/shop?Pass%77ord=xxxxx",
		"mysql://app@db/shop?timeout=5s&password=secret":          "mysql://app@db/shop?timeout=5s&password=xxxxx",
		"nats://h:4222?auth_token=abc":                            "nats://h:4222?auth_token=xxxxx",
		// the web: every query value, token-like path segments, fragments
		"https://h/a@b":                        "https://h/a@b",
		"https://u:p@h/a@b":                    "https://u:xxxxx@h/a@b",
		"https://hooks.example/courier":        "https://hooks.example/courier",
		"https://hooks.example:8443/v1/orders": "https://hooks.example:8443/v1/orders",
		"https://h:8443/users/a@b":             "https://h:8443/users/a@b",
		"https://hooks.slack.example/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX": "https://hooks.slack.example/services/xxxxx/xxxxx/xxxxx",
		"https://h/hook?token=abc&tenant=7":                                                 "https://h/hook?token=xxxxx&tenant=xxxxx",
		"https://h/api/webhooks/123456789012345678/abcdefghijklmnop":                        "https://h/api/webhooks/xxxxx/xxxxx",
		"https://h/hook#access_token=abc":                                                   "https://h/hook#xxxxx",
		"http://tokenonly@127.0.0.1:8080/in":                                                "http://xxxxx@127.0.0.1:8080/in",
		// strings that are no URL
		"app:secret@tcp(db:3306)/shop?parseTime=true":  "app:xxxxx@tcp(db:3306)/shop?parseTime=true",
		"host=db user=app password=secret dbname=shop": "host=db user=app password=xxxxx dbname=shop",
		"host=db password='it''s a secret' port=5432":  "host=db password='xxxxx' port=5432",
		"sqlite:relative.db":                           "sqlite:relative.db",
		"/var/lib/courier.db":                          "/var/lib/courier.db",
		"":                                             "",
		"redis://u:hunter2@x":                          "redis://u:xxxxx@x",
	} {
		if got := redact.URL(raw); got != want {
			t.Errorf("URL(%q) = %q, want %q", raw, got, want)
		}
	}
}

func TestIn(t *testing.T) {
	raw := "amqp://u:p%40ss%2Fw0rd@h:5672/?heartbeat=5"
	text := `dial "amqp://u:p%40ss%2Fw0rd@h:5672/?heartbeat=5": auth failed for password p@ss/w0rd`
	got := redact.In(text, raw)
	if strings.Contains(got, "w0rd") || !strings.Contains(got, "amqp://u:xxxxx@h:5672/?heartbeat=5") {
		t.Errorf("In = %q", got)
	}
	hook := "https://h/hook?token=abcdef"
	if got := redact.In(`Post "`+hook+`": EOF`, hook); got != `Post "https://h/hook?token=xxxxx": EOF` {
		t.Errorf("In = %q", got)
	}
}

func TestCheckUserinfo(t *testing.T) {
	for _, c := range []struct {
		raw, terminators string
		bad              bool
	}{
		{"amqp://u:pa/ss@h/", "/?#", true},
		{"amqp://u:p?ss@h/", "/?#", true},
		{"mysql://u:p#ss@h/db", "/?#", true},
		{"nats://tok/en@h:4222", "/?#", true},
		{"nats://a:1,nats://u:p/w@b:2", "/?#", true},
		{"postgres://u:p?ss@h/db", "/", false}, // pgx reads it as libpq does
		{"postgres://u:p/ss@h/db", "/", true},
		{"amqp://u:p%2Fss@h/", "/?#", false},
		{"amqp://u:p@ss@h/", "/?#", false},
		{"https://h/a@b", "/?#", false},
		{"https://h:8443/a@b", "/?#", false},
		{"postgres://h/db?application_name=a@b", "/", false},
		{"kafka://h1:9092,h2:9092", "/?#", false},
	} {
		err := redact.CheckUserinfo(c.raw, c.terminators)
		if (err != nil) != c.bad || err != nil && (!errors.Is(err, redact.ErrUnencoded) || strings.Contains(err.Error(), "pa/") || !strings.Contains(err.Error(), "percent-encode")) {
			t.Errorf("CheckUserinfo(%q, %q) = %v; want an error %v", c.raw, c.terminators, err, c.bad)
		}
	}
}

// schemeRE matches a URL scheme (RFC 3986).
var schemeRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*$`)

// Whatever the password (any bytes, unencoded / ? # @ : , included) and
// wherever it sits (user information or a secret parameter), neither URL
// nor In shows it, and redacting twice changes nothing more. It may occur
// in the result as often as the rest of the URL holds it by chance.
func FuzzURL(f *testing.F) {
	for _, s := range [][4]string{
		{"postgres", "app", "secret", "db:5432/shop"},
		{"mysql", "u", "p#ss", "h/db"},
		{"amqp", "guest", "pa/ss?x", "h:5672/"},
		{"nats", "", "tok@en", "h:4222"},
		{"https", "u", "p:w", "h/hook?token=abc"},
		{"postgres", "u", "p@ss/word", "h/db?application_name=a"},
		{"kafka", "", "", "h1:9092,h2:9092"},
	} {
		f.Add(s[0], s[1], s[2], s[3])
	}
	f.Fuzz(func(t *testing.T, scheme, user, password, rest string) {
		if strings.ContainsAny(user, ":@/?#,") || !schemeRE.MatchString(scheme) || strings.Contains(rest, "@") || len(password) < 4 || strings.Contains(password, "://") || strings.Trim(password, "x") == "" {
			return // the fields must be what their names say (:// starts another URL)
		}
		// On a web URL, an unencoded @, /, ? or # in the password may make
		// the URL read as host:port, path and fragment (net/url reads it
		// so), and an @ in a path is no password's end: the package
		// documents the limit.
		web := strings.HasPrefix(strings.ToLower(scheme), "http") || strings.HasPrefix(strings.ToLower(scheme), "ws")
		ambiguous := web && strings.ContainsAny(password, "@/?#")
		forms := []func(pw string) string{
			func(pw string) string { return scheme + "://" + user + ":" + pw + "@" + rest },
		}
		if !strings.HasPrefix(password, "//") { // else user://… is a URL
			forms = append(forms, func(pw string) string { return user + ":" + pw + "@tcp(" + rest + ")/db" })
		}
		if !strings.ContainsAny(rest, "?#") { // else the parameter is in a fragment, hidden whole
			forms = append(forms, func(pw string) string { return scheme + "://" + user + "@" + rest + "?password=" + url.QueryEscape(pw) })
		}
		for _, form := range forms {
			raw, skeleton := form(password), form(redact.Mask)
			got := redact.URL(raw)
			if !ambiguous && strings.Count(got, password) > strings.Count(skeleton, password) {
				t.Fatalf("URL(%q) = %q shows the password %q", raw, got, password)
			}
			if again := redact.URL(got); again != got {
				t.Fatalf("URL(%q) = %q, but URL of that = %q", raw, got, again)
			}
			// A client may quote the password it read: with an @ in it,
			// readings differ (the first or the last @ ends it).
			in := redact.In("failed: "+raw+" ("+password+")", raw)
			if !ambiguous && strings.Count(in, password) > strings.Count(skeleton, password) {
				t.Fatalf("In(…, %q) = %q shows the password %q", raw, in, password)
			}
		}
		redact.URL(scheme + user + password + rest) // any string: no panic
	})
}
