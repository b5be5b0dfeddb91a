package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// TestCluster runs the example: the answer, submitted on n1, reaches n2,
// and every agent of the quick start made its model calls on some node.
func TestCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second) // a hang guard
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	for _, want := range []string{"answer on n2, from agent-1", "artifact:", "root", "lead", "tester", "developer"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the output lacks %q:\n%s", want, out.String())
		}
	}
}
