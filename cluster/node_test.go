package cluster_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	as "agentsociety"
	"agentsociety/cluster"
	"agentsociety/internal/script"
	"agentsociety/llm"
	"agentsociety/store"
	"agentsociety/store/natsstore"
	"agentsociety/store/natsstore/natstest"
)

// echo is a society whose root answers each message to user with its
// text.
func echo() as.Config {
	return as.Config{Root: as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
		_, err := self.SendText(ctx, as.UserID, m.Text())
		return err
	})}
}

// Every message to user reaches the callbacks and the waiters of every
// node, in the order the leader sent them, whichever node the calls were
// made on.
func TestUserMessages_ReachEveryNode(t *testing.T) {
	ctx := hangGuard(t)
	url := natstest.Server(t)
	name := newClusterName()
	const n = 20
	var nodes []*cluster.Node
	got := make([][]string, 3)
	var mu sync.Mutex
	for i := range 3 {
		node := join(t, url, name, fmt.Sprintf("n%d", i), cluster.Options{Config: echo()})
		node.OnUserMessage(func(m as.Message) {
			mu.Lock()
			got[i] = append(got[i], m.Text())
			mu.Unlock()
		})
		nodes = append(nodes, node)
	}
	task, err := nodes[0].SubmitRequirement(ctx, "m0")
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < n; i++ {
		if _, err := nodes[i%3].SendTextToAgent(ctx, as.RootID, fmt.Sprintf("m%d", i), task); err != nil {
			t.Fatal(err)
		}
	}
	for _, node := range nodes {
		for i := range n {
			m, err := node.WaitForUserMessage(ctx, func(m as.Message) bool { return m.Text() == fmt.Sprintf("m%d", i) })
			if err != nil {
				t.Fatalf("node %s waiting for m%d: %v", node.ID(), i, err)
			}
			if m.From != as.RootID {
				t.Errorf("m%d is from %s", i, m.From)
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for i, list := range got {
		want := make([]string, n)
		for j := range want {
			want[j] = fmt.Sprintf("m%d", j)
		}
		if strings.Join(list, " ") != strings.Join(want, " ") {
			t.Errorf("node n%d's callback got %v, want %v", i, list, want)
		}
	}
}

// A node whose connection is closed, or whose server is gone, is refused
// by Join at once; a server that does not answer is an error within
// Join's context.
func TestJoin_NATSUnreachable(t *testing.T) {
	ns, err := natstest.Start(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(ns.ClientURL(), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	natstest.Stop(ns)
	waitFor(t, hangGuard(t), "the connection to notice", func() bool { return !nc.IsConnected() })
	if _, err := cluster.Join(t.Context(), nc, cluster.Options{Cluster: "c", NodeID: "n"}); err == nil || !strings.Contains(err.Error(), "not connected") {
		t.Fatalf("Join on a connection to a stopped server: %v, want an error saying it is not connected", err)
	}
	nc.Close()
	if _, err := cluster.Join(t.Context(), nc, cluster.Options{Cluster: "c", NodeID: "n"}); err == nil {
		t.Fatal("Join on a closed connection: no error")
	}

	// A server without JetStream answers nothing JetStream: the error
	// comes when Join's context ends.
	plain, err := natstest.StartWithout(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer natstest.Stop(plain)
	nc2 := connect(t, plain.ClientURL())
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	if _, err := cluster.Join(ctx, nc2, cluster.Options{Cluster: "c", NodeID: "n"}); err == nil {
		t.Fatal("Join on a server without JetStream: no error")
	}
}

// A node whose settings differ from the cluster's is refused, with an
// error naming the first setting that differs; one with the same settings
// joins.
func TestJoin_IncompatibleConfiguration(t *testing.T) {
	url := natstest.Server(t)
	name := newClusterName()
	join(t, url, name, "n0", cluster.Options{Config: as.Config{MaxAgents: 5}})
	for _, c := range []struct {
		opts cluster.Options
		want string
	}{
		{cluster.Options{Config: as.Config{MaxAgents: 6}}, "MaxAgents"},
		{cluster.Options{Config: as.Config{MaxAgents: 5, ContactPolicy: as.ContactStrict}}, "ContactPolicy"},
		{cluster.Options{Config: as.Config{MaxAgents: 5}, LeaseTTL: 2 * time.Second}, "LeaseTTL"},
		{cluster.Options{Config: as.Config{MaxAgents: 5, Language: as.English}}, "Language"},
	} {
		opts := c.opts
		opts.Cluster, opts.NodeID, opts.Storage = name, "n1", jetstream.MemoryStorage
		if opts.LeaseTTL == 0 {
			opts.LeaseTTL = time.Second
		}
		_, err := cluster.Join(t.Context(), connect(t, url), opts)
		if !errors.Is(err, cluster.ErrIncompatible) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Join with a different %s: %v, want ErrIncompatible naming it", c.want, err)
		}
	}
	join(t, url, name, "n1", cluster.Options{Config: as.Config{MaxAgents: 5}})
}

// A node that joins with the id of a live node of the cluster is refused
// with an error wrapping ErrIncompatible that names the id: two nodes of
// one id would both serve that id's calls. The id is free again once its
// node has left, and once the heartbeat of a node that stopped without
// leaving has expired.
func TestJoin_DuplicateNodeID(t *testing.T) {
	ctx := hangGuard(t)
	url := natstest.Server(t)
	name := newClusterName()
	first := join(t, url, name, "n0", cluster.Options{Config: echo()})
	waitFor(t, ctx, "n0 to lead", func() bool { return first.Leader() == "n0" })
	opts := withDefaults(cluster.Options{Cluster: name, NodeID: "n0", LeaseTTL: time.Second, Config: echo()})
	opts.Config.Logger = quiet
	if n, err := cluster.Join(ctx, connect(t, url), opts); !errors.Is(err, cluster.ErrIncompatible) || !strings.Contains(err.Error(), `"n0"`) {
		if err == nil {
			n.Close()
		}
		t.Fatalf("Join with the id of a live node: %v, want ErrIncompatible naming the id", err)
	}
	if first.Leader() != "n0" {
		t.Fatalf("the live node n0 sees %q lead, want itself", first.Leader())
	}
	first.Close()
	join(t, url, name, "n0", cluster.Options{Config: echo()}).Close()

	// A node that stopped without leaving leaves its heartbeat until it
	// expires (here written as a dead node's last): a node of its id
	// joins once it has.
	kv := leases(t, url, name)
	if _, err := kv.PutString(ctx, "node.dead", "dead"); err != nil {
		t.Fatal(err)
	}
	join(t, url, name, "dead", cluster.Options{Config: echo()})
}

// A node knows the cluster's leader once Join has returned: a user call
// it sends at once is known to have gone to that leader, so that the call
// fails as an unknown outcome if the leader then dies, rather than waiting
// for ever (TestUserCall_LeaderDiesWithTheCall).
func TestJoin_KnowsTheLeader(t *testing.T) {
	ctx := hangGuard(t)
	url := natstest.Server(t)
	name := newClusterName()
	a := join(t, url, name, "a", cluster.Options{Config: echo()})
	waitFor(t, ctx, "a to lead", func() bool { return a.Leader() == "a" })
	for i := range 20 {
		b := join(t, url, name, fmt.Sprintf("b%d", i), cluster.Options{Config: echo()})
		if got := b.Leader(); got != "a" {
			t.Fatalf("Leader() just after Join: %q, want a", got)
		}
		b.Close()
	}
}

// A user call made while no node can lead fails, when its context ends,
// with ErrNoLeader.
func TestUserCall_NoLeader(t *testing.T) {
	url := natstest.Server(t)
	name := newClusterName()
	// A lease held by a node that never serves: nobody leads until it
	// expires.
	nc := connect(t, url)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.CreateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: name + "_leases", TTL: time.Minute, Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(t.Context(), "leader", []byte("ghost")); err != nil {
		t.Fatal(err)
	}
	node := join(t, url, name, "n0", cluster.Options{Config: echo(), LeaseTTL: time.Minute})
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if _, err := node.SubmitRequirement(ctx, "hello"); !errors.Is(err, cluster.ErrNoLeader) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("SubmitRequirement with no leader: %v, want ErrNoLeader and the deadline", err)
	}
	waitFor(t, hangGuard(t), "the node to see the ghost leader", func() bool { return node.Leader() == "ghost" })
}

// A leader deposed without knowing it (here: another store claims the
// cluster's bucket, as a new leader's does) has its next write refused by
// the server: the call fails with a store error, changes nothing, and the
// node stops leading; a leader then takes over from the bucket, and calls
// are accepted again. The node may also learn it was deposed first from
// the event log, which the claim marks too, and lead again before the
// call: the call then succeeds, through a store that claimed the bucket
// after the intruder, since the server refuses any other's writes.
func TestDeposedLeader_IsFenced(t *testing.T) {
	ctx := hangGuard(t)
	url := natstest.Server(t)
	name := newClusterName()
	node := join(t, url, name, "n0", cluster.Options{Config: echo()})
	task, err := node.SubmitRequirement(ctx, "before")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := node.WaitForUserMessage(ctx, nil); err != nil {
		t.Fatal(err)
	}

	intruder, err := natsstore.New(ctx, natsstore.Options{URL: url, Bucket: name, Fence: true, Storage: jetstream.MemoryStorage, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer intruder.Close()
	_, err = node.SendTextToAgent(ctx, as.RootID, "refused", task)
	if err != nil {
		if !errors.Is(err, as.ErrStore) || !strings.Contains(err.Error(), natsstore.ErrFenced.Error()) {
			t.Fatalf("a write by the deposed leader: %v, want a store error saying it is fenced", err)
		}
		st, err := intruder.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range st.Pending {
			if strings.Contains(string(m.Payload), "refused") {
				t.Fatalf("the refused message is in the bucket: %+v", m)
			}
		}
	}
	// The node steps down, and leads again from the bucket, claiming it.
	waitFor(t, ctx, "a leader to accept calls again", func() bool {
		_, err := node.SendTextToAgent(ctx, as.RootID, "after", task)
		return err == nil
	})
	if m, err := node.WaitForUserMessage(ctx, func(m as.Message) bool { return m.Text() == "after" }); err != nil {
		t.Fatalf("waiting for the answer after the failover: %v (%v)", err, m)
	}
	// The new leader claimed the bucket over the intruder.
	err = intruder.Apply(ctx, store.Change{States: []store.StateEntry{{Scope: "s", Key: "k", Value: []byte(`1`), Writer: "root", UpdatedAt: time.Now()}}})
	if !errors.Is(err, natsstore.ErrFenced) {
		t.Fatalf("the intruder's write after the node led again: %v, want ErrFenced", err)
	}
}

// Close leaves no goroutine of the node behind.
func TestClose_LeavesNoGoroutine(t *testing.T) {
	ctx := hangGuard(t)
	url := natstest.Server(t)
	nc := connect(t, url)
	n, err := cluster.Join(ctx, nc, cluster.Options{Cluster: newClusterName(), NodeID: "n0", LeaseTTL: time.Second,
		Storage: jetstream.MemoryStorage, Config: echo()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.SubmitRequirement(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := n.WaitForUserMessage(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	// The server runs in this process, and its goroutines for the
	// cluster's streams stay, as do those of the connection, which is the
	// host's: look for the node's and its society's.
	waitFor(t, ctx, "the node's goroutines to end", func() bool {
		buf := make([]byte, 1<<20)
		stacks := string(buf[:runtime.Stack(buf, true)])
		if d, _ := ctx.Deadline(); time.Until(d) < 100*time.Millisecond {
			t.Logf("%s", stacks)
		}
		return !strings.Contains(stacks, "agentsociety/cluster.(") && !strings.Contains(stacks, "agentsociety.(*Society)")
	})
	if _, err := n.WaitForUserMessage(ctx, nil); !errors.Is(err, as.ErrClosed) {
		t.Fatalf("WaitForUserMessage after Close: %v, want ErrClosed", err)
	}
}

// A host tool of Options.Tools runs on the node that owns the calling
// agent, the one that makes its model calls; its result, and an error
// with its code, reach the model.
func TestHostTool_RunsOnTheAgentsNode(t *testing.T) {
	ctx := hangGuard(t)
	url := natstest.Server(t)
	name := newClusterName()
	var mu sync.Mutex
	modelOn := map[string]string{} // agent -> node of its model calls
	opts := func(id string) cluster.Options {
		model := llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
			mu.Lock()
			modelOn[req.Agent] = id
			mu.Unlock()
			last := req.Messages[len(req.Messages)-1]
			switch {
			case last.Role != llm.RoleTool:
				return script.Call("where", map[string]string{"fail": "no"}), nil
			case strings.Contains(last.Content, "invalid_argument"):
				return script.Call("send_message", map[string]any{"to": as.UserID, "payload": map[string]string{"text": last.Content}, "end_turn": true}), nil
			default:
				return script.Call("where", map[string]string{"fail": "yes"}), nil
			}
		})
		return cluster.Options{
			Config: as.Config{Model: model},
			Tools: []cluster.Tool{{Name: "where", Description: "where it runs", Handler: func(ctx context.Context, c cluster.ToolCall) (any, error) {
				var args struct{ Fail string }
				json.Unmarshal(c.Args, &args)
				if args.Fail == "yes" {
					return nil, &as.Error{Code: as.ErrInvalidArgument, Message: "ran on " + id + " for " + c.Agent}
				}
				return map[string]string{"node": id}, nil
			}}},
		}
	}
	var nodes []*cluster.Node
	for i := range 3 {
		id := fmt.Sprintf("n%d", i)
		nodes = append(nodes, join(t, url, name, id, opts(id)))
	}
	if _, err := nodes[1].SubmitRequirement(ctx, "where are you?"); err != nil {
		t.Fatal(err)
	}
	m, err := nodes[2].WaitForUserMessage(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	want := "ran on " + modelOn[as.RootID] + " for root"
	mu.Unlock()
	if !strings.Contains(m.Text(), want) || !strings.Contains(m.Text(), "invalid_argument") {
		t.Fatalf("root reported %q, want the tool's error with its code, saying %q", m.Text(), want)
	}
}

// The host calls beyond messages (tasks, usage, budgets, termination and
// the event log) work on any node, through the leader, with the codes a
// Society's give; a call passes the host's trace context on.
func TestHostCalls_OnAnyNode(t *testing.T) {
	ctx := hangGuard(t)
	url := natstest.Server(t)
	name := newClusterName()
	a := join(t, url, name, "n0", cluster.Options{Config: echo()})
	b := join(t, url, name, "n1", cluster.Options{Config: echo()})
	const traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	task, err := a.SubmitRequirement(as.WithTrace(ctx, traceparent), "hello")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.WaitForUserMessage(ctx, func(m as.Message) bool { return m.TaskID == task }); err != nil {
		t.Fatal(err)
	}
	for _, n := range []*cluster.Node{a, b} {
		tasks, err := n.Tasks(ctx)
		if err != nil || len(tasks) != 1 || tasks[0].ID != task {
			t.Fatalf("%s: Tasks = %+v, %v; want the one task", n.ID(), tasks, err)
		}
		if err := n.SetBudget(ctx, task, as.Budget{ModelCalls: 7}); err != nil {
			t.Fatalf("%s: SetBudget: %v", n.ID(), err)
		}
		if u, ok, err := n.Usage(ctx, task); err != nil || !ok || u.Budget.ModelCalls != 7 {
			t.Fatalf("%s: Usage = %+v, %v, %v; want the budget set", n.ID(), u, ok, err)
		}
		if _, ok, err := n.Usage(ctx, "no-such-task"); err != nil || ok {
			t.Fatalf("%s: Usage of an unknown task: %v, %v", n.ID(), ok, err)
		}
		if err := n.SetBudget(ctx, task, as.Budget{ModelCalls: -1}); !errors.Is(err, as.ErrInvalidArgument) {
			t.Fatalf("%s: a negative budget: %v, want ErrInvalidArgument", n.ID(), err)
		}
		if err := n.Terminate(ctx, "agent-404"); !errors.Is(err, as.ErrAgentNotFound) {
			t.Fatalf("%s: Terminate of an unknown agent: %v, want ErrAgentNotFound", n.ID(), err)
		}
		events, err := n.Events(ctx, 1, 0)
		if err != nil || len(events) != 1 {
			t.Fatalf("%s: Events(1, 0) = %d events, %v; want one (a limit under 1 is 1)", n.ID(), len(events), err)
		}
		events, err = n.Events(ctx, 1, cluster.MaxEvents)
		if err != nil || len(events) < 2 || events[0].Seq != 1 || events[0].Kind != as.EventTaskSubmitted || events[1].Kind != as.EventMessageAccepted || events[1].Message.Text() != "hello" {
			t.Fatalf("%s: Events = %+v, %v; want the task submitted, then its message", n.ID(), events, err)
		}
		if events[0].Trace != traceparent || events[1].Trace != traceparent {
			t.Fatalf("%s: the requirement's events carry traces %q and %q, want the host's %q, passed on by the node", n.ID(), events[0].Trace, events[1].Trace, traceparent)
		}
		for i, e := range events[1:] {
			if e.Seq != events[i].Seq+1 {
				t.Fatalf("%s: event %d follows %d", n.ID(), e.Seq, events[i].Seq)
			}
		}
	}
	// A task submitted through a node with a budget has it; a negative one
	// is refused, and nothing is sent.
	budgeted, err := b.SubmitRequirement(ctx, "with a budget", cluster.WithBudget(as.Budget{ModelCalls: 5}))
	if err != nil {
		t.Fatalf("SubmitRequirement with a budget: %v", err)
	}
	if u, ok, err := a.Usage(ctx, budgeted); err != nil || !ok || u.Budget.ModelCalls != 5 {
		t.Fatalf("Usage of a task submitted with a budget = %+v, %v, %v; want its budget", u, ok, err)
	}
	if _, err := b.SubmitRequirement(ctx, "with a negative budget", cluster.WithBudget(as.Budget{ModelCalls: -1})); !errors.Is(err, as.ErrInvalidArgument) {
		t.Fatalf("SubmitRequirement with a negative budget: %v, want ErrInvalidArgument", err)
	}
	if tasks, err := a.Tasks(ctx); err != nil || len(tasks) != 2 {
		t.Fatalf("Tasks = %+v, %v; want the two submitted", tasks, err)
	}
}

// TestPlacementIsEven: agents spread over the live nodes about evenly,
// whatever the nodes are called: of 3,000 agents, each of n nodes owns
// within a fifth of 3,000/n.
func TestPlacementIsEven(t *testing.T) {
	for _, nodes := range [][]string{{"n0", "n1"}, {"n0", "n1", "n2"}, {"node-a", "node-b", "node-c"}, {"n1", "n2", "n3", "n4", "n5"}} {
		owned := map[string]int{}
		const agents = 3000
		for i := 1; i <= agents; i++ {
			id := fmt.Sprintf("agent-%d", i)
			best := ""
			for _, n := range nodes {
				if best == "" || cluster.Rank(id, n) > cluster.Rank(id, best) {
					best = n
				}
			}
			owned[best]++
		}
		fair := agents / len(nodes)
		for _, n := range nodes {
			if got := owned[n]; got < fair*4/5 || got > fair*6/5 {
				t.Errorf("nodes %v: %s owns %d of %d agents, want about %d: %v", nodes, n, got, agents, fair, owned)
			}
		}
	}
}

// Node.OnUserMessage(nil), as Society.OnUserMessage(nil), registers
// nothing: it registered a callback that panicked on every message to
// user, each panic logged at Error level.
func TestOnUserMessage_NilOnANode(t *testing.T) {
	ctx := hangGuard(t)
	url := natstest.Server(t)
	log := &logged{}
	opts := cluster.Options{Config: echo()}
	opts.Config.Logger = slog.New(log)
	n := join(t, url, newClusterName(), "a", opts)
	n.OnUserMessage(nil)() // registers nothing; unregistering it is a no-op
	n.OnUserMessage(nil)
	if _, err := n.SubmitRequirement(ctx, "hello"); err != nil {
		t.Fatal(err)
	}
	if _, err := n.WaitForUserMessage(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if log.has("callback panicked") {
		t.Error("a nil OnUserMessage callback panicked on a message to user")
	}
}

// A node restarted under its id, on a cluster whose lease time is longer
// than the 10 s that Join gives itself without a deadline, waits out its
// old heartbeat and joins: Join's own bound is at least two lease times.
func TestJoin_RestartedNodeWithALongLease(t *testing.T) {
	ctx := hangGuard(t)
	url := natstest.Server(t)
	name := newClusterName()
	const lease = 12 * time.Second
	first := join(t, url, name, "n0", cluster.Options{LeaseTTL: lease, Config: echo()})
	defer first.Close()
	kv := leases(t, url, name)
	if _, err := kv.PutString(ctx, "node.dead", "dead"); err != nil { // a dead node's last heartbeat
		t.Fatal(err)
	}
	opts := withDefaults(cluster.Options{Cluster: name, NodeID: "dead", LeaseTTL: lease, Config: echo()})
	opts.Config.Logger = quiet
	n, err := cluster.Join(context.Background(), connect(t, url), opts) // no deadline: Join's own bound
	if err != nil {
		t.Fatalf("Join of a restarted node, lease time %v: %v", lease, err)
	}
	n.Close()
}
