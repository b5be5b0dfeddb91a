package llm_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"agentsociety/llm"
)

// request returns a request of agent, whose task and artifact are the ids
// given, with a tool result naming the artifact.
func request(agent, task, artifact, text string) *llm.Request {
	return &llm.Request{
		Agent:  agent,
		System: "You are " + agent + " on " + task + ".",
		Messages: []llm.Message{
			{Role: llm.RoleUser, Content: text},
			{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "c1", Name: "put_artifact", Arguments: json.RawMessage(`{"name":"x"}`)}}},
			{Role: llm.RoleTool, ToolCallID: "c1", Content: `{"ref":"artifact:` + artifact + `"}`},
		},
		Tools: []llm.Tool{{Name: "send_message", Description: "sends", Parameters: json.RawMessage(`{"type":"object"}`)}},
	}
}

const (
	task1, task2 = "task-0123456789abcdef", "task-fedcba9876543210"
	art1, art2   = "a-1111111111111111", "a-2222222222222222"
)

// quoting is a model that quotes every id of the system prompt and the first
// message back, in a send_message to the agent that asked, so that a replay
// must rewrite them.
var quoting = llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
	last := req.System + " " + req.Messages[0].Content
	ids := llm.IDPattern.FindAllString(last, -1)
	args, _ := json.Marshal(map[string]any{"to": req.Agent, "ids": ids})
	return &llm.Response{
		Message: llm.Message{Role: llm.RoleAssistant, Content: "saw " + strings.Join(ids, ", "), ToolCalls: []llm.ToolCall{{ID: "r1", Name: "send_message", Arguments: args}}},
		Usage:   llm.Usage{InputTokens: len(last), OutputTokens: 7},
	}, nil
})

