package cluster_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	as "agentsociety"
	"agentsociety/cluster"
	"agentsociety/store/natsstore"
	"agentsociety/store/natsstore/natstest"
)

// proxy forwards TCP connections to a NATS server until it is cut: then
// it closes them, and refuses new ones until it is mended.
type proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	conns []net.Conn
}

func newProxy(t *testing.T, target string) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: strings.TrimPrefix(target, "nats://")}
	t.Cleanup(func() { ln.Close(); p.setCut(true) })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			if p.cut {
				p.mu.Unlock()
				c.Close()
				continue
			}
			s, err := net.Dial("tcp", p.target)
			if err != nil {
				p.mu.Unlock()
				c.Close()
				continue
			}
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			go func() { io.Copy(s, c); s.Close() }()
			go func() { io.Copy(c, s); c.Close() }()
		}
	}()
	return p
}

func (p *proxy) url() string { return "nats://" + p.ln.Addr().String() }

func (p *proxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for _, c := range p.conns {
			c.Close()
		}
		p.conns = nil
	}
}

// joinBehind joins node id to name through px, on a connection that
// reconnects at once, and returns it with what it logs. The node and its
// connection are closed when t ends.
func joinBehind(t *testing.T, px *proxy, name, id string) (*cluster.Node, *logged) {
	t.Helper()
	nc, err := nats.Connect(px.url(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	log := &logged{}
	opts := cluster.Options{Cluster: name, NodeID: id, LeaseTTL: time.Second, Config: echo()}
	opts.Config.Logger = slog.New(log)
	n, err := cluster.Join(t.Context(), nc, withDefaults(opts))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n, log
}

// logged records the messages a node logs.
type logged struct {
	mu   sync.Mutex
	msgs []string
}

func (l *logged) Enabled(context.Context, slog.Level) bool { return true }
func (l *logged) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logged) WithGroup(string) slog.Handler            { return l }
func (l *logged) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	l.msgs = append(l.msgs, r.Message)
	l.mu.Unlock()
	return nil
}

func (l *logged) has(part string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range l.msgs {
		if strings.Contains(m, part) {
			return true
		}
	}
	return false
}

// A leader that loses its connection says so, stops leading, and another
// node leads on from the bucket: what was accepted before is there, calls
// are taken again, and when the connection is back the node takes work
// and messages to user again.
func TestLeaderLosesItsConnection(t *testing.T) {
	ctx := hangGuard(t)
	url := natstest.Server(t)
	px := newProxy(t, url)
	name := newClusterName()

	a, log := joinBehind(t, px, name, "a")
	waitFor(t, ctx, "a to lead", func() bool { return a.Leader() == "a" })
	b := join(t, url, name, "b", cluster.Options{Config: echo()})

	task, err := b.SubmitRequirement(ctx, "before")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.WaitForUserMessage(ctx, func(m as.Message) bool { return m.Text() == "before" }); err != nil {
		t.Fatal(err)
	}

	px.setCut(true)
	waitFor(t, ctx, "b to lead", func() bool { return b.Leader() == "b" })
	waitFor(t, ctx, "a to log the lost connection", func() bool { return log.has("lost its connection") })
	if _, err := b.SendTextToAgent(ctx, as.RootID, "during", task); err != nil {
		t.Fatal(err)
	}
	if _, err := b.WaitForUserMessage(ctx, func(m as.Message) bool { return m.Text() == "during" }); err != nil {
		t.Fatal(err)
	}
	if !log.has("stops leading") {
		t.Error("a did not log that it stopped leading")
	}

	px.setCut(false)
	waitFor(t, ctx, "a to be back", func() bool { return log.has("the node is back") })
	// a has the messages to user it missed, and takes calls again.
	if _, err := a.WaitForUserMessage(ctx, func(m as.Message) bool { return m.Text() == "during" }); err != nil {
		t.Fatal(err)
	}
	if _, err := a.SendTextToAgent(ctx, as.RootID, "after", task); err != nil {
		t.Fatal(err)
	}
	if _, err := a.WaitForUserMessage(ctx, func(m as.Message) bool { return m.Text() == "after" }); err != nil {
		t.Fatal(err)
	}
	a.Close()
}

// withDefaults fills in what join fills in.
func withDefaults(o cluster.Options) cluster.Options {
	o.Storage = jetstream.MemoryStorage
	return o
}

