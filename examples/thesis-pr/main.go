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
// over an in-memory thesis project), and the delegation and state tools of
// package agentsociety/toolset. Offline (the default) the model is this
// folder's scripted model (see Model), and the run takes well under a
// second. With OPENAI_API_KEY or OPENAI_BASE_URL set, or with -real, the
// same program runs on an OpenAI-compatible model (see package llm/openai);
// -real=false forces the scripted model. If the model fails (an endpoint
// that cannot be reached, a key it refuses), root reports the failure to the
// user within seconds, and the program exits with it.
//
//	go run ./examples/thesis-pr
//	OPENAI_API_KEY=... go run ./examples/thesis-pr -timeout 10m
//
// The program prints each message as the agent receiving it reads it, each
// tool call and the thought that ends a turn (one that ends by sending,
// with end_turn, has none), what the user receives, and at the end the
// organisation, the state, the delegations and the final artifact's
// reference.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"time"

	as "agentsociety"
	"agentsociety/examples/internal/show"
	"agentsociety/internal/script"
	"agentsociety/llm"
	"agentsociety/store"
)

func main() {
	pick := show.ModelFlag(flag.CommandLine, "the scripted model", Model)
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
	w := show.NewSyncWriter(out)
	o := &outcome{store: store.NewMemory(), ws: newWorkspace()}
	s, err := show.Start(ctx, w, as.Config{Store: o.store, Model: model, Tools: o.ws.tools()})
	if err != nil {
		return nil, err
	}
	o.s = s

	w.Printf("══ user → root:\n%s\n\n", Requirement)
	o.task, err = s.SubmitRequirement(ctx, Requirement)
	if err == nil {
		// The user hears of the escalation first; the final report is the
		// message that names the PR file's artifact. A report that the task
		// cannot go on (a model that cannot be reached reports a failed
		// turn within seconds) ends the wait too.
		o.report, err = s.WaitForUserMessage(ctx, func(m as.Message) bool {
			_, failed := show.Failure(m)
			return m.TaskID == o.task && (failed || strings.Contains(m.Text(), as.ArtifactRefPrefix))
		})
		if err != nil {
			err = fmt.Errorf("waiting for the final report: %w", err)
		} else if why, failed := show.Failure(o.report); failed {
			err = fmt.Errorf("the task failed: %s", why)
		} else {
			o.ref = script.RefIn(o.report.Text())
		}
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
func summarise(ctx context.Context, w *show.SyncWriter, o *outcome) error {
	s := o.s
	var b strings.Builder
	b.WriteString("══ organisation\n")
	if err := show.WriteOrg(&b, s); err != nil {
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
	w.Printf("%s", b.String())
	return nil
}

// who names an agent by its id and role.
func who(s *as.Society, id string) string {
	if role := show.RoleOf(s, id); role != "" && role != id {
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
