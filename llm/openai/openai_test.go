package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	sdk "github.com/openai/openai-go/v3"

	"agentsociety/llm"
)

// clearEnv unsets every variable that New or the SDK reads, so that a
// developer's own OpenAI setup cannot leak into (or out of) a test.
func clearEnv(t *testing.T) {
	t.Helper()
	for _, k := range []string{
		EnvModel, EnvBaseURL, EnvAPIKey,
		"OPENAI_ADMIN_KEY", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID",
		"OPENAI_WEBHOOK_SECRET", "OPENAI_CUSTOM_HEADERS",
	} {
		t.Setenv(k, "") // registers the restore
		os.Unsetenv(k)
	}
}

// server is a fake chat-completions endpoint. handle sees each request's
// decoded JSON body (numbers kept as json.Number) and writes the reply.
type server struct {
	*httptest.Server
	hits atomic.Int32
}

func newServer(t *testing.T, handle func(w http.ResponseWriter, r *http.Request, body map[string]any)) *server {
	t.Helper()
	s := &server{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
			t.Errorf("request %s %s, want POST /v1/chat/completions", r.Method, r.URL.Path)
		}
		dec := json.NewDecoder(r.Body)
		dec.UseNumber()
		var body map[string]any
		if err := dec.Decode(&body); err != nil {
			t.Errorf("request body is not JSON: %v", err)
		}
		handle(w, r, body)
	}))
	t.Cleanup(s.Close)
	return s
}

// writeJSON writes a reply the way the API does.
func writeJSON(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	io.WriteString(w, body)
}

// textReply is a minimal successful completion.
func textReply(content string) string {
	return fmt.Sprintf(`{
		"id": "chatcmpl-1", "object": "chat.completion", "created": 1700000000, "model": "test-model",
		"choices": [{"index": 0, "finish_reason": "stop",
			"message": {"role": "assistant", "content": %q, "refusal": null}}],
		"usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}
	}`, content)
}

func newModel(t *testing.T, s *server, cfg Config) *Model {
	t.Helper()
	clearEnv(t)
	if cfg.BaseURL == "" {
		cfg.BaseURL = s.URL + "/v1"
	}
	if cfg.APIKey == "" {
		cfg.APIKey = "test-key"
	}
	if cfg.Model == "" {
		cfg.Model = "test-model"
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return m
}

var hello = &llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "hello"}}}

// asJSON decodes a JSON literal the way the server decodes requests, so
// that expected and actual bodies compare as values, not as text.
func asJSON(t *testing.T, s string) any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("bad expected JSON: %v\n%s", err, s)
	}
	return v
}

