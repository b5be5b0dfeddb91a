// Command thesis-pr plays seed 004's flow: a PR on a thesis, carried out
// by a team of model-driven agents that share a project scope and delegate
// work with delegate_task / complete_task / fail_task.
//
// The user asks for a change to section 2.3 of the thesis. root creates the
// Academic Partner, the lead for the task, which opens a PR (create_pr),
// writes the PR id, its status, the modification spec and the ten-step
// checklist into the project state (state_set, scope project), and creates
// and spawns the Literature Agent, the PR Manager and the Archivist. Then:
//
//   - it delegates the literature review to the Literature Agent, which reads
//     the spec (state_get), searches the literature (search_in_literature),
//     notes its progress in its private state and completes the task with
//     structured reading notes;
//   - with the notes it completes the spec's citations and delegates the
//     merge verification to the PR Manager, which validates the spec
//     (validate_spec), tries to locate the original text in the draft
//     (diff_draft), writes the checklist back and, since the spec's
//     original text is not the draft's, fails the task with an [OPEN]
//     error message and escalation details;
//   - the Academic Partner records the open issue in the project state,
//     escalates it to the user at once, and asks the Archivist to file the
//     blocked PR: the Archivist writes PR/PR-0010.md (create_file), indexes
//     it (sync_index), stores it as an artifact (put_artifact) and reports
//     the reference; the Academic Partner sends the user the final report
//     with the artifact reference and the open issue.
//
// Every agent is driven by a model through the society's tools: the
// built-in ones, the host tools of seed 004 §4 (each limited to its role,
// over an in-memory thesis project), and the library's DelegationTools and
// StateTools. Offline (the default) the model is this folder's scripted
// model (see Model), and the run takes well under a second. With
// OPENAI_API_KEY or OPENAI_BASE_URL set, or with -real, the same program
// runs on an OpenAI-compatible model (see package llm/openai); -real=false
// forces the scripted model.
//
//	go run ./examples/thesis-pr
//	OPENAI_API_KEY=... go run ./examples/thesis-pr -timeout 10m
//
// The program prints each message as the agent receiving it reads it, each
// tool call and the thought that ends each turn, what the user receives,
// and at the end the organisation, the state, the delegations and the final
// artifact's reference.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"time"

	as "agentsociety"
	"agentsociety/examples/internal/demo"
	"agentsociety/llm"
	"agentsociety/llm/openai"
	"agentsociety/store"
)

func main() {
	pick := modelFlag(flag.CommandLine)
	timeout := flag.Duration("timeout", 0, "how long to wait for the final report (default 30s offline, 10m on a real model)")
	flag.Parse()
	model, onReal, err := pick()
	if err != nil {
		fmt.Fprintln(os.Stderr, "thesis-pr:", err)
		os.Exit(2)
	}
	if *timeout <= 0 {
		*timeout = 30 * time.Second
		if onReal {
			*timeout = 10 * time.Minute
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	if err := run(ctx, os.Stdout, model); err != nil {
		fmt.Fprintln(os.Stderr, "thesis-pr:", err)
		os.Exit(1)
	}
}

// modelFlag registers -real on fs and returns the function that, once fs is
// parsed, gives the model to run on and whether it is a real one: real when
// -real is given, or when -real is not given and OPENAI_API_KEY or
// OPENAI_BASE_URL is set; otherwise this folder's scripted Model.
func modelFlag(fs *flag.FlagSet) func() (llm.Model, bool, error) {
	realFlag := fs.Bool("real", false, "run on a real model through llm/openai (the default when "+
		openai.EnvAPIKey+" or "+openai.EnvBaseURL+" is set; -real=false forces the scripted model)")
	return func() (llm.Model, bool, error) {
		isReal := os.Getenv(openai.EnvAPIKey) != "" || os.Getenv(openai.EnvBaseURL) != ""
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "real" {
				isReal = *realFlag
			}
		})
		if !isReal {
			return Model(), false, nil
		}
		m, err := openai.New(openai.Config{})
		if err != nil {
			return nil, true, err
		}
		return m, true, nil
	}
}

// run plays the flow on model, printing to out.
func run(ctx context.Context, out io.Writer, model llm.Model) error {
	_, err := play(ctx, out, model)
	return err
}

