package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRun writes the diagrams of the quick start and checks the file holds
// both, each in its own mermaid block.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang guard only
	defer cancel()
	path := filepath.Join(t.TempDir(), "society.md")
	if err := run(ctx, path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	md := string(b)
	blocks := strings.Split(md, "```mermaid\n")
	if len(blocks) != 3 {
		t.Fatalf("want two mermaid blocks, got %d:\n%s", len(blocks)-1, md)
	}
	for i, want := range []string{"flowchart TD\n", "sequenceDiagram\n"} {
		block, _, closed := strings.Cut(blocks[i+1], "```\n")
		if !closed || !strings.HasPrefix(block, want) {
			t.Errorf("block %d does not start with %q or is not closed:\n%s", i+1, want, md)
		}
	}
	for _, want := range []string{`a1["agent-1<br>lead"]`, "root --> a1", "participant p3 as agent-1 (lead)", "p3->>p1: general: "} {
		if !strings.Contains(md, want) {
			t.Errorf("the file lacks %q:\n%s", want, md)
		}
	}
}