func TestToolCallRoundTrip(t *testing.T) {
	// 2^53+1 cannot survive a float64; it checks that the schema is
	// forwarded exactly.
	const schema = `{"type":"object","properties":{"to":{"type":"string"},"n":{"type":"integer","maximum":9007199254740993}},"required":["to"]}`
	var got map[string]any
	var auth string
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		got, auth = body, r.Header.Get("Authorization")
		writeJSON(w, 200, `{
			"id": "chatcmpl-2", "object": "chat.completion", "created": 1700000000, "model": "test-model",
			"choices": [{"index": 0, "finish_reason": "tool_calls",
				"message": {"role": "assistant", "content": null, "refusal": null, "tool_calls": [
					{"id": "call_a", "type": "function", "function": {"name": "send", "arguments": "{\"to\": \"bob\",  \"n\": 1}"}},
					{"id": "call_b", "type": "function", "function": {"name": "wait", "arguments": "{}"}}
				]}}],
			"usage": {"prompt_tokens": 120, "completion_tokens": 34, "total_tokens": 154}
		}`)
	})
	temp := 0.25
	m := newModel(t, s, Config{Temperature: &temp})

	req := &llm.Request{
		Agent:  "alice",
		System: "You are Alice.",
		Messages: []llm.Message{
			{Role: llm.RoleUser, Content: "Bob says hi."},
			{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{
				{ID: "call_1", Name: "send", Arguments: json.RawMessage(`{"to":"bob"}`)},
				{ID: "call_2", Name: "wait", Arguments: json.RawMessage(`{}`)},
			}},
			{Role: llm.RoleTool, ToolCallID: "call_1", Content: "sent"},
			{Role: llm.RoleTool, ToolCallID: "call_2", Content: "waited"},
			{Role: llm.RoleAssistant, Content: "Done."},
			{Role: llm.RoleUser, Content: "Again?"},
		},
		Tools: []llm.Tool{
			{Name: "send", Description: "Send a message.", Parameters: json.RawMessage(schema)},
			{Name: "wait", Description: "Do nothing."},
		},
	}
	resp, err := m.Generate(context.Background(), req)
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}

	if auth != "Bearer test-key" {
		t.Errorf("Authorization = %q, want %q", auth, "Bearer test-key")
	}
	want := asJSON(t, `{
		"model": "test-model",
		"temperature": 0.25,
		"messages": [
			{"role": "system", "content": "You are Alice."},
			{"role": "user", "content": "Bob says hi."},
			{"role": "assistant", "tool_calls": [
				{"id": "call_1", "type": "function", "function": {"name": "send", "arguments": "{\"to\":\"bob\"}"}},
				{"id": "call_2", "type": "function", "function": {"name": "wait", "arguments": "{}"}}
			]},
			{"role": "tool", "tool_call_id": "call_1", "content": "sent"},
			{"role": "tool", "tool_call_id": "call_2", "content": "waited"},
			{"role": "assistant", "content": "Done."},
			{"role": "user", "content": "Again?"}
		],
		"tools": [
			{"type": "function", "function": {"name": "send", "description": "Send a message.", "parameters": `+schema+`}},
			{"type": "function", "function": {"name": "wait", "description": "Do nothing."}}
		]
	}`)
	if diff := cmp.Diff(want, any(got)); diff != "" {
		t.Errorf("request body mismatch (-want +got):\n%s", diff)
	}

	wantResp := &llm.Response{
		Message: llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{
			{ID: "call_a", Name: "send", Arguments: json.RawMessage(`{"to": "bob",  "n": 1}`)},
			{ID: "call_b", Name: "wait", Arguments: json.RawMessage(`{}`)},
		}},
		Usage: llm.Usage{InputTokens: 120, OutputTokens: 34},
	}
	if diff := cmp.Diff(wantResp, resp); diff != "" {
		t.Errorf("response mismatch (-want +got):\n%s", diff)
	}
}

func TestTextReplyAndUsage(t *testing.T) {
	var got map[string]any
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		got = body
		writeJSON(w, 200, textReply("Hi there."))
	})
	m := newModel(t, s, Config{})
	resp, err := m.Generate(context.Background(), hello)
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	want := &llm.Response{
		Message: llm.Message{Role: llm.RoleAssistant, Content: "Hi there."},
		Usage:   llm.Usage{InputTokens: 7, OutputTokens: 3},
	}
	if diff := cmp.Diff(want, resp); diff != "" {
		t.Errorf("response mismatch (-want +got):\n%s", diff)
	}
	// No system prompt, tools or temperature: none is sent.
	wantBody := asJSON(t, `{"model": "test-model", "messages": [{"role": "user", "content": "hello"}]}`)
	if diff := cmp.Diff(wantBody, any(got)); diff != "" {
		t.Errorf("request body mismatch (-want +got):\n%s", diff)
	}
}

func TestRefusalBecomesContent(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		writeJSON(w, 200, `{"id": "c", "object": "chat.completion", "created": 1, "model": "m",
			"choices": [{"index": 0, "finish_reason": "stop",
				"message": {"role": "assistant", "content": null, "refusal": "I can't help with that."}}]}`)
	})
	resp, err := newModel(t, s, Config{}).Generate(context.Background(), hello)
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	if resp.Message.Content != "I can't help with that." {
		t.Errorf("Content = %q, want the refusal", resp.Message.Content)
	}
}

func TestInvalidToolArgumentsReturnedVerbatim(t *testing.T) {
	const args = `{"to": "bob", "text": "unterminated`
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		reply, _ := json.Marshal(map[string]any{
			"id": "c", "object": "chat.completion", "created": 1, "model": "m",
			"choices": []any{map[string]any{"index": 0, "finish_reason": "tool_calls",
				"message": map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{
					map[string]any{"id": "call_x", "type": "function",
						"function": map[string]any{"name": "send", "arguments": args}},
				}}}},
		})
		writeJSON(w, 200, string(reply))
	})
	resp, err := newModel(t, s, Config{}).Generate(context.Background(), hello)
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	want := []llm.ToolCall{{ID: "call_x", Name: "send", Arguments: json.RawMessage(args)}}
	if diff := cmp.Diff(want, resp.Message.ToolCalls); diff != "" {
		t.Errorf("tool calls mismatch (-want +got):\n%s", diff)
	}
}