// outcome is what a run leaves behind, for a test to inspect: the society
// (closed), its store, the thesis project the host tools worked on, the
// task, and the final report to user with the artifact reference it names.
type outcome struct {
	s      *as.Society
	store  *store.Memory
	ws     *workspace
	task   string
	report as.Message
	ref    string
}

// play starts a society on model with the host tools of seed 004, submits
// Requirement, and waits until user receives a message that names an
// artifact, or ctx ends. Then it closes the society and prints what it
// made. The outcome is nil only if the society could not start.
func play(ctx context.Context, out io.Writer, model llm.Model) (*outcome, error) {
	w := &syncWriter{w: out}
	o := &outcome{store: store.NewMemory(), ws: newWorkspace()}
	var s *as.Society // set before any model call: the trace reads role names from it
	s, err := as.New(ctx, as.Config{
		Store: o.store,
		Model: traced(w, model, func(id string) string { return roleOf(s, id) }),
		Tools: o.ws.tools(),
		// Warnings and errors (a model retried, a turn that failed) are
		// worth seeing; the society's other records are not, here.
		Logger: slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return nil, err
	}
	o.s = s
	s.OnUserMessage(func(m as.Message) {
		w.printf("── user receives ──\n%s\n\n", s.Format(m))
	})

	w.printf("══ user → root:\n%s\n\n", Requirement)
	o.task, err = s.SubmitRequirement(ctx, Requirement)
	if err == nil {
		// The user hears of the escalation first; the final report is the
		// message that names the PR file's artifact.
		o.report, err = s.WaitForUserMessage(ctx, func(m as.Message) bool {
			return m.TaskID == o.task && strings.Contains(m.Text(), as.ArtifactRefPrefix)
		})
		if err != nil {
			err = fmt.Errorf("waiting for the final report: %w", err)
		}
		o.ref = refIn(o.report.Text())
	}

	// Close on a context of its own (ctx may be the one that ran out), so
	// that the agents end their turns before the summary is printed.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if cerr := s.Close(cctx); err == nil {
		err = cerr
	}
	if serr := summarise(context.WithoutCancel(ctx), w, o); err == nil {
		err = serr
	}
	return o, err
}

// summarise prints the organisation, the roles and their creators, the
// project and private state with their writers, the delegations and the
// final artifact.
func summarise(ctx context.Context, w *syncWriter, o *outcome) error {
	s := o.s
	var b strings.Builder
	b.WriteString("══ organisation\n")
	if err := demo.WriteOrg(&b, s); err != nil {
		return err
	}
	b.WriteString("\n══ roles\n")
	for _, r := range s.Roles() {
		fmt.Fprintf(&b, "  %-18s %s, created by %s\n", r.Name, r.ID, who(s, r.CreatedBy))
	}

	st, err := o.store.Load(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(&b, "\n══ project state (task %s)\n", o.task)
	for _, e := range st.States {
		if e.Scope == "task:"+o.task {
			fmt.Fprintf(&b, "  %s, written by %s:\n    %s\n", e.Key, who(s, e.Writer), compact(e.Value))
		}
	}
	b.WriteString("\n══ private state\n")
	for _, e := range st.States {
		if owner, ok := strings.CutPrefix(e.Scope, "agent:"); ok {
			fmt.Fprintf(&b, "  %s of %s:\n    %s\n", e.Key, who(s, owner), compact(e.Value))
		}
	}

	b.WriteString("\n══ delegations\n")
	reqs := st.Requests
	sort.Slice(reqs, func(i, j int) bool { return reqs[i].CreatedAt.Before(reqs[j].CreatedAt) })
	for _, r := range reqs {
		fmt.Fprintf(&b, "  %s: %s → %s: %s\n", r.ID, who(s, r.From), who(s, r.To), r.Status)
	}

	b.WriteString("\n══ final artifact\n")
	if o.ref == "" {
		b.WriteString("  (none reported to user)\n")
	} else {
		art, _, err := s.GetArtifact(ctx, o.ref)
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "  %s  %s, %s, %d bytes, by %s\n", o.ref, art.Name, art.MediaType, art.Size, who(s, art.CreatedBy))
	}
	w.printf("%s", b.String())
	return nil
}

// who names an agent by its id and role.
func who(s *as.Society, id string) string {
	if role := roleOf(s, id); role != "" && role != id {
		return id + " (" + role + ")"
	}
	return id
}

func compact(v json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, v) != nil {
		return string(v)
	}
	return b.String()
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
// user, or "" for an agent s does not have.
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
