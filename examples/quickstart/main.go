// Command quickstart runs the seed 001 scenario: a user asks for a static
// web calculator, and a society of model-driven agents organises itself to
// build it. root creates a lead; the lead creates a tester and a developer,
// passing the user's "HTML + JavaScript" and "static page" constraints down
// in their Task Briefs; the developer stores the page as an artifact and has
// the tester review it; the lead sends the artifact reference to the user.
//
// Every agent is driven by a model through the society's built-in tools.
// Offline (the default) the model is the scripted demo model of
// examples/internal/demo, and the run takes well under a second. With
// OPENAI_API_KEY or OPENAI_BASE_URL set, or with -real, the same program runs
// on an OpenAI-compatible model (see package llm/openai); -real=false forces
// the demo model.
//
//	go run ./examples/quickstart
//	OPENAI_API_KEY=... go run ./examples/quickstart -timeout 10m
//
// The program prints each message as the agent receiving it reads it
// (Requirement 10), each tool call and the thought that ends each turn,
// then the organisation that resulted.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"time"

	as "agentsociety"
	"agentsociety/examples/internal/demo"
	"agentsociety/llm"
)

func main() {
	pick := demo.ModelFlag(flag.CommandLine)
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
	w := &syncWriter{w: out}
	var s *as.Society // set before any model call: the trace reads role names from it
	s, err := as.New(ctx, as.Config{
		Model: traced(w, model, func(id string) string { return roleOf(s, id) }),
		// Warnings and errors (a model retried, a turn that failed) are
		// worth seeing; the society's other records are not, here.
		Logger: slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return nil, as.Message{}, err
	}
	s.OnUserMessage(func(m as.Message) {
		w.printf("── user receives ──\n%s\n\n", s.Format(m))
	})

	w.printf("══ user → root: %s\n\n", demo.Requirement)
	task, err := s.SubmitRequirement(ctx, demo.Requirement)
	if err != nil {
		return s, as.Message{}, err
	}
	// A real model may tell the user about its progress first: wait for the
	// message that delivers the page.
	reply, err := s.WaitForUserMessage(ctx, func(m as.Message) bool {
		return m.TaskID == task && strings.Contains(m.Text(), as.ArtifactRefPrefix)
	})
	if err != nil {
		err = fmt.Errorf("waiting for the answer: %w", err)
	}
	var org strings.Builder
	demo.WriteOrg(&org, s)
	w.printf("══ organisation\n%s", org.String())
	return s, reply, err
}

// traced wraps model so that each call is shown on w: the message that
// opened the agent's turn, as the agent reads it, when the call is the
// turn's first; then the tool calls and the text of the reply. It works the
// same on any model.
func traced(w *syncWriter, model llm.Model, roleOf func(id string) string) llm.Model {
	var mu sync.Mutex
	shown := map[string]string{} // per agent, the last message shown: a retried call shows nothing new
	return llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
		who := req.Agent
		if role := roleOf(who); role != "" && role != who {
			who += " (" + role + ")"
		}
		if n := len(req.Messages); n > 0 && req.Messages[n-1].Role == llm.RoleUser {
			key := fmt.Sprint(n, "\x00", req.Messages[n-1].Content)
			mu.Lock()
			fresh := shown[req.Agent] != key
			shown[req.Agent] = key
			mu.Unlock()
			if fresh {
				w.printf("── %s receives ──\n%s\n\n", who, req.Messages[n-1].Content)
			}
		}
		resp, err := model.Generate(ctx, req)
		if err != nil {
			return nil, err
		}
		var b strings.Builder
		for _, c := range resp.Message.ToolCalls {
			fmt.Fprintf(&b, "   %s calls %s %s\n", req.Agent, c.Name, clip(string(c.Arguments), 110))
		}
		if t := strings.TrimSpace(resp.Message.Content); t != "" {
			fmt.Fprintf(&b, "   %s thinks: %s\n\n", req.Agent, t)
		}
		w.printf("%s", b.String())
		return resp, nil
	})
}

// roleOf returns the role name of agent id in s, or id itself for root and
// user.
func roleOf(s *as.Society, id string) string {
	a, ok := s.Agent(id)
	if !ok {
		return ""
	}
	if r, ok := s.Role(a.RoleID); ok {
		return r.Name
	}
	return id
}

// clip shortens s to n runes, marking the cut.
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}

// syncWriter serialises writes from the society's goroutines.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func (s *syncWriter) printf(format string, args ...any) {
	fmt.Fprintf(s, format, args...)
}