func TestToolArgumentsAsObject(t *testing.T) {
	// Some compatible servers send arguments as an object, not a string.
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		writeJSON(w, 200, `{"id": "c", "object": "chat.completion", "created": 1, "model": "m",
			"choices": [{"index": 0, "finish_reason": "tool_calls",
				"message": {"role": "assistant", "content": "", "tool_calls": [
					{"id": "call_o", "type": "function", "function": {"name": "send", "arguments": {"to":"bob"}}}]}}]}`)
	})
	resp, err := newModel(t, s, Config{}).Generate(context.Background(), hello)
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	want := []llm.ToolCall{{ID: "call_o", Name: "send", Arguments: json.RawMessage(`{"to":"bob"}`)}}
	if diff := cmp.Diff(want, resp.Message.ToolCalls); diff != "" {
		t.Errorf("tool calls mismatch (-want +got):\n%s", diff)
	}
}

func TestRateLimitedThenSuccess(t *testing.T) {
	var calls atomic.Int32
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		if calls.Add(1) == 1 {
			w.Header().Set("retry-after-ms", "1")
			writeJSON(w, 429, `{"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}}`)
			return
		}
		writeJSON(w, 200, textReply("after retry"))
	})
	m := newModel(t, s, Config{MaxRetries: 1})
	resp, err := m.Generate(context.Background(), hello)
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	if resp.Message.Content != "after retry" {
		t.Errorf("Content = %q, want %q", resp.Message.Content, "after retry")
	}
	if n := s.hits.Load(); n != 2 {
		t.Errorf("server hits = %d, want 2", n)
	}
}

func TestBadRequestNotRetried(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		writeJSON(w, 400, `{"error": {"message": "This model's maximum context length is 128000 tokens.", "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}`)
	})
	m := newModel(t, s, Config{MaxRetries: 3})
	_, err := m.Generate(context.Background(), hello)
	if !errors.Is(err, llm.ErrBadRequest) {
		t.Fatalf("err = %v, want llm.ErrBadRequest", err)
	}
	if llm.IsTransient(err) {
		t.Errorf("IsTransient(%v) = true, want false", err)
	}
	if !strings.Contains(err.Error(), "maximum context length") || !strings.Contains(err.Error(), "context_length_exceeded") {
		t.Errorf("error %q lacks the provider's message", err)
	}
	var apiErr *sdk.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 {
		t.Errorf("errors.As(*openai.Error) failed or wrong status: %v", err)
	}
	if n := s.hits.Load(); n != 1 {
		t.Errorf("server hits = %d, want 1 (no retry)", n)
	}
}

func TestServerErrorWithoutRetries(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		writeJSON(w, 500, `{"error": {"message": "The server had an error", "type": "server_error"}}`)
	})
	m := newModel(t, s, Config{MaxRetries: -1})
	_, err := m.Generate(context.Background(), hello)
	if !errors.Is(err, llm.ErrServer) || !llm.IsTransient(err) {
		t.Fatalf("err = %v, want transient llm.ErrServer", err)
	}
	if !strings.Contains(err.Error(), "The server had an error") {
		t.Errorf("error %q lacks the provider's message", err)
	}
	if n := s.hits.Load(); n != 1 {
		t.Errorf("server hits = %d, want 1 (MaxRetries -1)", n)
	}
}

