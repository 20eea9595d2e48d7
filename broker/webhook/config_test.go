package webhook_test

import (
	"strings"
	"testing"
	"time"

	"github.com/courier-go/courier/broker/cloudevents"
	"github.com/courier-go/courier/broker/webhook"
)

// Zero fields take their defaults; a negative one, a missing required one
// or a wrong value is refused with an error naming the field and the fix,
// by Validate and by the constructor alike.
func TestConfigValidate(t *testing.T) {
	secret := newSecret(t)
	pc := webhook.PublisherConfig{DefaultEndpoint: "https://hooks.example/in", Secrets: []string{secret}}
	vc := webhook.VerifierConfig{Secrets: []string{secret}}
	if err := pc.Validate(); err != nil {
		t.Errorf("PublisherConfig with an endpoint and a secret: %v", err)
	}
	if err := vc.Validate(); err != nil {
		t.Errorf("VerifierConfig with a secret: %v", err)
	}
	if err := (webhook.HandlerConfig{VerifierConfig: vc}).Validate(); err != nil {
		t.Errorf("HandlerConfig with a secret: %v", err)
	}
	pub := func(f func(*webhook.PublisherConfig)) (func() error, func() error) {
		c := pc
		f(&c)
		return c.Validate, func() error { _, err := webhook.NewPublisher(c); return err }
	}
	ver := func(f func(*webhook.VerifierConfig)) (func() error, func() error) {
		c := vc
		f(&c)
		return c.Validate, func() error { _, err := webhook.NewVerifier(c); return err }
	}
	hnd := func(f func(*webhook.HandlerConfig)) (func() error, func() error) {
		c := webhook.HandlerConfig{VerifierConfig: vc}
		f(&c)
		return c.Validate, func() error {
			h, err := webhook.NewHandler(c)
			if err == nil {
				_ = h.Close()
			}
			return err
		}
	}
	for name, tc := range map[string]struct {
		funcs func() (func() error, func() error)
		says  string
	}{
		"no endpoint": {func() (func() error, func() error) {
			return pub(func(c *webhook.PublisherConfig) { c.DefaultEndpoint = "" })
		}, "PublisherConfig.Endpoints"},
		"no secret": {func() (func() error, func() error) {
			return pub(func(c *webhook.PublisherConfig) { c.Secrets = nil })
		}, "PublisherConfig.Secrets"},
		"body mode": {func() (func() error, func() error) {
			return pub(func(c *webhook.PublisherConfig) { c.Body = 7 })
		}, "PublisherConfig.Body"},
		"Timeout": {func() (func() error, func() error) {
			return pub(func(c *webhook.PublisherConfig) { c.Timeout = -time.Second })
		}, "PublisherConfig.Timeout"},
		"Concurrency": {func() (func() error, func() error) {
			return pub(func(c *webhook.PublisherConfig) { c.Concurrency = -1 })
		}, "PublisherConfig.Concurrency"},
		"MaxRetryAfter": {func() (func() error, func() error) {
			return pub(func(c *webhook.PublisherConfig) { c.MaxRetryAfter = -time.Second })
		}, "PublisherConfig.MaxRetryAfter"},
		"Breaker.OpenFor": {func() (func() error, func() error) {
			return pub(func(c *webhook.PublisherConfig) { c.Breaker.OpenFor = -time.Second })
		}, "PublisherConfig.Breaker.OpenFor"},
		"CloudEvents": {func() (func() error, func() error) {
			return pub(func(c *webhook.PublisherConfig) { c.CloudEvents = &cloudevents.Config{} })
		}, "PublisherConfig.CloudEvents.Source"},
		"Tolerance": {func() (func() error, func() error) {
			return ver(func(c *webhook.VerifierConfig) { c.Tolerance = -time.Second })
		}, "VerifierConfig.Tolerance"},
		"MaxBodyBytes": {func() (func() error, func() error) {
			return ver(func(c *webhook.VerifierConfig) { c.MaxBodyBytes = -1 })
		}, "VerifierConfig.MaxBodyBytes"},
		"Wait": {func() (func() error, func() error) {
			return hnd(func(c *webhook.HandlerConfig) { c.Wait = -time.Second })
		}, "HandlerConfig.Wait"},
		"Handler's MaxBodyBytes": {func() (func() error, func() error) {
			return hnd(func(c *webhook.HandlerConfig) { c.MaxBodyBytes = -1 })
		}, "VerifierConfig.MaxBodyBytes"},
	} {
		validate, open := tc.funcs()
		for how, f := range map[string]func() error{"Validate": validate, "constructor": open} {
			if err := f(); err == nil || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("%s, %s: %v; want an error naming %s", name, how, err, tc.says)
			}
		}
	}
}
