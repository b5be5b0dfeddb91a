// Command quickstart runs the seed 001 scenario: a user asks for a static
// web calculator, and a society of model-driven agents organises itself to
// build it. root creates a lead; the lead creates a tester and a developer,
// passing the user's "HTML + JavaScript" and "static page" constraints down
// in their Task Briefs, which each agent receives as its first message; the
// developer stores the page as an artifact and has the tester review it;
// the lead sends the artifact reference to the user.
//
// Every agent is driven by a model through the society's built-in tools.
// Offline (the default) the model is the scripted demo model of
// internal/demo, and the run takes well under a second. With
// OPENAI_API_KEY or OPENAI_BASE_URL set, or with -real, the same program runs
// on an OpenAI-compatible model (see package llm/openai); -real=false forces
// the demo model. If the model fails (an endpoint that cannot be reached, a
// key it refuses), root reports the failure to the user within seconds, and
// the program exits with it.
//
//	go run ./examples/quickstart
//	OPENAI_API_KEY=... go run ./examples/quickstart -timeout 10m
//
// The program prints each message as the agent receiving it reads it
// (Requirement 10), each tool call and the thought that ends a turn (a turn
// that ends by sending, with end_turn, has none), then the organisation
// that resulted.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"

	as "agentsociety"
	"agentsociety/examples/internal/show"
	"agentsociety/internal/demo"
	"agentsociety/llm"
)

func main() {
	pick := show.ModelFlag(flag.CommandLine, "the offline demo model", demo.Model)
	timeout := flag.Duration("timeout", 0, "how long to wait for the answer (default 30s offline, 5m on a real model)")
	flag.Parse()
	model, onReal, err := pick()
	if err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(2)
	}
	if *timeout <= 0 {
		*timeout = 30 * time.Second
		if onReal {
			*timeout = 5 * time.Minute
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	if err := run(ctx, os.Stdout, model); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

// run plays the scenario on model, printing to out, and closes the society.
func run(ctx context.Context, out io.Writer, model llm.Model) error {
	s, _, err := play(ctx, out, model)
	if s != nil {
		// Close on a context of its own: ctx may be the one that ran out.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if cerr := s.Close(cctx); err == nil {
			err = cerr
		}
	}
	return err
}

// play starts a society on model, submits demo.Requirement and waits until
// user receives an artifact reference or ctx ends, then prints the
// organisation. It returns the society, still open, for the caller to
// inspect and close, and the message that carried the artifact.
func play(ctx context.Context, out io.Writer, model llm.Model) (*as.Society, as.Message, error) {
	w := show.NewSyncWriter(out)
	s, err := show.Start(ctx, w, as.Config{Model: model})
	if err != nil {
		return nil, as.Message{}, err
	}

	w.Printf("══ user → root: %s\n\n", demo.Requirement)
	task, err := s.SubmitRequirement(ctx, demo.Requirement)
	if err != nil {
		return s, as.Message{}, err
	}
	// A real model may tell the user about its progress first: wait for the
	// message that delivers the page, or for one saying that the task
	// cannot go on (a model that cannot be reached reports a failed turn
	// within seconds: no use waiting for the deadline).
	reply, err := s.WaitForUserMessage(ctx, func(m as.Message) bool {
		if m.TaskID != task {
			return false
		}
		_, failed := show.Failure(m)
		return failed || strings.Contains(m.Text(), as.ArtifactRefPrefix)
	})
	if err != nil {
		err = fmt.Errorf("waiting for the answer: %w", err)
	} else if why, failed := show.Failure(reply); failed {
		err = fmt.Errorf("the task failed: %s", why)
	}
	var org strings.Builder
	show.WriteOrg(&org, s)
	w.Printf("══ organisation\n%s", org.String())
	return s, reply, err
}