// Close returns on a node whose connection the host closed first, or whose
// server went away.
func TestClose_AfterTheConnectionIsGone(t *testing.T) {
	for _, how := range []string{"connection closed", "server stopped"} {
		t.Run(how, func(t *testing.T) {
			ctx := hangGuard(t)
			ns, err := natstest.Start(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			defer natstest.Stop(ns)
			nc, err := nats.Connect(ns.ClientURL(), nats.MaxReconnects(-1))
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			n, err := cluster.Join(ctx, nc, cluster.Options{Cluster: newClusterName(), NodeID: "n0", LeaseTTL: time.Second, Config: echo()})
			if err != nil {
				t.Fatal(err)
			}
			waitFor(t, ctx, "n0 to lead", func() bool { return n.Leader() == "n0" })
			if _, err := n.SubmitRequirement(ctx, "x"); err != nil {
				t.Fatal(err)
			}
			if how == "connection closed" {
				nc.Close()
			} else {
				natstest.Stop(ns)
			}
			done := make(chan struct{})
			go func() { n.Close(); close(done) }()
			recvCtx(t, ctx, done, "Close to return")
		})
	}
}

// countLog counts the records whose message contains part.
type countLog struct {
	part string
	n    atomic.Int64
}

func (c *countLog) Enabled(context.Context, slog.Level) bool { return true }
func (c *countLog) WithAttrs([]slog.Attr) slog.Handler       { return c }
func (c *countLog) WithGroup(string) slog.Handler            { return c }
func (c *countLog) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, c.part) {
		c.n.Add(1)
	}
	return nil
}

// A node that takes the lease and cannot open the society (here: a record
// of the bucket that does not decode, which any process on the server can
// write) tries again at the lease's pace, once a third of the lease time,
// not in a loop that claims the bucket and appends to the event log as
// fast as the server answers.
func TestLead_FailureIsNotRetriedInAHotLoop(t *testing.T) {
	ctx := hangGuard(t)
	url := natstest.Server(t)
	name := newClusterName()
	st, err := natsstore.New(ctx, natsstore.Options{URL: url, Bucket: name, Storage: jetstream.MemoryStorage, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	js, err := jetstream.New(connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.PutString(ctx, "hm.bad", "x"); err != nil { // a history key without its number
		t.Fatal(err)
	}
	log := &countLog{part: "opening the"}
	start := time.Now()
	join(t, url, name, "n0", cluster.Options{LeaseTTL: time.Second, Config: as.Config{Root: echo().Root, Logger: slog.New(log)}})
	const tries = 5
	waitFor(t, ctx, "five tries to open the society", func() bool { return log.n.Load() >= tries })
	// One try at once, then one a tick (a third of the lease time) at
	// most: a machine under load makes fewer, never more.
	if most := int64(time.Since(start)/(time.Second/3)) + 2; log.n.Load() > most {
		t.Fatalf("in %v the node failed to open the society %d times, at most %d at the lease's pace", time.Since(start), log.n.Load(), most)
	}
}

// A node whose heartbeat expired while it was cut off, and whose id a new
// node took meanwhile, does not renew the new node's heartbeat as its own
// when its connection is back: it says so and takes no work, and the new
// node serves its id alone.
func TestNodeBackFindsItsIDTaken(t *testing.T) {
	ctx := hangGuard(t)
	url := natstest.Server(t)
	px := newProxy(t, url)
	name := newClusterName()

	lead := join(t, url, name, "lead", cluster.Options{Config: echo()})
	waitFor(t, ctx, "lead to lead", func() bool { return lead.Leader() == "lead" })

	a, log := joinBehind(t, px, name, "a")

	px.setCut(true)
	waitFor(t, ctx, "a to log the lost connection", func() bool { return log.has("lost its connection") })
	// Join waits out the old heartbeat, then takes the id.
	a2 := join(t, url, name, "a", cluster.Options{Config: echo()})

	px.setCut(false)
	waitFor(t, ctx, "a to be back or to find its id taken", func() bool {
		return log.has("the node is back") || log.has("another node")
	})
	if log.has("the node is back") {
		t.Fatalf("a node whose id another node took meanwhile took work again as that id: %q", log.msgs)
	}
	// Closing, a leaves a2's heartbeat alone.
	a.Close()
	kv := leases(t, url, name)
	if _, err := kv.Get(ctx, "node.a"); err != nil {
		t.Fatalf("a2's heartbeat after the node it replaced closed: %v", err)
	}
	a2.Close()
}