func TestStatusMapping(t *testing.T) {
	tests := []struct {
		status int
		body   string
		want   error
		text   string
	}{
		{401, `{"error": {"message": "Incorrect API key provided", "type": "invalid_request_error", "code": "invalid_api_key"}}`, llm.ErrAuth, "Incorrect API key"},
		{403, `{"error": {"message": "Project does not have access", "type": "invalid_request_error"}}`, llm.ErrAuth, "does not have access"},
		{404, `{"error": {"message": "The model 'nope' does not exist", "type": "invalid_request_error", "code": "model_not_found"}}`, llm.ErrBadRequest, "does not exist"},
		{422, `{"detail": [{"msg": "field required"}]}`, llm.ErrBadRequest, "field required"},
		{429, `{"error": {"message": "Rate limit reached for requests", "type": "requests", "code": "rate_limit_exceeded"}}`, llm.ErrRateLimited, "Rate limit reached"},
		{429, `{"error": {"message": "You exceeded your current quota", "type": "insufficient_quota"}}`, llm.ErrAuth, "exceeded your current quota"},
		{502, "<html>Bad Gateway</html>", llm.ErrServer, "Bad Gateway"},
		{503, `{"error": "model is loading"}`, llm.ErrServer, "model is loading"},
		{400, `{"error": "unknown field"}`, llm.ErrBadRequest, "unknown field"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.status), func(t *testing.T) {
			s := newServer(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
				writeJSON(w, tt.status, tt.body)
			})
			_, err := newModel(t, s, Config{MaxRetries: -1}).Generate(context.Background(), hello)
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if !strings.Contains(err.Error(), tt.text) {
				t.Errorf("error %q lacks %q", err, tt.text)
			}
		})
	}
}

func TestNoChoices(t *testing.T) {
	for _, tt := range []struct{ body, text string }{
		{`{"id": "chatcmpl-empty", "object": "chat.completion", "created": 1, "model": "m", "choices": []}`, "no choices"},
		// Some compatible servers report an error with status 200.
		{`{"error": {"message": "backend crashed"}}`, "backend crashed"},
	} {
		s := newServer(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
			writeJSON(w, 200, tt.body)
		})
		_, err := newModel(t, s, Config{}).Generate(context.Background(), hello)
		if !errors.Is(err, llm.ErrServer) || !strings.Contains(err.Error(), "no choices") || !strings.Contains(err.Error(), tt.text) {
			t.Errorf("body %s: err = %v, want llm.ErrServer about no choices and %q", tt.body, err, tt.text)
		}
	}
}

// TestMalformedResponse: a body that is not a completion, or whose choice
// has no message, is a provider failure (llm.ErrServer), never a panic nor
// an empty answer taken for the model's.
func TestMalformedResponse(t *testing.T) {
	for _, body := range []string{
		`{"id": "chatcmpl-1", "choices": [`,
		`null`,
		`{"id": "c", "choices": [null]}`,
		`{"id": "c", "choices": [{"index": 0, "finish_reason": "stop"}]}`,
		`{"id": "c", "choices": [{"index": 0, "finish_reason": "stop", "message": null}]}`,
		`{"id": "c", "choices": [{"index": 0, "finish_reason": "stop", "message": "hi"}]}`,
	} {
		s := newServer(t, func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
			writeJSON(w, 200, body)
		})
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("body %s: Generate panicked: %v", body, p)
				}
			}()
			resp, err := newModel(t, s, Config{MaxRetries: -1}).Generate(context.Background(), hello)
			if !errors.Is(err, llm.ErrServer) || resp != nil {
				t.Errorf("body %s: %+v, %v; want llm.ErrServer", body, resp, err)
			}
		}()
	}
}

// blockingServer holds every request until the client gives up on it. It
// reports each arrival on arrived.
func blockingServer(t *testing.T) (*server, chan struct{}) {
	arrived := make(chan struct{}, 10)
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		arrived <- struct{}{}
		<-r.Context().Done()
	})
	return s, arrived
}

func TestCancelledContext(t *testing.T) {
	s, arrived := blockingServer(t)
	m := newModel(t, s, Config{MaxRetries: 2, Timeout: time.Minute})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-arrived
		cancel()
	}()
	start := time.Now()
	_, err := m.Generate(ctx, hello)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if llm.IsTransient(err) {
		t.Errorf("IsTransient(%v) = true, want false for a cancelled call", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Generate returned after %v, want promptly after cancel", d)
	}
	if n := s.hits.Load(); n != 1 {
		t.Errorf("server hits = %d, want 1 (no retry after cancel)", n)
	}
}

func TestAlreadyCancelledContext(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		writeJSON(w, 200, textReply("unreachable"))
	})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := newModel(t, s, Config{}).Generate(ctx, hello)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if n := s.hits.Load(); n != 0 {
		t.Errorf("server hits = %d, want 0", n)
	}
}

