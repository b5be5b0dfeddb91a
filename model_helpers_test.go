package agentsociety_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	as "agentsociety"
	"agentsociety/llm"
	"agentsociety/store"
)

// mtTimeout bounds every wait of the model-driven tests: they wait on
// channels, never sleep, and only a broken library makes them time out.
const mtTimeout = 10 * time.Second

// mtRecv returns the next value from ch, failing the test after mtTimeout.
func mtRecv[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(mtTimeout):
		t.Fatalf("timed out after %v waiting for %s", mtTimeout, what)
	}
	panic("unreachable")
}

// mtStore is a store that records every change the society makes, so that a
// test can say exactly what a refused operation did not do.
type mtStore struct {
	store.Store
	mu       sync.Mutex
	changes  []store.Change
	puts     []store.Artifact
	finished chan string // ids of handled messages, as their handling ends
}

func newMTStore() *mtStore {
	return &mtStore{Store: store.NewMemory(), finished: make(chan string, 4096)}
}

func (m *mtStore) Apply(ctx context.Context, c store.Change) error {
	if err := m.Store.Apply(ctx, c); err != nil {
		return err
	}
	m.mu.Lock()
	m.changes = append(m.changes, c)
	m.mu.Unlock()
	for _, id := range c.Finished {
		select {
		case m.finished <- id:
		default:
		}
	}
	return nil
}

func (m *mtStore) PutArtifact(ctx context.Context, a store.Artifact, data []byte) error {
	if err := m.Store.PutArtifact(ctx, a, data); err != nil {
		return err
	}
	m.mu.Lock()
	m.puts = append(m.puts, a)
	m.mu.Unlock()
	return nil
}

// mark returns a position in the record of changes, for since.
func (m *mtStore) mark() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.changes)
}

func (m *mtStore) since(mark int) []store.Change {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.changes[mark:])
}

func (m *mtStore) artifacts() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.puts)
}

// waitFinished waits until the handling of message id has ended: its
// handler returned and the society recorded it.
func (m *mtStore) waitFinished(t testing.TB, id string) {
	t.Helper()
	for {
		if got := mtRecv(t, m.finished, "the end of the handling of "+id); got == id {
			return
		}
	}
}

// assertOnly fails unless the changes since mark are exactly the acceptance
// of the messages in accepted and the end of their handling: no role, agent,
// contact or request was recorded, and no other message was accepted.
func (m *mtStore) assertOnly(t testing.TB, mark int, accepted ...as.Message) {
	t.Helper()
	want := map[string]bool{}
	for _, msg := range accepted {
		want[msg.ID] = true
	}
	for _, c := range m.since(mark) {
		if len(c.Roles)+len(c.Agents)+len(c.Contacts)+len(c.Requests) > 0 {
			t.Errorf("the society recorded a change to the organisation: %+v", c)
		}
		for _, msg := range c.Accepted {
			if !want[msg.ID] {
				t.Errorf("the society accepted an unexpected message %s from %s to %s (%s): %s", msg.ID, msg.From, msg.To, msg.Type, msg.Payload)
			}
		}
		for _, id := range c.Finished {
			if !want[id] {
				t.Errorf("the society finished an unexpected message %s", id)
			}
		}
	}
}

// mtState is what the society shows of its organisation.
type mtState struct {
	Roles    []as.Role
	Agents   []as.Agent
	Contacts map[string][]as.Contact
}

func mtSnapshot(t testing.TB, s *as.Society) mtState {
	t.Helper()
	st := mtState{Roles: s.Roles(), Agents: s.Agents(), Contacts: map[string][]as.Contact{}}
	ids := []string{as.RootID, as.UserID}
	for _, a := range st.Agents {
		ids = append(ids, a.ID)
	}
	for _, id := range ids {
		c, err := s.Contacts(id)
		if err != nil {
			t.Fatal(err)
		}
		st.Contacts[id] = c
	}
	return st
}

