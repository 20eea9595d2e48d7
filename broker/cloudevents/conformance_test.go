package cloudevents_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker/cloudevents"
)

// conformanceFile is one file of the CloudEvents JSON format conformance
// tests (testdata/conformance/SOURCE.md).
type conformanceFile struct {
	TestType string `json:"testType"`
	Tests    []struct {
		ID       string          `json:"id"`
		SampleID string          `json:"sampleId"`
		TestType string          `json:"testType"`
		Event    json.RawMessage `json:"event"`
		Batch    json.RawMessage `json:"batch"`
	} `json:"tests"`
}

// golden are the conformance tests' sample events (format/README.md of the
// conformance repository), built in code as that document asks.
func golden() map[string]cloudevents.Event {
	minimal := func(id string) cloudevents.Event {
		return cloudevents.Event{SpecVersion: "1.0", ID: id, Type: "io.cloudevents.test", Source: "https://cloudevents.io"}
	}
	at := time.Date(2018, 4, 5, 17, 31, 0, 0, time.UTC)
	withTime := minimal("minimalWithTime")
	withTime.Time = at
	relative := minimal("minimalWithRelativeSource")
	relative.Source = "#fragment"
	allCore := minimal("allCore")
	allCore.DataContentType, allCore.DataSchema, allCore.Subject, allCore.Time = "text/plain", "https://cloudevents.io/dataschema", "tests", at
	// The document names this sample's id "simpleData"; the test file,
	// which is what implementations run, says "simpleTextData".
	text := minimal("simpleTextData")
	text.DataContentType, text.Data = "text/plain", []byte("Simple text")
	ext := minimal("allExtensionTypes")
	// In JSON, Binary, Timestamp and URI values are strings: the base64
	// of {77, 97}, the time, the URI.
	ext.Extensions = map[string]any{
		"extinteger": int32(10), "extboolean": true, "extstring": "text", "extbinary": "TWE=",
		"exttimestamp": "2023-03-31T15:12:00Z", "exturi": "https://cloudevents.io", "exturiref": "//authority/path",
	}
	return map[string]cloudevents.Event{
		"minimal": minimal("minimal"), "minimalWithTime": withTime, "minimalWithRelativeSource": relative,
		"allCore": allCore, "simpleTextData": text, "allExtensionTypes": ext,
	}
}

// goldenBatches are the conformance tests' sample batches.
func goldenBatches() map[string][]cloudevents.Event {
	g := golden()
	return map[string][]cloudevents.Event{
		"empty": {}, "minimal": {g["minimal"]}, "minimal2": {g["minimal"], g["minimal"]},
		"minimalAndAllCore": {g["minimal"], g["allCore"]}, "minimalAndAllExtensionTypes": {g["minimal"], g["allExtensionTypes"]},
	}
}

// sameEvent reports how got differs from want: times as instants, the
// rest field by field.
func sameEvent(got, want cloudevents.Event) string {
	if !got.Time.Equal(want.Time) {
		return fmt.Sprintf("time %v, want %v", got.Time, want.Time)
	}
	got.Time, want.Time = time.Time{}, time.Time{}
	if !reflect.DeepEqual(got, want) {
		return fmt.Sprintf("%+v, want %+v", got, want)
	}
	return ""
}

func loadConformance(t *testing.T, name string) conformanceFile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "conformance", name))
	if err != nil {
		t.Fatal(err)
	}
	var f conformanceFile
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if len(f.Tests) == 0 {
		t.Fatalf("%s holds no tests", name)
	}
	return f
}

// The CloudEvents project's JSON format conformance tests: every valid
// event and batch parses into its golden sample, every invalid one is
// refused with an error wrapping courier.ErrMalformed.
func TestJSONConformance(t *testing.T) {
	samples, batches := golden(), goldenBatches()
	for _, name := range []string{"valid-events.json", "invalid-events.json", "valid-batches.json", "invalid-batches.json"} {
		f := loadConformance(t, name)
		for _, tc := range f.Tests {
			typ := tc.TestType
			if typ == "" {
				typ = f.TestType
			}
			t.Run(tc.ID, func(t *testing.T) {
				switch typ {
				case "ValidSingleEvent":
					want, ok := samples[tc.SampleID]
					if !ok {
						t.Fatalf("no golden sample %q", tc.SampleID)
					}
					e, err := cloudevents.ParseJSON(tc.Event)
					if err != nil {
						t.Fatalf("valid event refused: %v", err)
					}
					if d := sameEvent(e, want); d != "" {
						t.Fatalf("parsed %s", d)
					}
				case "InvalidSingleEvent":
					if e, err := cloudevents.ParseJSON(tc.Event); !errors.Is(err, courier.ErrMalformed) {
						t.Fatalf("invalid event: got %+v, %v; want an error wrapping ErrMalformed", e, err)
					}
				case "ValidBatch":
					want, ok := batches[tc.SampleID]
					if !ok {
						t.Fatalf("no golden batch %q", tc.SampleID)
					}
					got, err := cloudevents.ParseJSONBatch(tc.Batch)
					if err != nil {
						t.Fatalf("valid batch refused: %v", err)
					}
					if len(got) != len(want) {
						t.Fatalf("%d events, want %d", len(got), len(want))
					}
					for i := range got {
						if d := sameEvent(got[i], want[i]); d != "" {
							t.Fatalf("event %d: %s", i, d)
						}
					}
				case "InvalidBatch":
					if got, err := cloudevents.ParseJSONBatch(tc.Batch); !errors.Is(err, courier.ErrMalformed) {
						t.Fatalf("invalid batch: got %d events, %v; want an error wrapping ErrMalformed", len(got), err)
					}
				default:
					t.Fatalf("unknown test type %q", typ)
				}
			})
		}
	}
}