// record records the calls of reqs on m and returns the recording.
func record(t *testing.T, m llm.Model, reqs ...*llm.Request) *llm.Recording {
	t.Helper()
	var buf bytes.Buffer
	r := llm.Record(m, &buf)
	for _, req := range reqs {
		r.Generate(context.Background(), req)
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	rec, err := llm.ReadRecording(&buf)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func TestDigest_RanksIDs(t *testing.T) {
	d1, ids1 := digest(request("agent-3", task1, art1, "hello agent-3"))
	d2, ids2 := digest(request("agent-7", task2, art2, "hello agent-7"))
	if d1 != d2 {
		t.Errorf("requests that differ only in their ids have digests %s and %s", d1, d2)
	}
	// The agent and the messages come first, then the system prompt.
	if want := []string{"agent-3", art1, task1}; !cmp.Equal(ids1, want) {
		t.Errorf("ids %q, want %q", ids1, want)
	}
	if want := []string{"agent-7", art2, task2}; !cmp.Equal(ids2, want) {
		t.Errorf("ids %q, want %q", ids2, want)
	}
	for name, req := range map[string]*llm.Request{
		"two ids made one": request("agent-3", task1, art1, "hello agent-4"),
		"other words":      request("agent-3", task1, art1, "hullo agent-3"),
		"an id moved":      request("agent-3", task1, art1, "agent-3 hello"),
	} {
		if d, _ := digest(req); d == d1 {
			t.Errorf("%s: the digest did not change", name)
		}
	}
	// The conversation is the agent and the messages.
	sk := llm.SkeletonOf(request("agent-3", task1, art1, "hello agent-3"))
	other := request("agent-3", task1, art1, "hello agent-3")
	other.System = "You are someone else."
	osk := llm.SkeletonOf(other)
	if osk.Digest == sk.Digest || osk.Conversation != sk.Conversation || sk.ConversationIDs != 2 || osk.ConversationIDs != 2 {
		t.Errorf("another system prompt: %+v; before: %+v", osk, sk)
	}
	other.Messages[0].Content = "hello"
	if llm.SkeletonOf(other).Conversation == sk.Conversation {
		t.Error("another message keeps the conversation's digest")
	}

	// Field boundaries count: text moved from one field to the next is
	// another request.
	a := &llm.Request{System: "ab", Messages: []llm.Message{{Role: llm.RoleUser, Content: "c"}}}
	b := &llm.Request{System: "a", Messages: []llm.Message{{Role: llm.RoleUser, Content: "bc"}}}
	if da, _ := digest(a); da == must(digest(b)) {
		t.Error("moving text between fields keeps the digest")
	}
}

func must(d string, _ []string) string { return d }

// digest returns the digest of req's skeleton, and its ids.
func digest(req *llm.Request) (string, []string) {
	sk := llm.SkeletonOf(req)
	return sk.Digest, sk.IDs
}

// TestIDPattern checks which words are taken for ids.
func TestIDPattern(t *testing.T) {
	for s, want := range map[string]string{
		"see artifact:a-0123456789abcdef.":      "a-0123456789abcdef",
		"（agent-12）的消息":                         "agent-12",
		"agent-2..agent-4":                      "agent-2 agent-4",
		"role-3, req-00000000000000ff":          "role-3 req-00000000000000ff",
		"msg-0a1b2c3d-42 task-0123456789abcdef": "msg-0a1b2c3d-42 task-0123456789abcdef",
		"data-0123456789abcdef subagent-1":      "",
		"a-0123456789abcdefg agent-x":           "",
	} {
		if got := strings.Join(llm.IDPattern.FindAllString(s, -1), " "); got != want {
			t.Errorf("ids in %q: %q, want %q", s, got, want)
		}
	}
}

// TestReplay_RewritesIDs records two agents' calls and replays them for
// agents and tasks with other ids: each agent is bound to its recorded
// counterpart, and each answer quotes the live ids.
func TestReplay_RewritesIDs(t *testing.T) {
	rec := record(t, quoting,
		request("agent-3", task1, art1, "hello agent-3"),
		request("agent-4", task1, art1, "hi, from agent-3 to agent-4"),
		request("agent-3", task1, art1, "again "+art1),
	)
	if rec.Len() != 3 || !cmp.Equal(rec.Agents(), []string{"agent-3", "agent-4"}) {
		t.Fatalf("recording of %d calls by %q", rec.Len(), rec.Agents())
	}
	r := llm.Replay(rec)
	ctx := context.Background()
	// The second recorded agent calls first, under another id.
	got, err := r.Generate(ctx, request("agent-9", task2, art2, "hi, from agent-8 to agent-9"))
	if err != nil {
		t.Fatal(err)
	}
	want, _ := quoting.Generate(ctx, request("agent-9", task2, art2, "hi, from agent-8 to agent-9"))
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("replayed answer (-live model +replay):\n%s", diff)
	}
	// agent-8 was paired with agent-3 by that call: it is bound to it.
	for _, text := range []string{"hello agent-8", "again " + art2} {
		got, err = r.Generate(ctx, request("agent-8", task2, art2, text))
		if err != nil {
			t.Fatal(err)
		}
		want, _ = quoting.Generate(ctx, request("agent-8", task2, art2, text))
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("replayed answer to %q (-live model +replay):\n%s", text, diff)
		}
	}
	if r.Replayed() != 3 {
		t.Errorf("Replayed = %d, want 3", r.Replayed())
	}
	_, err = r.Generate(ctx, request("agent-8", task2, art2, "more"))
	if !errors.Is(err, llm.ErrReplayExhausted) || llm.IsTransient(err) {
		t.Errorf("a call past the recording: %v", err)
	}
}

// TestReplay_LearnedIDs checks that an id the request does not mention is
// rewritten with what earlier calls paired it with.
func TestReplay_LearnedIDs(t *testing.T) {
	m := llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
		return &llm.Response{Message: llm.Message{Content: "still on " + task1}}, nil
	})
	rec := record(t, m, request("agent-1", task1, art1, "x"), request("agent-2", "task-none", art1, "y"))
	r := llm.Replay(rec)
	ctx := context.Background()
	r.Generate(ctx, request("agent-1", task2, art2, "x"))
	got, err := r.Generate(ctx, request("agent-2", "task-none", art2, "y"))
	if err != nil || got.Message.Content != "still on "+task2 {
		t.Errorf("got %+v, %v; want the task learned from the first call", got, err)
	}
}

