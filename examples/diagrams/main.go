// Command diagrams runs the seed 001 quick start on the offline demo model
// and writes a Markdown file with two Mermaid diagrams of it: the
// organisation the society built, as a flowchart, and the task's messages,
// as a sequence diagram drawn from the event log. Any Mermaid viewer (a
// Markdown preview, a wiki, mermaid.live) renders them.
//
//	go run ./examples/diagrams
//	go run ./examples/diagrams -o /tmp/society.md
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	as "agentsociety"
	"agentsociety/internal/demo"
	"agentsociety/mermaid"
)

func main() {
	path := flag.String("o", "society.md", "the Markdown file to write")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := run(ctx, *path); err != nil {
		fmt.Fprintln(os.Stderr, "diagrams:", err)
		os.Exit(1)
	}
	fmt.Println("wrote", *path)
}

// run plays the quick start on the demo model and writes its diagrams to
// the Markdown file at path.
func run(ctx context.Context, path string) (err error) {
	s, err := as.New(ctx, as.Config{Model: demo.Model(), Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		return err
	}
	defer func() {
		if cerr := s.Close(context.WithoutCancel(ctx)); err == nil {
			err = cerr
		}
	}()
	task, _, err := demo.Run(ctx, s)
	if err != nil {
		return fmt.Errorf("running the quick start: %w", err)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "# The quick start's society\n\nRequirement: %s\n\n", demo.Requirement)
	b.WriteString("## Organisation\n\nRoles, agents under their parents, who created each role, and the contacts agents gained other than by birth.\n\n```mermaid\n")
	if err := mermaid.WriteFlowchart(&b, mermaid.OrgOf(s, true)); err != nil {
		return err
	}
	fmt.Fprintf(&b, "```\n\n## Messages of task %s\n\n```mermaid\n", task)
	if err := mermaid.WriteSequence(&b, s.Events(ctx, 1), task); err != nil {
		return err
	}
	b.WriteString("```\n")
	return os.WriteFile(path, b.Bytes(), 0o644)
}
