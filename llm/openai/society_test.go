package openai

// These tests run a society on the adapter against a fake endpoint: they
// check what the two do together (one layer of retries, tool results sent
// back under the ids the adapter made, truncation reported), which neither
// package's tests see alone.

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	as "agentsociety"
)

// hangGuard bounds the waits of these tests; they wait for what they
// expect, never for a fixed time.
const hangGuard = time.Minute

// newSociety starts a society on m that the test closes when it ends.
func newSociety(t *testing.T, m *Model, cfg as.Config) *as.Society {
	t.Helper()
	cfg.Model = m
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := as.New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// report submits a requirement to root and returns root's status report
// to user.
func report(t *testing.T, s *as.Society) as.StatusReportPayload {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	if _, err := s.SubmitRequirement(ctx, "REQ"); err != nil {
		t.Fatal(err)
	}
	m, err := s.WaitForUserMessage(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var p as.StatusReportPayload
	if err := m.Decode(&p); err != nil || m.Type != as.StatusReport || m.From != as.RootID {
		t.Fatalf("user got %+v (%s), want a status_report from root", m, m.Payload)
	}
	return p
}

// TestSocietyRetriesInOneLayer: a persistent 503 costs exactly
// ModelRetries+1 HTTP requests, the society's attempts, and not that many
// times the SDK's own retries; the report says how many attempts were made.
func TestSocietyRetriesInOneLayer(t *testing.T) {
	const retries = 3
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		writeJSON(w, 503, `{"error": {"message": "overloaded", "type": "server_error"}}`)
	})
	s := newSociety(t, newModel(t, srv, Config{}), as.Config{ModelRetries: retries, RetryBackoff: time.Millisecond})
	p := report(t, s)
	if p.Status != string(as.StatusError) || !strings.Contains(p.Text, string(as.ErrModel)) ||
		!strings.Contains(p.Text, "after 4 attempts") || !strings.Contains(p.Text, "overloaded") {
		t.Errorf("report = %+v, want a model_error after 4 attempts with the provider's message", p)
	}
	if n := srv.hits.Load(); n != retries+1 {
		t.Errorf("%d HTTP requests, want ModelRetries+1 = %d", n, retries+1)
	}
}

// TestSocietyAnswersToolCallsUnderMadeUpIDs: a tool call that arrives
// without an id is given one, and the society's next request carries the
// call and its result under that id.
func TestSocietyAnswersToolCallsUnderMadeUpIDs(t *testing.T) {
	next := make(chan map[string]any, 1)
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		msgs, _ := body["messages"].([]any)
		if last, _ := msgs[len(msgs)-1].(map[string]any); last["role"] == "tool" {
			next <- body
			writeJSON(w, 200, textReply(""))
			return
		}
		writeJSON(w, 200, toolCallsReply("tool_calls",
			`{"type": "function", "function": {"name": "create_role", "arguments": "{\"name\": \"lead\", \"rolePrompt\": \"lead the task\"}"}}`))
	})
	s := newSociety(t, newModel(t, srv, Config{}), as.Config{})
	if _, err := s.SubmitRequirement(context.Background(), "REQ"); err != nil {
		t.Fatal(err)
	}
	var body map[string]any
	select {
	case body = <-next:
	case <-time.After(hangGuard):
		t.Fatal("no request with the tool result")
	}
	msgs := body["messages"].([]any)
	n := len(msgs)
	turn, _ := msgs[n-2].(map[string]any)
	result, _ := msgs[n-1].(map[string]any)
	calls, _ := turn["tool_calls"].([]any)
	if turn["role"] != "assistant" || len(calls) != 1 {
		t.Fatalf("message before the result = %v, want the assistant's one tool call", turn)
	}
	id, _ := calls[0].(map[string]any)["id"].(string)
	if id == "" || result["tool_call_id"] != id {
		t.Errorf("the call went back with id %q and its result with tool_call_id %v, want one non-empty id", id, result["tool_call_id"])
	}
	if content, _ := result["content"].(string); !strings.Contains(content, `"createdBy":"root"`) {
		t.Errorf("tool result = %q, want the role root created", content)
	}
}

// TestSocietyReportsTruncation: a reply cut off at the output limit
// (finish_reason "length") without tool calls ends root's turn with a
// report, instead of passing for a finished answer.
func TestSocietyReportsTruncation(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		writeJSON(w, 200, `{"id": "c", "object": "chat.completion", "created": 1, "model": "m",
			"choices": [{"index": 0, "finish_reason": "length",
				"message": {"role": "assistant", "content": "First I will create a role for"}}]}`)
	})
	s := newSociety(t, newModel(t, srv, Config{}), as.Config{})
	p := report(t, s)
	if p.Status != string(as.StatusError) || !strings.Contains(p.Text, string(as.ErrTruncated)) {
		t.Errorf("report = %+v, want a %s report", p, as.ErrTruncated)
	}
	if n := srv.hits.Load(); n != 1 {
		t.Errorf("%d HTTP requests, want 1", n)
	}
}

// TestSocietyDoesNotRetryQuota: an account out of quota (HTTP 429
// insufficient_quota) costs one HTTP request, not ModelRetries+1: no retry
// can succeed, and the report says what the host must fix.
func TestSocietyDoesNotRetryQuota(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		writeJSON(w, 429, quotaBody)
	})
	s := newSociety(t, newModel(t, srv, Config{}), as.Config{ModelRetries: 3, RetryBackoff: time.Millisecond})
	p := report(t, s)
	if p.Status != string(as.StatusError) || !strings.Contains(p.Text, string(as.ErrModel)) ||
		!strings.Contains(p.Text, "after 1 attempt") || !strings.Contains(p.Text, "exceeded your current quota") {
		t.Errorf("report = %+v, want a model_error after 1 attempt with the provider's message", p)
	}
	if n := srv.hits.Load(); n != 1 {
		t.Errorf("%d HTTP requests, want 1", n)
	}
}

// TestSocietyReportsContentFilter: a reply the content filter cut off
// (finish_reason "content_filter") without tool calls ends root's turn with
// a report, as one cut off at the output limit does, instead of passing for
// a finished answer.
func TestSocietyReportsContentFilter(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		writeJSON(w, 200, `{"id": "c", "object": "chat.completion", "created": 1, "model": "m",
			"choices": [{"index": 0, "finish_reason": "content_filter",
				"message": {"role": "assistant", "content": "First I will"}}]}`)
	})
	s := newSociety(t, newModel(t, srv, Config{}), as.Config{})
	p := report(t, s)
	if p.Status != string(as.StatusError) || !strings.Contains(p.Text, string(as.ErrTruncated)) || !strings.Contains(p.Text, "content filter") {
		t.Errorf("report = %+v, want a %s report that names the content filter", p, as.ErrTruncated)
	}
	if n := srv.hits.Load(); n != 1 {
		t.Errorf("%d HTTP requests, want 1", n)
	}
}