func TestReplay_Mismatch(t *testing.T) {
	rec := record(t, quoting, request("agent-1", task1, art1, "hello"), request("agent-1", task1, art1, "then"))
	ctx := context.Background()

	r := llm.Replay(rec)
	if _, err := r.Generate(ctx, request("agent-1", task2, art2, "hello")); err != nil {
		t.Fatal(err)
	}
	_, err := r.Generate(ctx, request("agent-1", task2, art2, "not then"))
	if !errors.Is(err, llm.ErrReplayMismatch) || llm.IsTransient(err) || !strings.Contains(err.Error(), "call 1 of agent-1") {
		t.Errorf("a changed request: %v", err)
	}

	r = llm.Replay(rec)
	_, err = r.Generate(ctx, request("agent-5", task2, art2, "goodbye"))
	if !errors.Is(err, llm.ErrReplayMismatch) || !strings.Contains(err.Error(), "agent-5") {
		t.Errorf("an agent no recorded one matches: %v", err)
	}
	// Each recorded agent replays for one live agent only.
	r.Generate(ctx, request("agent-1", task2, art2, "hello"))
	if _, err = r.Generate(ctx, request("agent-2", task2, art2, "hello")); !errors.Is(err, llm.ErrReplayMismatch) {
		t.Errorf("a second agent for a recorded one: %v", err)
	}
}

// TestReplay_Errors checks that a recorded failure fails again, as the
// same kind of error.
func TestReplay_Errors(t *testing.T) {
	fails := llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
		switch req.Messages[0].Content {
		case "busy":
			return nil, fmt.Errorf("provider: %w", llm.ErrRateLimited)
		case "odd":
			return nil, errors.New("provider: odd")
		}
		return nil, nil
	})
	reqs := []*llm.Request{request("agent-1", task1, art1, "busy"), request("agent-1", task1, art1, "odd"), request("agent-1", task1, art1, "nil")}
	rec := record(t, fails, reqs...)
	r := llm.Replay(rec)
	for i, want := range []struct {
		text      string
		transient bool
	}{{"provider: llm: rate limited", true}, {"provider: odd", false}, {"the model returned no response", false}} {
		resp, err := r.Generate(context.Background(), reqs[i])
		if resp != nil || err == nil || err.Error() != want.text || llm.IsTransient(err) != want.transient {
			t.Errorf("call %d: %v, %v; want %q, transient %v", i, resp, err, want.text, want.transient)
		}
	}
}

// TestRecording_Lines checks what a recording keeps, that its lines may come
// in any order, and that a gap is refused.
func TestRecording_Lines(t *testing.T) {
	cut := llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
		return &llm.Response{
			Message:   llm.Message{Content: "half", ToolCalls: []llm.ToolCall{{ID: "t", Name: "put_artifact", Arguments: json.RawMessage(`{"content":"<ht`)}}},
			Usage:     llm.Usage{InputTokens: 10, OutputTokens: 4096},
			Truncated: true,
			Filtered:  true,
		}, nil
	})
	var buf bytes.Buffer
	r := llm.Record(cut, &buf)
	want, _ := cut.Generate(context.Background(), request("agent-1", task1, art1, "x"))
	want.Message.Role = llm.RoleAssistant
	for i := range 3 {
		r.Generate(context.Background(), request("agent-1", task1, art1, fmt.Sprint(i)))
	}
	lines := strings.SplitAfter(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines: %q", len(lines), buf.String())
	}
	rec, err := llm.ReadRecording(strings.NewReader(lines[2] + "\n" + lines[0] + lines[1]))
	if err != nil {
		t.Fatal(err)
	}
	calls := rec.Calls("agent-1")
	for i, c := range calls {
		d, ids := digest(request("agent-1", task1, art1, fmt.Sprint(i)))
		if c.Index != i || c.Digest != d || !cmp.Equal(c.IDs, ids) || c.Err != "" {
			t.Errorf("call %d: %+v", i, c)
		}
		if diff := cmp.Diff(want, c.Response); diff != "" {
			t.Errorf("call %d's response (-model +recording):\n%s", i, diff)
		}
	}
	// A replay answers as the model did, cut off and filtered.
	got, err := llm.Replay(rec).Generate(context.Background(), request("agent-1", task1, art1, "0"))
	if diff := cmp.Diff(want, got); err != nil || diff != "" {
		t.Errorf("replayed response (-model +replay), %v:\n%s", err, diff)
	}
	if _, err := llm.ReadRecording(strings.NewReader(lines[0] + "\n" + lines[2])); err == nil || !strings.Contains(err.Error(), "call 2 of agent-1 where call 1") {
		t.Errorf("a recording with a gap: %v", err)
	}
	if _, err := llm.ReadRecording(strings.NewReader(lines[0] + "{not json\n")); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("a recording with a bad line: %v", err)
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestRecorder_WriteError(t *testing.T) {
	r := llm.Record(quoting, failingWriter{})
	resp, err := r.Generate(context.Background(), request("agent-1", task1, art1, "x"))
	if err != nil || resp == nil {
		t.Fatalf("the model's answer is lost to the recording's failure: %v", err)
	}
	if err := r.Err(); err == nil || !strings.Contains(err.Error(), "disk full") || !strings.Contains(err.Error(), "call 0 of agent-1") {
		t.Errorf("Err = %v", err)
	}
}