func TestAttemptTimeout(t *testing.T) {
	s, _ := blockingServer(t)
	m := newModel(t, s, Config{MaxRetries: 2, Timeout: 50 * time.Millisecond})
	_, err := m.Generate(context.Background(), hello)
	if !errors.Is(err, llm.ErrTimeout) {
		t.Fatalf("err = %v, want llm.ErrTimeout", err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v wraps context.DeadlineExceeded, but the caller's context did not expire", err)
	}
	// The SDK ends the call at the first timed-out attempt.
	if n := s.hits.Load(); n != 1 {
		t.Errorf("server hits = %d, want 1", n)
	}
}

func TestCallerDeadline(t *testing.T) {
	s, _ := blockingServer(t)
	m := newModel(t, s, Config{Timeout: time.Minute})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := m.Generate(ctx, hello)
	if !errors.Is(err, llm.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want llm.ErrTimeout and context.DeadlineExceeded", err)
	}
}

func TestConnectionError(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {})
	m := newModel(t, s, Config{MaxRetries: -1})
	s.Close() // nothing listens any more
	_, err := m.Generate(context.Background(), hello)
	if !errors.Is(err, llm.ErrServer) {
		t.Fatalf("err = %v, want llm.ErrServer", err)
	}
}

func TestUntranslatableRequest(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		writeJSON(w, 200, textReply("unreachable"))
	})
	m := newModel(t, s, Config{})
	for name, req := range map[string]*llm.Request{
		"nil":         nil,
		"role":        {Messages: []llm.Message{{Role: "narrator", Content: "x"}}},
		"schema":      {Messages: hello.Messages, Tools: []llm.Tool{{Name: "t", Parameters: json.RawMessage(`[1]`)}}},
		"schema-tail": {Messages: hello.Messages, Tools: []llm.Tool{{Name: "t", Parameters: json.RawMessage(`{} {}`)}}},
	} {
		if _, err := m.Generate(context.Background(), req); !errors.Is(err, llm.ErrBadRequest) {
			t.Errorf("%s: err = %v, want llm.ErrBadRequest", name, err)
		}
	}
	if n := s.hits.Load(); n != 0 {
		t.Errorf("server hits = %d, want 0", n)
	}
}

func TestNewRequiresKeyOrBaseURL(t *testing.T) {
	clearEnv(t)
	_, err := New(Config{})
	if err == nil || !strings.Contains(err.Error(), EnvAPIKey) {
		t.Fatalf("New(Config{}) err = %v, want an error naming %s", err, EnvAPIKey)
	}
}

func TestNewRejectsBadBaseURL(t *testing.T) {
	clearEnv(t)
	for _, u := range []string{"localhost:8000", "ftp://x/v1", "http://"} {
		if _, err := New(Config{BaseURL: u}); err == nil {
			t.Errorf("New(BaseURL %q) succeeded, want an error", u)
		}
	}
}

func TestKeylessLocalServer(t *testing.T) {
	var auth []string
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		auth = r.Header.Values("Authorization")
		writeJSON(w, 200, textReply("local"))
	})
	clearEnv(t)
	m, err := New(Config{BaseURL: s.URL + "/v1", Model: "llama"})
	if err != nil {
		t.Fatalf("New without key but with base URL: %v", err)
	}
	if _, err := m.Generate(context.Background(), hello); err != nil {
		t.Fatalf("Generate: %v", err)
	}
	if len(auth) != 0 {
		t.Errorf("Authorization = %q, want none", auth)
	}
}

func TestEnvironmentDefaults(t *testing.T) {
	var model, auth string
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		model, _ = body["model"].(string)
		auth = r.Header.Get("Authorization")
		writeJSON(w, 200, textReply("env"))
	})
	clearEnv(t)
	t.Setenv(EnvModel, "env-model")
	t.Setenv(EnvBaseURL, s.URL+"/v1")
	t.Setenv(EnvAPIKey, "env-key")
	m, err := New(Config{})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if _, err := m.Generate(context.Background(), hello); err != nil {
		t.Fatalf("Generate: %v", err)
	}
	if model != "env-model" || auth != "Bearer env-key" {
		t.Errorf("model, auth = %q, %q; want env-model, Bearer env-key", model, auth)
	}

	// Explicit fields win over the environment.
	t.Setenv(EnvModel, "other")
	m, err = New(Config{Model: "cfg-model", APIKey: "cfg-key"})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if _, err := m.Generate(context.Background(), hello); err != nil {
		t.Fatalf("Generate: %v", err)
	}
	if model != "cfg-model" || auth != "Bearer cfg-key" {
		t.Errorf("model, auth = %q, %q; want cfg-model, Bearer cfg-key", model, auth)
	}
}

