package brokerkind_test

import (
	"context"
	"strings"
	"testing"

	"github.com/courier-go/courier/broker/brokerkind"
)

func parse(string, brokerkind.Options) (any, error) { return nil, nil }

func open(context.Context, string, any, brokerkind.Options) (*brokerkind.Opened, error) {
	return &brokerkind.Opened{}, nil
}

func TestRegister(t *testing.T) {
	brokerkind.Register(brokerkind.Kind{Name: "zz-test", Schemes: []string{"ZZT"}, Form: "zzt://x", Parse: parse, Open: open})
	brokerkind.Register(brokerkind.Kind{Name: "aa-test", System: "aa", Schemes: []string{"aat"}, Form: "aat://x", Parse: parse, Open: open})
	brokerkind.Register(brokerkind.Kind{Name: "mm-test"}) // for tracing alone

	if k, ok := brokerkind.ForScheme("zzt"); !ok || k.Name != "zz-test" || k.SystemName() != "zz-test" {
		t.Errorf("ForScheme(zzt) = %+v, %v", k, ok)
	}
	if k, ok := brokerkind.Named("aa-test"); !ok || k.SystemName() != "aa" {
		t.Errorf("Named(aa-test) = %+v, %v", k, ok)
	}
	if _, ok := brokerkind.ForScheme("mm-test"); ok {
		t.Error("a kind without schemes has a scheme")
	}
	if got := brokerkind.Forms(); !strings.HasPrefix(got, "aat://x") || !strings.HasSuffix(got, "zzt://x") {
		t.Errorf("Forms() = %q, want the forms in the order of the kinds' names", got)
	}
	for name, k := range map[string]brokerkind.Kind{
		"no name":          {Schemes: []string{"x1"}, Parse: parse, Open: open},
		"a name twice":     {Name: "zz-test"},
		"a scheme twice":   {Name: "other", Schemes: []string{"zzt"}, Parse: parse, Open: open},
		"schemes, no Open": {Name: "other", Schemes: []string{"x2"}, Parse: parse},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Errorf("Register of a kind with %s did not panic", name)
				}
			}()
			brokerkind.Register(k)
		})
	}
}

func TestOptions(t *testing.T) {
	var o brokerkind.Options
	if o.FlagName() != "broker URL" || o.Source() != "broker URL" || o.SecretEnv() != brokerkind.DefaultWebhookSecretEnv {
		t.Errorf("defaults: %q %q %q", o.FlagName(), o.Source(), o.SecretEnv())
	}
	o = brokerkind.Options{Flag: "--broker-url", Env: "COURIER_BROKER_URL", WebhookSecretEnv: "KEYS"}
	if o.Source() != "--broker-url (COURIER_BROKER_URL)" || o.SecretEnv() != "KEYS" {
		t.Errorf("set: %q %q", o.Source(), o.SecretEnv())
	}
	err := errorString("dial amqp://u:hunter2@h:1/:\n  refused (hunter2)")
	if got := brokerkind.ErrorText(err, "amqp://u:hunter2@h:1/"); strings.Contains(got, "hunter2") || strings.Contains(got, "\n") {
		t.Errorf("ErrorText = %q", got)
	}
}

type errorString string

func (e errorString) Error() string { return string(e) }