// TestRecorder_Concurrent records many agents at once: each agent's calls
// are numbered in its own order.
func TestRecorder_Concurrent(t *testing.T) {
	var buf bytes.Buffer
	r := llm.Record(quoting, &buf)
	var wg sync.WaitGroup
	for a := range 8 {
		wg.Go(func() {
			for i := range 5 {
				r.Generate(context.Background(), request(fmt.Sprint("agent-", a), task1, art1, fmt.Sprint(i)))
			}
		})
	}
	wg.Wait()
	rec, err := llm.ReadRecording(&buf)
	if err != nil {
		t.Fatal(err)
	}
	for a := range 8 {
		for i, c := range rec.Calls(fmt.Sprint("agent-", a)) {
			if d, _ := digest(request(fmt.Sprint("agent-", a), task1, art1, fmt.Sprint(i))); c.Digest != d {
				t.Errorf("call %d of agent-%d is another request", i, a)
			}
		}
	}
	if rec.Len() != 40 {
		t.Errorf("%d calls recorded, want 40", rec.Len())
	}
}

// live is a model that says who answered, and counts its calls.
type live struct {
	mu    sync.Mutex
	calls []string
}

func (l *live) Generate(ctx context.Context, req *llm.Request) (*llm.Response, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, req.Agent+": "+req.Messages[0].Content)
	return &llm.Response{Message: llm.Message{Content: "live"}}, nil
}

// TestFork checks that each agent replays its share of the recording and
// then goes live, as does an agent with no share, an agent the recording
// does not have, and one whose request no longer matches.
func TestFork(t *testing.T) {
	rec := record(t, quoting,
		request("agent-1", task1, art1, "a0"), request("agent-1", task1, art1, "a1"), request("agent-1", task1, art1, "a2"),
		request("agent-2", task1, art1, "b0"), request("agent-2", task1, art1, "b1"),
		request("agent-3", task1, art1, "c0"),
	)
	l := &live{}
	r := llm.Fork(rec, l, map[string]int{"agent-1": 2, "agent-2": 2})
	ctx := context.Background()
	answered := func(agent, text string) string {
		t.Helper()
		resp, err := r.Generate(ctx, request(agent, task2, art2, text))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Message.Content
	}
	var got []string
	for _, c := range []struct{ agent, text string }{
		{"agent-1", "a0"}, {"agent-1", "a1"}, {"agent-1", "a2"}, // replayed up to its share
		{"agent-2", "b0"}, {"agent-2", "diverged"}, {"agent-2", "b1"}, // live from where it diverged
		{"agent-3", "c0"}, // no share
		{"agent-4", "d0"}, // not recorded
	} {
		got = append(got, c.agent+" "+c.text+": "+answered(c.agent, c.text))
	}
	want := []string{
		"agent-1 a0: saw agent-1, " + task2, "agent-1 a1: saw agent-1, " + task2, "agent-1 a2: live",
		"agent-2 b0: saw agent-2, " + task2, "agent-2 diverged: live", "agent-2 b1: live",
		"agent-3 c0: live", "agent-4 d0: live",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("answers (-want +got):\n%s", diff)
	}
	if r.Replayed() != 3 || len(l.calls) != 5 {
		t.Errorf("replayed %d, live %d (%q); want 3 and 5", r.Replayed(), len(l.calls), l.calls)
	}
}

