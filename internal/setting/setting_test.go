package setting_test

import (
	"errors"
	"testing"
	"time"

	"github.com/courier-go/courier/internal/setting"
)

func TestDefault(t *testing.T) {
	d, n, s := time.Duration(0), 7, ""
	setting.Default(&d, time.Second)
	setting.Default(&n, 3)
	setting.Default(&s, "x")
	if d != time.Second || n != 7 || s != "x" {
		t.Fatalf("Default: %v %v %q; want zero fields set, others kept", d, n, s)
	}
}

func TestPositive(t *testing.T) {
	if err := setting.Positive("p: C.Timeout", time.Second, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	err := setting.Positive("p: C.Timeout", -time.Second, 5*time.Second)
	if err == nil || err.Error() != "p: C.Timeout is -1s: use more than 0, or 0 for 5s" {
		t.Fatalf("negative duration: %v", err)
	}
	if err := setting.Positive("p: C.Size", 0, 16); err == nil || err.Error() != "p: C.Size is 0: use more than 0, or 0 for 16" {
		t.Fatalf("zero after defaults: %v", err)
	}
}

func TestFirst(t *testing.T) {
	a, b := errors.New("a"), errors.New("b")
	if setting.First() != nil || setting.First(nil, nil) != nil || setting.First(nil, a, b) != a {
		t.Fatal("First does not return the first error")
	}
}
