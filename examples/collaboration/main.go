// Command collaboration plays seed 003's RequestCollaboration flow with
// code-driven agents only: a requester asks three helpers for help at once;
// one completes, one rejects, and one is too slow, so the society settles
// its request with a timeout. Each request id is printed when it is made and
// again with its outcome.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"time"

	as "agentsociety"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := run(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "collaboration:", err)
		os.Exit(1)
	}
}

// helpers are the three helpers: each answers in its own way.
var helpers = []struct {
	name   string
	answer func(ctx context.Context, self *as.Actor, requestID string) error
}{
	{"summariser", func(ctx context.Context, self *as.Actor, id string) error {
		_, err := self.Respond(ctx, id, as.CollaborationResponsePayload{Status: as.StatusCompleted, ResultData: []byte(`{"summary":"three findings"}`)})
		return err
	}},
	{"translator", func(ctx context.Context, self *as.Actor, id string) error {
		_, err := self.Respond(ctx, id, as.CollaborationResponsePayload{Status: as.StatusRejected, ErrorMessage: "I only translate to French"})
		return err
	}},
	{"archivist", func(ctx context.Context, self *as.Actor, id string) error {
		return nil // too slow: it never answers in time
	}},
}

// run plays the flow, printing to out, and closes the society.
func run(ctx context.Context, out io.Writer) (err error) {
	outcomes := make(chan as.Message, len(helpers))
	requester := as.BehaviorFunc(func(_ context.Context, _ *as.Actor, m as.Message) error {
		if m.Type == as.CollaborationResponse {
			outcomes <- m
		}
		return nil
	})
	s, err := as.New(ctx, as.Config{Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		return err
	}
	defer func() {
		// Close on a context of its own: ctx may be the one that ran out.
		if cerr := s.Close(context.WithoutCancel(ctx)); err == nil {
			err = cerr
		}
	}()

	// The host acts as root to build the organisation.
	root, err := s.Actor(as.RootID)
	if err != nil {
		return err
	}
	root = root.WithTask("seed-003")
	role, _, err := root.CreateRole(ctx, as.RoleSpec{Name: "requester"})
	if err != nil {
		return err
	}
	r, _, err := root.SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Behavior: requester, Brief: &as.TaskBrief{
		Objective: "get three subtasks done", Constraints: []string{}, Inputs: "none", Outputs: "three outcomes", CompletionCriteria: "every request settled"}})
	if err != nil {
		return err
	}
	req, err := s.Actor(r.ID)
	if err != nil {
		return err
	}

	names := map[string]string{} // request id -> helper name
	for _, h := range helpers {
		hrole, _, err := req.CreateRole(ctx, as.RoleSpec{Name: h.name})
		if err != nil {
			return err
		}
		answer := h.answer
		helper, _, err := req.SpawnAgent(ctx, as.SpawnSpec{RoleID: hrole.ID, Brief: &as.TaskBrief{
			Objective: "help the requester", Constraints: []string{}, Inputs: "a collaboration_request", Outputs: "a collaboration_response", CompletionCriteria: "answered"},
			Behavior: as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
				var p as.CollaborationRequestPayload
				if err := m.Decode(&p); err != nil {
					return err
				}
				return answer(ctx, self, p.RequestID)
			})})
		if err != nil {
			return err
		}
		id, err := req.RequestCollaboration(ctx, helper.ID, as.CollaborationRequestPayload{SubtaskDescription: "help with " + h.name + " work"}, 200*time.Millisecond)
		if err != nil {
			return err
		}
		names[id] = h.name
		fmt.Fprintf(out, "asked %-10s request %s: pending\n", h.name, id)
	}

	var lines []string
	for range helpers {
		select {
		case m := <-outcomes:
			var p as.CollaborationResponsePayload
			if err := m.Decode(&p); err != nil {
				return err
			}
			detail := string(p.ResultData)
			if p.Status != as.StatusCompleted {
				detail = p.ErrorMessage
			}
			lines = append(lines, fmt.Sprintf("%-10s request %s: %s (%s)", names[p.RequestID], p.RequestID, p.Status, detail))
		case <-time.After(10 * time.Second):
			return fmt.Errorf("only %d of %d requests settled", len(lines), len(helpers))
		}
	}
	sort.Strings(lines) // outcomes arrive in any order; print them in a stable one
	for _, l := range lines {
		fmt.Fprintln(out, l)
	}
	return nil
}
