package llm_test

// These tests record and replay a society's run: they check that a replay
// makes the society do what it did when recorded, which depends on how the
// society treats what the Replayer returns.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	as "agentsociety"
	"agentsociety/llm"
)

// hangGuard bounds the waits of these tests; they wait for what they
// expect, never for a fixed time.
const hangGuard = time.Minute

// runSociety runs a society on m until root writes to user, closes it, and
// returns what root wrote.
func runSociety(t *testing.T, m llm.Model, cfg as.Config) as.Message {
	t.Helper()
	cfg.Model = m
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	s, err := as.New(ctx, cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer func() {
		if err := s.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	}()
	if _, err := s.SubmitRequirement(ctx, "REQ"); err != nil {
		t.Fatal(err)
	}
	msg, err := s.WaitForUserMessage(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

// TestReplay_CallPastItsDeadline records a run whose first model call
// outlived Config.ModelCallTimeout, with a model that then fails with its
// context's error as the llm contract asks, and that the society retried:
// the replay retries it too, and ends as the run did.
func TestReplay_CallPastItsDeadline(t *testing.T) {
	var calls atomic.Int32
	slow := llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
		if calls.Add(1) == 1 {
			<-ctx.Done()
			return nil, fmt.Errorf("slow model: %w", ctx.Err())
		}
		args, _ := json.Marshal(map[string]any{"to": as.UserID, "payload": map[string]any{"text": "done"}, "end_turn": true})
		return &llm.Response{Message: llm.Message{ToolCalls: []llm.ToolCall{{ID: "c1", Name: "send_message", Arguments: args}}}}, nil
	})
	cfg := as.Config{ModelCallTimeout: 250 * time.Millisecond, RetryBackoff: time.Millisecond}
	var buf bytes.Buffer
	if got := runSociety(t, llm.Record(slow, &buf), cfg); got.Type != as.General || got.Text() != "done" {
		t.Fatalf("the recorded run told user %s %q, want done", got.Type, got.Text())
	}
	rec, err := llm.ReadRecording(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Len() != 2 {
		t.Fatalf("%d calls recorded, want 2: the one past its deadline and its retry", rec.Len())
	}
	r := llm.Replay(rec)
	if got := runSociety(t, r, cfg); got.Type != as.General || got.Text() != "done" {
		t.Errorf("the replay told user %s %q, want done", got.Type, got.Text())
	}
	if r.Replayed() != 2 {
		t.Errorf("replayed %d calls, want 2", r.Replayed())
	}
}