func TestCustomHTTPClient(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		writeJSON(w, 200, textReply("via client"))
	})
	var used atomic.Bool
	client := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		used.Store(true)
		return http.DefaultTransport.RoundTrip(r)
	})}
	if _, err := newModel(t, s, Config{HTTPClient: client}).Generate(context.Background(), hello); err != nil {
		t.Fatalf("Generate: %v", err)
	}
	if !used.Load() {
		t.Error("Config.HTTPClient was not used")
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestConcurrentUse(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		msgs, _ := body["messages"].([]any)
		last, _ := msgs[len(msgs)-1].(map[string]any)
		writeJSON(w, 200, textReply("echo "+fmt.Sprint(last["content"])))
	})
	m := newModel(t, s, Config{})
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			text := fmt.Sprintf("agent %d", i)
			resp, err := m.Generate(context.Background(), &llm.Request{
				Agent:    text,
				Messages: []llm.Message{{Role: llm.RoleUser, Content: text}},
			})
			if err != nil {
				t.Errorf("Generate: %v", err)
				return
			}
			if resp.Message.Content != "echo "+text {
				t.Errorf("Content = %q, want %q", resp.Message.Content, "echo "+text)
			}
		})
	}
	wg.Wait()
}

// TestRequestNotModified checks that Generate leaves the request as it
// found it: the caller owns it.
func TestRequestNotModified(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		writeJSON(w, 200, textReply("ok"))
	})
	args := json.RawMessage(`{"a":1}`)
	req := &llm.Request{
		System: "s",
		Messages: []llm.Message{
			{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "1", Name: "f", Arguments: args}}},
			{Role: llm.RoleTool, ToolCallID: "1", Content: "r"},
		},
		Tools: []llm.Tool{{Name: "f", Parameters: json.RawMessage(`{"type":"object"}`)}},
	}
	before, _ := json.Marshal(req)
	if _, err := newModel(t, s, Config{}).Generate(context.Background(), req); err != nil {
		t.Fatalf("Generate: %v", err)
	}
	after, _ := json.Marshal(req)
	if !bytes.Equal(before, after) {
		t.Errorf("request modified:\nbefore %s\nafter  %s", before, after)
	}
}

func TestDefaultBaseURL(t *testing.T) {
	// OPENAI_BASE_URL set but empty must mean the default, not a relative
	// URL (which the SDK alone would use). The transport answers itself, so
	// nothing leaves the process.
	clearEnv(t)
	t.Setenv(EnvBaseURL, "")
	var got string
	client := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		got = r.URL.String()
		return &http.Response{
			StatusCode: 200,
			Header:     http.Header{"Content-Type": {"application/json"}},
			Body:       io.NopCloser(strings.NewReader(textReply("ok"))),
			Request:    r,
		}, nil
	})}
	m, err := New(Config{APIKey: "k", HTTPClient: client})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if _, err := m.Generate(context.Background(), hello); err != nil {
		t.Fatalf("Generate: %v", err)
	}
	if want := "https://api.openai.com/v1/chat/completions"; got != want {
		t.Errorf("URL = %q, want %q", got, want)
	}
}

func TestNoSDKRetriesByDefault(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		writeJSON(w, 503, `{"error": {"message": "overloaded", "type": "server_error"}}`)
	})
	_, err := newModel(t, s, Config{}).Generate(context.Background(), hello)
	if !errors.Is(err, llm.ErrServer) || !llm.IsTransient(err) {
		t.Fatalf("err = %v, want transient llm.ErrServer", err)
	}
	if n := s.hits.Load(); n != 1 {
		t.Errorf("server hits = %d, want 1: the SDK must not retry unless MaxRetries > 0", n)
	}
}