// TestReplay_OtherSystemPrompt checks that a request whose system prompt
// changed is replayed, its ids paired over its conversation only.
func TestReplay_OtherSystemPrompt(t *testing.T) {
	rec := record(t, quoting, request("agent-1", task1, art1, "hello agent-1"))
	req := request("agent-5", task2, art2, "hello agent-5")
	req.System = "New rules for agent-5 on " + task2 + "."
	l := &live{}
	for name, r := range map[string]*llm.Replayer{"replay": llm.Replay(rec), "fork": llm.Fork(rec, l, nil)} {
		got, err := r.Generate(context.Background(), req)
		if err != nil || len(l.calls) != 0 {
			t.Fatalf("%s: %v; live calls %q", name, err, l.calls)
		}
		// The recorded answer quoted agent-1 and task1: agent-1 is in the
		// conversation, so it is paired; task1 was only in the system prompt.
		if want := "saw agent-5, " + task1 + ", agent-5"; got.Message.Content != want {
			t.Errorf("%s: answer %q, want %q", name, got.Message.Content, want)
		}
	}
}

// noPanic runs f and reports a panic as a test failure, so that a defect
// shows as one failed test rather than a crashed run.
func noPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("%s panicked: %v", what, r)
		}
	}()
	f()
}

// TestReadRecording_DamagedIDs checks that a recording whose ids do not
// add up is refused when read, or on replay with ErrReplayMismatch, and
// never makes the Replayer panic.
func TestReadRecording_DamagedIDs(t *testing.T) {
	rec := record(t, quoting, request("agent-1", task1, art1, "hello agent-1"))
	c := rec.Calls("agent-1")[0]
	line := func(edit func(*llm.Call)) string {
		c := c
		c.IDs = slices.Clone(c.IDs)
		edit(&c)
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		return string(b) + "\n"
	}
	// More ids in the conversation than in the whole request: refused.
	bad := line(func(c *llm.Call) { c.ConversationIDs = len(c.IDs) + 1 })
	if _, err := llm.ReadRecording(strings.NewReader(bad)); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("a call with %d conversation ids of %d: %v", len(c.IDs)+1, len(c.IDs), err)
	}
	bad = line(func(c *llm.Call) { c.ConversationIDs = -1 })
	if _, err := llm.ReadRecording(strings.NewReader(bad)); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("a call with -1 conversation ids: %v", err)
	}
	// An id lost from the conversation's list: the digests still match, the
	// ids cannot be paired.
	lost, err := llm.ReadRecording(strings.NewReader(line(func(c *llm.Call) {
		c.IDs = c.IDs[1:]
		c.ConversationIDs--
	})))
	if err != nil {
		t.Fatal(err)
	}
	noPanic(t, "replaying a call that lost an id", func() {
		_, err := llm.Replay(lost).Generate(context.Background(), request("agent-5", task2, art2, "hello agent-5"))
		if !errors.Is(err, llm.ErrReplayMismatch) || !strings.Contains(err.Error(), "call 0 of agent-5") {
			t.Errorf("replaying a call that lost an id: %v", err)
		}
	})
}

// TestRecorder_ModelPanics checks that a call whose model panicked is
// recorded, as a failure, and the panic goes on to the caller: a society
// recovers it and goes on calling, and a missing index would make the whole
// recording unreadable.
func TestRecorder_ModelPanics(t *testing.T) {
	m := llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
		if req.Messages[0].Content == "boom" {
			panic("the model broke")
		}
		return quoting.Generate(ctx, req)
	})
	var buf bytes.Buffer
	r := llm.Record(m, &buf)
	ctx := context.Background()
	r.Generate(ctx, request("agent-1", task1, art1, "x"))
	func() {
		defer func() {
			if p := recover(); p != "the model broke" {
				t.Errorf("recovered %v, want the model's panic", p)
			}
		}()
		r.Generate(ctx, request("agent-1", task1, art1, "boom"))
	}()
	r.Generate(ctx, request("agent-1", task1, art1, "y"))
	rec, err := llm.ReadRecording(&buf)
	if err != nil {
		t.Fatalf("the recording cannot be read: %v", err)
	}
	calls := rec.Calls("agent-1")
	if len(calls) != 3 || calls[1].Response != nil || !strings.Contains(calls[1].Err, "the model broke") {
		t.Fatalf("calls %+v, want 3, the second failed with the panic", calls)
	}
	// The replay gives the failure back as an error, and goes on.
	rp := llm.Replay(rec)
	for i, text := range []string{"x", "boom", "y"} {
		var err error
		noPanic(t, "replaying a panic", func() { _, err = rp.Generate(ctx, request("agent-1", task2, art2, text)) })
		if (err != nil) != (i == 1) || i == 1 && (!strings.Contains(err.Error(), "the model broke") || llm.IsTransient(err)) {
			t.Errorf("replayed call %d: %v", i, err)
		}
	}
}

