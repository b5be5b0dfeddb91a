package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// TestCluster runs the example: the answer, submitted on n1, reaches n2,
// every agent of the quick start made its model calls on some node, and
// nothing went wrong on the way, closing included.
func TestCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second) // a hang guard
	defer cancel()
	var out, logs bytes.Buffer
	if err := run(ctx, &out, &logs); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	// Closing writes the society's last records: a node closed after its
	// connection logs that it could not.
	if logs.Len() > 0 {
		t.Errorf("the nodes logged warnings or errors:\n%s", logs.String())
	}
	for _, want := range []string{"answer on n2, from agent-1", "artifact:", "root", "lead", "tester", "developer"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the output lacks %q:\n%s", want, out.String())
		}
	}
}
