package webhook

import (
	"encoding/json"
	"errors"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// vectors are the Standard Webhooks project's test vectors
// (testdata/standard-webhooks.json says where each comes from).
type vectors struct {
	ID        string `json:"id"`
	Timestamp int64  `json:"timestamp"`
	Payload   string `json:"payload"`
	Sign      []struct {
		Name, Key, Signature string
	} `json:"sign"`
	Verify []struct {
		Name            string `json:"name"`
		Key             string `json:"key"`
		Signature       string `json:"signature"`
		Payload         string `json:"payload"`
		Drop            string `json:"drop"`
		TimestampHeader string `json:"timestamp_header"`
		ClockOffset     int64  `json:"clock_offset"`
		Valid           bool   `json:"valid"`
	} `json:"verify"`
}

func loadVectors(t *testing.T) vectors {
	t.Helper()
	b, err := os.ReadFile("testdata/standard-webhooks.json")
	if err != nil {
		t.Fatal(err)
	}
	var v vectors
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Sign) == 0 || len(v.Verify) == 0 {
		t.Fatal("no vectors")
	}
	return v
}

// Courier's signer produces the Standard Webhooks project's signatures,
// HMAC (v1) and Ed25519 (v1a) alike.
func TestStandardWebhooksSign(t *testing.T) {
	v := loadVectors(t)
	for _, tc := range v.Sign {
		t.Run(tc.Name, func(t *testing.T) {
			keys, err := parseSigningKeys([]string{tc.Key})
			if err != nil {
				t.Fatal(err)
			}
			if got := keys[0].sign(v.ID, v.Timestamp, []byte(v.Payload)); got != tc.Signature {
				t.Fatalf("signature %s, want %s", got, tc.Signature)
			}
		})
	}
}

// Courier's verifier accepts and refuses what the Standard Webhooks
// project's tests say.
func TestStandardWebhooksVerify(t *testing.T) {
	v := loadVectors(t)
	for _, tc := range v.Verify {
		t.Run(tc.Name, func(t *testing.T) {
			ver, err := NewVerifier(VerifierConfig{Secrets: []string{tc.Key}})
			if err != nil {
				t.Fatal(err)
			}
			ver.now = func() time.Time { return time.Unix(v.Timestamp+tc.ClockOffset, 0) }
			payload := v.Payload
			if tc.Payload != "" {
				payload = tc.Payload
			}
			r := httptest.NewRequest("POST", "/", strings.NewReader(payload))
			r.Header.Set(HeaderID, v.ID)
			r.Header.Set(HeaderTimestamp, strconv.FormatInt(v.Timestamp, 10))
			if tc.TimestampHeader != "" {
				r.Header.Set(HeaderTimestamp, tc.TimestampHeader)
			}
			if tc.Signature != "" {
				r.Header.Set(HeaderSignature, tc.Signature)
			}
			if tc.Drop != "" {
				r.Header.Del(tc.Drop)
			}
			body, err := ver.Verify(r)
			var ve *VerifyError
			switch {
			case tc.Valid && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.Valid && string(body) != payload:
				t.Fatalf("body %q, want %q", body, payload)
			case !tc.Valid && !errors.As(err, &ve):
				t.Fatalf("accepted (%v); want a *VerifyError", err)
			}
		})
	}
}

// Keys of the wrong kind or size are refused with an error that numbers
// the key and says what to do, never showing it.
func TestKeyForms(t *testing.T) {
	const pub = "whpk_iojj3XQJ8ZX9UtstPLpdcspnCb8dlBIb83SIAbQPb1w="
	const priv = "whsk_AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQGKiOPddAnxlf1S2y08ul1yymcJvx2UEhvzdIgBtA9vXA=="
	if _, err := parseSigningKeys([]string{pub}); err == nil || !strings.Contains(err.Error(), "cannot sign") {
		t.Errorf("a public key to sign: %v", err)
	}
	if _, err := parseVerifyingKeys([]string{priv}); err == nil || !strings.Contains(err.Error(), "whpk_ public key") {
		t.Errorf("a private key to verify: %v", err)
	}
	// The public half of a 64-byte private key must be its seed's.
	mismatched := "whsk_AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQGKiOPddAnxlf1S2y08ul1yymcJvx2UEhvzdIgBtA9vXQ=="
	if _, err := parseSigningKeys([]string{mismatched}); err == nil || !strings.Contains(err.Error(), "not the public key") {
		t.Errorf("mismatched private key: %v", err)
	}
	for _, bad := range []string{"whsk_AQID", "whpk_AQID", "whsec_c2hvcnQ=", "whsec_!!"} {
		_, err1 := parseSigningKeys([]string{bad})
		_, err2 := parseVerifyingKeys([]string{bad})
		if err1 == nil || err2 == nil || strings.Contains(err1.Error(), bad[5:]) || !strings.Contains(err1.Error(), "secret 1") {
			t.Errorf("%s: %v, %v", bad, err1, err2)
		}
	}
}