// toolCallsReply is a completion whose message makes the given tool calls,
// each a JSON object such as {"type":"function","function":{...}}.
func toolCallsReply(finish string, calls ...string) string {
	return `{"id": "c", "object": "chat.completion", "created": 1, "model": "m",
		"choices": [{"index": 0, "finish_reason": "` + finish + `",
			"message": {"role": "assistant", "content": null, "tool_calls": [` + strings.Join(calls, ",") + `]}}]}`
}

func TestToolCallsWithoutIDsGetUniqueOnes(t *testing.T) {
	var bodies []map[string]any
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		bodies = append(bodies, body)
		if len(bodies) > 1 {
			writeJSON(w, 200, textReply("done"))
			return
		}
		writeJSON(w, 200, toolCallsReply("tool_calls",
			`{"type": "function", "function": {"name": "a", "arguments": "{}"}}`,
			`{"id": "", "type": "function", "function": {"name": "b", "arguments": "{}"}}`,
			`{"id": "call_0", "type": "function", "function": {"name": "c", "arguments": "{}"}}`,
			`{"id": "call_0", "type": "function", "function": {"name": "d", "arguments": "{}"}}`,
			`{"id": "call_9", "type": "function", "function": {"name": "e", "arguments": "{}"}}`))
	})
	m := newModel(t, s, Config{})
	// call_0 was used earlier in the conversation: a server that numbers
	// calls afresh in each response must not make it ambiguous.
	req := &llm.Request{Messages: []llm.Message{
		{Role: llm.RoleUser, Content: "go"},
		{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "call_0", Name: "a", Arguments: json.RawMessage(`{}`)}}},
		{Role: llm.RoleTool, ToolCallID: "call_0", Content: "earlier"},
	}}
	resp, err := m.Generate(context.Background(), req)
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	calls := resp.Message.ToolCalls
	if len(calls) != 5 {
		t.Fatalf("got %d tool calls, want 5", len(calls))
	}
	seen := map[string]bool{"call_0": true}
	for i, c := range calls[:4] {
		if c.ID == "" || seen[c.ID] {
			t.Errorf("call %d (%s) has id %q, want a fresh unique one", i, c.Name, c.ID)
		}
		seen[c.ID] = true
	}
	if calls[4].ID != "call_9" {
		t.Errorf("call e has id %q, want the server's call_9 kept", calls[4].ID)
	}

	// The caller answers each call under its id; the next request carries
	// the ids the adapter made, on the assistant turn and on the results.
	req.Messages = append(req.Messages, resp.Message)
	for _, c := range calls {
		req.Messages = append(req.Messages, llm.Message{Role: llm.RoleTool, ToolCallID: c.ID, Content: "result " + c.Name})
	}
	if _, err := m.Generate(context.Background(), req); err != nil {
		t.Fatalf("second Generate: %v", err)
	}
	msgs := bodies[1]["messages"].([]any)
	turn := msgs[3].(map[string]any)
	sent := turn["tool_calls"].([]any)
	for i, c := range calls {
		if id := sent[i].(map[string]any)["id"]; id != c.ID {
			t.Errorf("assistant turn's call %d sent with id %v, want %q", i, id, c.ID)
		}
		result := msgs[4+i].(map[string]any)
		if result["role"] != "tool" || result["tool_call_id"] != c.ID || result["content"] != "result "+c.Name {
			t.Errorf("tool message %d = %v, want the result of %s under id %q", i, result, c.Name, c.ID)
		}
	}
}

func TestFinishReasonLengthIsTruncated(t *testing.T) {
	for _, tt := range []struct {
		name, body string
		want       bool
	}{
		{"text cut off", `{"id": "c", "object": "chat.completion", "created": 1, "model": "m",
			"choices": [{"index": 0, "finish_reason": "length",
				"message": {"role": "assistant", "content": "The answer is"}}]}`, true},
		{"tool call cut off", toolCallsReply("length",
			`{"id": "call_1", "type": "function", "function": {"name": "send", "arguments": "{\"to\": \"bo"}}`), true},
		{"stop", textReply("The answer is 42."), false},
		{"tool_calls", toolCallsReply("tool_calls",
			`{"id": "call_1", "type": "function", "function": {"name": "send", "arguments": "{}"}}`), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := newServer(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
				writeJSON(w, 200, tt.body)
			})
			resp, err := newModel(t, s, Config{}).Generate(context.Background(), hello)
			if err != nil {
				t.Fatalf("Generate: %v", err)
			}
			if resp.Truncated != tt.want {
				t.Errorf("Truncated = %v, want %v", resp.Truncated, tt.want)
			}
		})
	}
}