// TestReplay_PastDeadline checks that a call recorded as failed past its
// deadline fails again once the live call's deadline passes, with the
// recorded text, wrapping the live context's error; at once when the live
// call has no deadline.
func TestReplay_PastDeadline(t *testing.T) {
	slow := llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
		<-ctx.Done()
		return nil, fmt.Errorf("slow: %w", ctx.Err())
	})
	var buf bytes.Buffer
	ctx, cancel := context.WithDeadline(context.Background(), time.Now())
	defer cancel()
	llm.Record(slow, &buf).Generate(ctx, request("agent-1", task1, art1, "x"))
	rec, err := llm.ReadRecording(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if c := rec.Calls("agent-1")[0]; !c.PastDeadline || c.ErrKind != "deadline_exceeded" {
		t.Fatalf("recorded %+v, want a call past its deadline", c)
	}

	// The replay waits for the live call's deadline.
	deadline := time.Now().Add(100 * time.Millisecond)
	live, stop := context.WithDeadline(context.Background(), deadline)
	defer stop()
	_, err = llm.Replay(rec).Generate(live, request("agent-2", task2, art2, "x"))
	if time.Now().Before(deadline) {
		t.Errorf("the replay returned %v before the live call's deadline", err)
	}
	if err == nil || err.Error() != "slow: context deadline exceeded" || !errors.Is(err, context.DeadlineExceeded) || llm.IsTransient(err) {
		t.Errorf("replayed past its deadline: %v", err)
	}
	// And returns when the live call is cancelled first.
	live, stop = context.WithDeadline(context.Background(), time.Now().Add(hangGuard))
	go stop()
	if _, err = llm.Replay(rec).Generate(live, request("agent-2", task2, art2, "x")); !errors.Is(err, context.Canceled) {
		t.Errorf("replayed past its deadline, cancelled: %v", err)
	}

	// Without a deadline, the replay fails at once.
	_, err = llm.Replay(rec).Generate(context.Background(), request("agent-2", task2, art2, "x"))
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		t.Errorf("replayed without a deadline: %v", err)
	}
}

// TestNilRequest checks that a nil request is refused as a bad request by a
// Recorder and a Replayer, as by the adapters, and panics neither.
func TestNilRequest(t *testing.T) {
	var buf bytes.Buffer
	rec := record(t, quoting, request("agent-1", task1, art1, "x"))
	for name, m := range map[string]llm.Model{
		"recorder": llm.Record(quoting, &buf),
		"replayer": llm.Replay(rec),
		"fork":     llm.Fork(rec, quoting, nil),
	} {
		noPanic(t, name, func() {
			if _, err := m.Generate(context.Background(), nil); !errors.Is(err, llm.ErrBadRequest) {
				t.Errorf("%s: %v, want llm.ErrBadRequest", name, err)
			}
		})
	}
	if buf.Len() != 0 {
		t.Errorf("the recorder wrote %q for a nil request", buf.String())
	}
}

// TestReplay_Concurrent replays many agents at once, under other ids than
// recorded: each gets its own recorded answers, in order.
func TestReplay_Concurrent(t *testing.T) {
	var reqs []*llm.Request
	for i := range 5 {
		for a := range 8 {
			reqs = append(reqs, request(fmt.Sprint("agent-", 20+a), task1, art1, fmt.Sprintf("call %d of agent-%d", i, 20+a)))
		}
	}
	r := llm.Replay(record(t, quoting, reqs...))
	var wg sync.WaitGroup
	for a := range 8 {
		wg.Go(func() {
			agent := fmt.Sprint("agent-", 30+a)
			for i := range 5 {
				req := request(agent, task2, art2, fmt.Sprintf("call %d of %s", i, agent))
				got, err := r.Generate(context.Background(), req)
				want, _ := quoting.Generate(context.Background(), req)
				if diff := cmp.Diff(want, got); err != nil || diff != "" {
					t.Errorf("call %d of %s: %v (-live model +replay):\n%s", i, agent, err, diff)
				}
			}
		})
	}
	wg.Wait()
	if r.Replayed() != 40 {
		t.Errorf("replayed %d calls, want 40", r.Replayed())
	}
}
