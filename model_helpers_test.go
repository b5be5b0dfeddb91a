package agentsociety_test

import (
	"encoding/json"
	"testing"
)

// mtJSON marshals v, failing the test if it does not encode.
func mtJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
