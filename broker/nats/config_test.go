package nats_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/courier-go/courier/broker/cloudevents"
	couriernats "github.com/courier-go/courier/broker/nats"
)

// Zero fields take their defaults; a negative one, a missing required one
// or a contradiction is refused with an error naming the field, by
// Validate and by the constructor alike, before anything reaches the
// server.
func TestConfigValidate(t *testing.T) {
	if err := (couriernats.PublisherConfig{}).Validate(); err != nil {
		t.Errorf("zero PublisherConfig: %v", err)
	}
	if err := (couriernats.SubscriberConfig{Consumer: "billing"}).Validate(); err != nil {
		t.Errorf("SubscriberConfig with a consumer: %v", err)
	}
	if err := (couriernats.StreamConfig{}).Validate(couriernats.Config{}); err != nil {
		t.Errorf("zero StreamConfig: %v", err)
	}
	nc, js := startNATS(t)
	for name, tc := range map[string]struct {
		validate func() error
		open     func() error
		says     string
	}{
		"prefix and NoPrefix": {
			couriernats.Config{SubjectPrefix: "shop.", NoPrefix: true}.Validate,
			func() error {
				_, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{Config: couriernats.Config{SubjectPrefix: "shop.", NoPrefix: true}})
				return err
			},
			"Config.SubjectPrefix",
		},
		"wildcard prefix": {
			couriernats.Config{SubjectPrefix: "shop.*."}.Validate,
			func() error {
				return couriernats.EnsureStream(context.Background(), nc, couriernats.Config{SubjectPrefix: "shop.*."}, couriernats.StreamConfig{})
			},
			"Config.SubjectPrefix",
		},
		"negative AckTimeout": {
			couriernats.PublisherConfig{AckTimeout: -time.Second}.Validate,
			func() error {
				_, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{AckTimeout: -time.Second})
				return err
			},
			"PublisherConfig.AckTimeout",
		},
		"negative MaxPending": {
			couriernats.PublisherConfig{MaxPending: -1}.Validate,
			func() error {
				_, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{MaxPending: -1})
				return err
			},
			"PublisherConfig.MaxPending",
		},
		"negative MaxBatches": {
			couriernats.PublisherConfig{MaxBatches: -1}.Validate,
			func() error {
				_, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{MaxBatches: -1})
				return err
			},
			"PublisherConfig.MaxBatches",
		},
		"CloudEvents without source": {
			couriernats.PublisherConfig{CloudEvents: &cloudevents.Config{}}.Validate,
			func() error {
				_, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{CloudEvents: &cloudevents.Config{}})
				return err
			},
			"PublisherConfig.CloudEvents.Source",
		},
		"no consumer": {
			couriernats.SubscriberConfig{}.Validate,
			func() error {
				_, err := couriernats.NewSubscriber(context.Background(), nc, couriernats.SubscriberConfig{})
				return err
			},
			"SubscriberConfig.Consumer",
		},
		"negative AckWait": {
			couriernats.SubscriberConfig{Consumer: "c", AckWait: -time.Second}.Validate,
			func() error {
				_, err := couriernats.NewSubscriber(context.Background(), nc, couriernats.SubscriberConfig{Consumer: "c", AckWait: -time.Second})
				return err
			},
			"SubscriberConfig.AckWait",
		},
		"negative MaxAckPending": {
			couriernats.SubscriberConfig{Consumer: "c", MaxAckPending: -1}.Validate,
			func() error {
				_, err := couriernats.NewSubscriber(context.Background(), nc, couriernats.SubscriberConfig{Consumer: "c", MaxAckPending: -1})
				return err
			},
			"SubscriberConfig.MaxAckPending",
		},
		"negative Prefetch": {
			couriernats.SubscriberConfig{Consumer: "c", Prefetch: -1}.Validate,
			func() error {
				_, err := couriernats.NewSubscriber(context.Background(), nc, couriernats.SubscriberConfig{Consumer: "c", Prefetch: -1})
				return err
			},
			"SubscriberConfig.Prefetch",
		},
		"negative Duplicates": {
			func() error { return couriernats.StreamConfig{Duplicates: -time.Second}.Validate(couriernats.Config{}) },
			func() error {
				return couriernats.EnsureStream(context.Background(), nc, couriernats.Config{}, couriernats.StreamConfig{Duplicates: -time.Second})
			},
			"StreamConfig.Duplicates",
		},
		"negative MaxAge": {
			func() error { return couriernats.StreamConfig{MaxAge: -time.Second}.Validate(couriernats.Config{}) },
			func() error {
				return couriernats.EnsureStream(context.Background(), nc, couriernats.Config{}, couriernats.StreamConfig{MaxAge: -time.Second})
			},
			"StreamConfig.MaxAge",
		},
		"negative Replicas": {
			func() error { return couriernats.StreamConfig{Replicas: -1}.Validate(couriernats.Config{}) },
			func() error {
				return couriernats.EnsureStream(context.Background(), nc, couriernats.Config{}, couriernats.StreamConfig{Replicas: -1})
			},
			"StreamConfig.Replicas",
		},
	} {
		for how, f := range map[string]func() error{"Validate": tc.validate, "constructor": tc.open} {
			if err := f(); err == nil || !strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), ": use") && !strings.Contains(err.Error(), ": set") && !strings.Contains(err.Error(), ": name") {
				t.Errorf("%s, %s: %v; want an error naming %s and the fix", name, how, err, tc.says)
			}
		}
	}
	// Nothing reached the server: no stream was created.
	if _, err := js.Stream(context.Background(), couriernats.DefaultStream); err == nil {
		t.Error("an invalid StreamConfig created the stream")
	}
}
