package cluster_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	as "agentsociety"
	"agentsociety/cluster"
	"agentsociety/internal/demo"
	"agentsociety/llm"
	"agentsociety/store/natsstore/natstest"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// clusters numbers the clusters of a test process, so that each test or
// check has a cluster of its own on a shared server.
var clusters atomic.Int64

func newClusterName() string { return fmt.Sprintf("c%d", clusters.Add(1)) }

// tb is what the helpers need of a *testing.T or a *rapid.T.
type tb interface {
	Helper()
	Fatalf(format string, args ...any)
	Fatal(args ...any)
	Cleanup(func())
	Context() context.Context
}

// connect connects to url, the connection closed when t ends.
func connect(t tb, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// leases opens the leases bucket of cluster name (see docs/distributed.md
// §2) on a connection of its own.
func leases(t tb, url, name string) jetstream.KeyValue {
	t.Helper()
	js, err := jetstream.New(connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(t.Context(), name+"_leases")
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// join joins a node to name on a connection of its own, closed when t
// ends.
func join(t tb, url, name, id string, opts cluster.Options) *cluster.Node {
	t.Helper()
	opts.Cluster, opts.NodeID = name, id
	if opts.LeaseTTL == 0 {
		opts.LeaseTTL = time.Second
	}
	if opts.Storage == 0 {
		opts.Storage = jetstream.MemoryStorage
	}
	if opts.Config.Logger == nil {
		opts.Config.Logger = quiet
	}
	n, err := cluster.Join(t.Context(), connect(t, url), opts)
	if err != nil {
		t.Fatalf("Join(%s): %v", id, err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// hangGuard bounds a test that waits on conditions.
func hangGuard(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// served records which node made which agent's model calls.
type served struct {
	mu    sync.Mutex
	calls map[string]map[string]int // agent -> node -> calls
}

func (s *served) model(node string, m llm.Model) llm.Model {
	return llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
		s.mu.Lock()
		if s.calls == nil {
			s.calls = map[string]map[string]int{}
		}
		if s.calls[req.Agent] == nil {
			s.calls[req.Agent] = map[string]int{}
		}
		s.calls[req.Agent][node]++
		s.mu.Unlock()
		return m.Generate(ctx, req)
	})
}

// org is what the quick start leaves, with its random ids and times
// left out.
type org struct {
	Roles    []string            // name, creator's role
	Agents   []string            // id, role, parent
	Contacts map[string][]string // agent -> id, role, source
	Reply    string
}

var refRe = regexp.MustCompile(regexp.QuoteMeta(as.ArtifactRefPrefix) + `[A-Za-z0-9_\-]+`)

func orgOf(roles []as.Role, agents []as.Agent, contacts func(id string) []as.Contact, reply as.Message) org {
	var o org
	roleName := map[string]string{}
	for _, r := range roles {
		roleName[r.ID] = r.Name
	}
	agentRole := map[string]string{as.RootID: "root", as.UserID: "user"}
	for _, a := range agents {
		agentRole[a.ID] = roleName[a.RoleID]
	}
	for _, r := range roles {
		o.Roles = append(o.Roles, r.ID+" "+r.Name+" by "+agentRole[r.CreatedBy])
	}
	o.Contacts = map[string][]string{}
	for _, a := range agents {
		o.Agents = append(o.Agents, a.ID+" "+roleName[a.RoleID]+" under "+a.ParentID+" "+string(a.Status))
		for _, c := range contacts(a.ID) {
			o.Contacts[a.ID] = append(o.Contacts[a.ID], c.ID+" "+c.Role+" "+string(c.Source))
		}
	}
	o.Reply = reply.From + ": " + refRe.ReplaceAllString(reply.Text(), as.ArtifactRefPrefix+"<id>")
	return o
}

// messagesOf returns the messages events accepted, each as its sender,
// receiver, type and text (artifact ids left out), sorted: turns that run
// at once may send in either order. settled reports whether every message
// accepted was handled.
func messagesOf(events []as.Event) (msgs []string, settled bool) {
	open := map[string]bool{}
	for _, e := range events {
		switch e.Kind {
		case as.EventMessageAccepted:
			m := e.Message
			msgs = append(msgs, m.From+" -> "+m.To+" "+string(m.Type)+": "+refRe.ReplaceAllString(m.Text(), as.ArtifactRefPrefix+"<id>"))
			open[m.ID] = true
		case as.EventMessageHandled:
			delete(open, e.Turn)
		}
	}
	slices.Sort(msgs)
	return msgs, len(open) == 0
}

// The quick start, run on three nodes, leaves the organisation, the
// contacts, the messages and the answer it leaves in one process; the
// requirement is submitted on one node and its answer reaches every node.
func TestQuickStart_AcrossThreeNodes_SameResult(t *testing.T) {
	ctx := hangGuard(t)

	one, err := as.New(ctx, as.Config{Model: demo.Model(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close(context.Background())
	_, reply, err := demo.Run(ctx, one)
	if err != nil {
		t.Fatal(err)
	}
	want := orgOf(one.Roles(), one.Agents(), func(id string) []as.Contact { c, _ := one.Contacts(id); return c }, reply)
	var wantMsgs []string
	waitFor(t, ctx, "one process's messages to be handled", func() bool {
		var events []as.Event
		for e, err := range one.Events(ctx, 1) {
			if err != nil {
				t.Fatal(err)
			}
			events = append(events, e)
		}
		msgs, settled := messagesOf(events)
		wantMsgs = msgs
		return settled
	})

	url := natstest.Server(t)
	name := newClusterName()
	var calls served
	var nodes []*cluster.Node
	for i := range 3 {
		id := fmt.Sprintf("n%d", i)
		nodes = append(nodes, join(t, url, name, id, cluster.Options{Config: as.Config{Model: calls.model(id, demo.Model())}}))
	}
	task, err := nodes[0].SubmitRequirement(ctx, demo.Requirement)
	if err != nil {
		t.Fatal(err)
	}
	answered := func(m as.Message) bool {
		return m.TaskID == task && strings.Contains(m.Text(), as.ArtifactRefPrefix)
	}
	var replies []as.Message
	for _, n := range nodes {
		m, err := n.WaitForUserMessage(ctx, answered)
		if err != nil {
			t.Fatalf("node %s waiting for the answer: %v", n.ID(), err)
		}
		replies = append(replies, m)
	}
	for _, m := range replies[1:] {
		if m.ID != replies[0].ID {
			t.Errorf("the nodes got different answers: %s and %s", replies[0].ID, m.ID)
		}
	}
	on := nodes[2]
	roles, err := on.Roles(ctx)
	if err != nil {
		t.Fatal(err)
	}
	agents, err := on.Agents(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := orgOf(roles, agents, func(id string) []as.Contact {
		c, err := on.Contacts(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}, replies[2])
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("the cluster's organisation differs from one process's (-one +cluster):\n%s", diff)
	}
	_, data, err := on.GetArtifact(ctx, refRe.FindString(replies[1].Text()))
	if err != nil || string(data) != demo.Page {
		t.Fatalf("the answer's artifact: %q, %v", data, err)
	}
	var gotMsgs []string
	waitFor(t, ctx, "the cluster's messages to be handled", func() bool {
		var events []as.Event
		for from := uint64(1); ; {
			page, err := on.Events(ctx, from, cluster.MaxEvents)
			if err != nil {
				t.Fatal(err)
			}
			events = append(events, page...)
			if len(page) < cluster.MaxEvents {
				break
			}
			from = page[len(page)-1].Seq + 1
		}
		msgs, settled := messagesOf(events)
		gotMsgs = msgs
		return settled
	})
	if len(wantMsgs) < 8 {
		t.Fatalf("one process accepted %d messages, want the quick start's 8", len(wantMsgs))
	}
	if diff := cmp.Diff(wantMsgs, gotMsgs); diff != "" {
		t.Fatalf("the cluster's messages differ from one process's (-one +cluster):\n%s", diff)
	}
	calls.mu.Lock()
	t.Logf("model calls by agent and node: %v", calls.calls)
	calls.mu.Unlock()
}

// waitFor polls cond until it holds, failing t if ctx (a hang guard) ends
// first.
func waitFor(t tb, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}