// quotaBody is OpenAI's documented answer to an account out of credit.
const quotaBody = `{"error": {"message": "You exceeded your current quota, please check your plan and billing details.", "type": "insufficient_quota", "param": null, "code": "insufficient_quota"}}`

// TestInsufficientQuotaNotRetried: a 429 that says the account is out of
// quota will not succeed on a retry, unlike a rate limit: it is not
// transient, and the SDK's own retries skip it too.
func TestInsufficientQuotaNotRetried(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		w.Header().Set("retry-after-ms", "1")
		writeJSON(w, 429, quotaBody)
	})
	_, err := newModel(t, s, Config{MaxRetries: 2}).Generate(context.Background(), hello)
	if err == nil || llm.IsTransient(err) || errors.Is(err, llm.ErrRateLimited) {
		t.Fatalf("err = %v, want an error that is not transient", err)
	}
	if !errors.Is(err, llm.ErrAuth) {
		t.Errorf("err = %v, want llm.ErrAuth", err)
	}
	for _, text := range []string{"exceeded your current quota", "insufficient_quota"} {
		if !strings.Contains(err.Error(), text) {
			t.Errorf("error %q lacks %q", err, text)
		}
	}
	if n := s.hits.Load(); n != 1 {
		t.Errorf("server hits = %d, want 1: the SDK must not retry an account out of quota", n)
	}
}

// TestRateLimitStillTransient: a 429 that is a rate limit stays one, also
// when its type is a compatible server's own.
func TestRateLimitStillTransient(t *testing.T) {
	for _, body := range []string{
		`{"error": {"message": "Rate limit reached for requests", "type": "requests", "code": "rate_limit_exceeded"}}`,
		`{"error": "slow down"}`,
		`too many requests`,
	} {
		s := newServer(t, func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
			writeJSON(w, 429, body)
		})
		_, err := newModel(t, s, Config{}).Generate(context.Background(), hello)
		if !errors.Is(err, llm.ErrRateLimited) || !llm.IsTransient(err) {
			t.Errorf("body %s: err = %v, want transient llm.ErrRateLimited", body, err)
		}
	}
}

// TestFinishReasonContentFilter: an answer the content filter cut off, or
// withheld, is not a finished one: it is reported as Truncated, and
// Filtered says why.
func TestFinishReasonContentFilter(t *testing.T) {
	for _, tt := range []struct {
		name, body          string
		truncated, filtered bool
	}{
		{"text cut off", `{"id": "c", "object": "chat.completion", "created": 1, "model": "m",
			"choices": [{"index": 0, "finish_reason": "content_filter",
				"message": {"role": "assistant", "content": "Here is how to"}}]}`, true, true},
		{"withheld", `{"id": "c", "object": "chat.completion", "created": 1, "model": "m",
			"choices": [{"index": 0, "finish_reason": "content_filter",
				"message": {"role": "assistant", "content": null}}]}`, true, true},
		{"tool call cut off", toolCallsReply("content_filter",
			`{"id": "call_1", "type": "function", "function": {"name": "send", "arguments": "{\"to\": \"bo"}}`), true, true},
		{"length", `{"id": "c", "object": "chat.completion", "created": 1, "model": "m",
			"choices": [{"index": 0, "finish_reason": "length",
				"message": {"role": "assistant", "content": "The answer is"}}]}`, true, false},
		{"stop", textReply("The answer is 42."), false, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := newServer(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
				writeJSON(w, 200, tt.body)
			})
			resp, err := newModel(t, s, Config{}).Generate(context.Background(), hello)
			if err != nil {
				t.Fatalf("Generate: %v", err)
			}
			if resp.Truncated != tt.truncated || resp.Filtered != tt.filtered {
				t.Errorf("Truncated = %v, Filtered = %v; want %v, %v", resp.Truncated, resp.Filtered, tt.truncated, tt.filtered)
			}
		})
	}
}
