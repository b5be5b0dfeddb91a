package main

import (
	"bytes"
	"context"
	"regexp"
	"testing"
)

func TestCollaboration(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`(?m)^asked summariser request req-\w+: pending$`,
		`(?m)^asked translator request req-\w+: pending$`,
		`(?m)^asked archivist  request req-\w+: pending$`,
		`(?m)^archivist  request req-\w+: error \(timeout: agent-4 did not answer within 200ms\)$`,
		`(?m)^summariser request req-\w+: completed \(\{"summary":"three findings"\}\)$`,
		`(?m)^translator request req-\w+: rejected \(I only translate to French\)$`,
	} {
		if !regexp.MustCompile(want).MatchString(out.String()) {
			t.Errorf("output lacks %s\n--- output ---\n%s", want, out.String())
		}
	}
}