func mtSameState(t testing.TB, before mtState, s *as.Society) {
	t.Helper()
	after := mtSnapshot(t, s)
	if !reflect.DeepEqual(before.Roles, after.Roles) {
		t.Errorf("roles changed:\nbefore %+v\nafter  %+v", before.Roles, after.Roles)
	}
	if !reflect.DeepEqual(before.Agents, after.Agents) {
		t.Errorf("agents changed:\nbefore %+v\nafter  %+v", before.Agents, after.Agents)
	}
	if !reflect.DeepEqual(before.Contacts, after.Contacts) {
		t.Errorf("contacts changed:\nbefore %+v\nafter  %+v", before.Contacts, after.Contacts)
	}
}

// mtSpawn has root create (or reuse) a role and spawn an agent on it for
// task, driven by beh (nil: the society's model).
func mtSpawn(t testing.TB, s *as.Society, task, roleName, rolePrompt string, beh as.Behavior) as.Agent {
	t.Helper()
	ctx := context.Background()
	root, err := s.Actor(as.RootID)
	if err != nil {
		t.Fatal(err)
	}
	root = root.WithTask(task)
	role, _, err := root.CreateRole(ctx, as.RoleSpec{Name: roleName, Prompt: rolePrompt})
	if err != nil {
		t.Fatal(err)
	}
	a, _, err := root.SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: validBrief(), Behavior: beh})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// mtSendAs sends text from agent from to agent to, on from's task.
func mtSendAs(t testing.TB, s *as.Society, from, to, text string) as.Message {
	t.Helper()
	x, err := s.Actor(from)
	if err != nil {
		t.Fatal(err)
	}
	if a, ok := s.Agent(to); ok && from == as.RootID {
		x = x.WithTask(a.TaskID)
	}
	m, err := x.SendText(context.Background(), to, text)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// mtInbox is a Go behaviour that hands every message it gets to a channel.
type mtInbox chan as.Message

func (c mtInbox) HandleMessage(_ context.Context, _ *as.Actor, m as.Message) error {
	c <- m
	return nil
}

// mtToolNames returns the names of the tools a request offered.
func mtToolNames(req llm.Request) []string {
	var out []string
	for _, tl := range req.Tools {
		out = append(out, tl.Name)
	}
	return out
}

// mtToolError is a failed tool result as the model reads it.
type mtToolError struct {
	Error         string   `json:"error"`
	Message       string   `json:"message"`
	MissingFields []string `json:"missing_fields"`
	MessageType   string   `json:"message_type"`
	AgentID       string   `json:"agent_id"`
}

// mtLastResult returns the tool result that ends req, with the call it
// answers, failing the test if req does not end with one.
func mtLastResult(t testing.TB, req llm.Request) (llm.ToolCall, llm.Message) {
	t.Helper()
	n := len(req.Messages)
	if n < 2 || req.Messages[n-1].Role != llm.RoleTool {
		t.Fatalf("request for %s does not end with a tool result: %+v", req.Agent, req.Messages)
	}
	res := req.Messages[n-1]
	for i := n - 2; i >= 0; i-- {
		for _, c := range req.Messages[i].ToolCalls {
			if c.ID == res.ToolCallID {
				if req.Messages[i].Role != llm.RoleAssistant {
					t.Fatalf("tool call %s is in a %s message", c.ID, req.Messages[i].Role)
				}
				return c, res
			}
		}
	}
	t.Fatalf("tool result %q answers no call of the request", res.ToolCallID)
	return llm.ToolCall{}, llm.Message{}
}

// mtLogRecorder is a slog.Handler that passes each record, flattened, to a
// channel.
type mtLogRecorder struct{ ch chan map[string]string }

func (r mtLogRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r mtLogRecorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r mtLogRecorder) WithGroup(string) slog.Handler            { return r }
func (r mtLogRecorder) Handle(_ context.Context, rec slog.Record) error {
	m := map[string]string{"_message": rec.Message, "_level": rec.Level.String()}
	rec.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value.String(); return true })
	select {
	case r.ch <- m:
	default:
	}
	return nil
}

// mtJSON marshals v, failing the test if it does not encode.
func mtJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
