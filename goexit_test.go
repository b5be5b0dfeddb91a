package agentsociety_test

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	as "agentsociety"
	"agentsociety/llm"
)

// A behaviour, or a model, that calls runtime.Goexit (t.FailNow in a test
// helper does) ends its handling as a panic does: with an error reported
// to the agent's parent. The agent goes on with its next message, and
// Close returns.
func TestHandlerGoexitIsReportedAndTheAgentGoesOn(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  as.Config
	}{
		{"behaviour", as.Config{Root: as.BehaviorFunc(func(context.Context, *as.Actor, as.Message) error {
			runtime.Goexit()
			return nil
		})}},
		{"model", as.Config{Model: llm.ModelFunc(func(context.Context, *llm.Request) (*llm.Response, error) {
			runtime.Goexit()
			return nil, nil
		})}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			tc.cfg.Logger = quiet
			s, err := as.New(ctx, tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			for _, text := range []string{"first", "second"} {
				if _, err := s.SubmitRequirement(ctx, text); err != nil {
					t.Fatal(err)
				}
				m, err := s.WaitForUserMessage(ctx, nil)
				if err != nil {
					t.Fatalf("%s message: no report of the Goexit: %v", text, err)
				}
				var p as.StatusReportPayload
				if err := m.Decode(&p); err != nil || m.Type != as.StatusReport || p.Status != string(as.StatusError) || m.From != as.RootID {
					t.Fatalf("%s message: got %+v (%v), want an error status_report from root", text, m, err)
				}
				if !strings.Contains(p.Text, "runtime.Goexit") {
					t.Errorf("%s message: the report %q does not name runtime.Goexit", text, p.Text)
				}
			}
			if err := s.Close(ctx); err != nil {
				t.Fatalf("Close: %v", err)
			}
		})
	}
}
