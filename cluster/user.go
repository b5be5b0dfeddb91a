package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	as "agentsociety"
	"agentsociety/internal/inbox"
)

// Messages to user go from the leader's society to every node through the
// stream <cluster>_user: the leader publishes each (its id as Nats-Msg-Id,
// so that one delivered again after a failover is dropped as a duplicate
// within the stream's window), and every node reads the stream from the
// time it joined with an ordered consumer, which resumes where it was
// after a lost connection.

// userRetention is how long the stream of messages to user keeps them, for
// nodes that were disconnected.
const userRetention = time.Hour

// userPull is how long a node's pull of messages to user lasts.
const userPull = 5 * time.Second

// follower reads the stream of messages to user for a node, from where it
// is: a node whose connection came back reads on from the message after the
// last it had.
type follower struct {
	n *Node

	mu   sync.Mutex
	last uint64 // the stream sequence of the last message delivered
	cc   jetstream.ConsumeContext
}

// followUser creates the stream of messages to user if need be and starts
// reading it from its end.
func (n *Node) followUser(ctx context.Context) error {
	strm, err := n.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: n.names.userStrm, Subjects: []string{n.names.user},
		Storage: n.opts.Storage, Replicas: n.opts.Replicas, MaxAge: userRetention,
		Description: "agentsociety: the messages to user of cluster " + n.opts.Cluster,
	})
	if err != nil {
		return err
	}
	n.follow = &follower{n: n, last: strm.CachedInfo().State.LastSeq}
	if err := n.follow.start(ctx); err != nil {
		return err
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		<-n.ctx.Done()
		n.follow.stop()
	}()
	return nil
}

// start reads the stream from the message after f.last, with an ordered
// consumer of its own.
func (f *follower) start(ctx context.Context) error {
	f.mu.Lock()
	from := f.last + 1
	f.mu.Unlock()
	c, err := f.n.js.OrderedConsumer(ctx, f.n.names.userStrm, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: from,
	})
	if err != nil {
		return err
	}
	cc, err := c.Consume(f.deliver, jetstream.PullExpiry(userPull))
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.cc = cc
	f.mu.Unlock()
	return nil
}

// deliver hands a message to the node's endpoint, once: a consumer made
// again may read again what the last one delivered.
func (f *follower) deliver(msg jetstream.Msg) {
	meta, err := msg.Metadata()
	if err != nil {
		f.n.log.Error("cluster: a message to user without metadata", "err", err)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if meta.Sequence.Stream <= f.last {
		return
	}
	f.last = meta.Sequence.Stream
	var m as.Message
	if err := json.Unmarshal(msg.Data(), &m); err != nil {
		f.n.log.Error("cluster: a message to user that does not decode", "err", err)
		return
	}
	f.n.user.deliver(m)
}

// restart reads on from the last message delivered, with a new consumer:
// called when the node's connection is back, so that it does not wait for
// the old consumer to notice.
func (f *follower) restart() {
	f.stop()
	ctx, cancel := context.WithTimeout(f.n.ctx, f.n.opts.LeaseTTL)
	defer cancel()
	if err := f.start(ctx); err != nil && f.n.ctx.Err() == nil {
		f.n.log.Error("cluster: reading the messages to user again; the node tries again when its connection next comes back", "err", err)
	}
}

func (f *follower) stop() {
	f.mu.Lock()
	cc := f.cc
	f.cc = nil
	f.mu.Unlock()
	if cc != nil {
		cc.Stop()
		<-cc.Closed()
	}
}

// publishUser is the leader's callback for messages to user: it publishes
// m to every node. The society records that the host has m once the
// callback returns; if the publish fails m is logged, not delivered again.
func (n *Node) publishUser(m as.Message) {
	data, err := json.Marshal(m)
	if err == nil {
		msg := nats.NewMsg(n.names.user)
		msg.Data = data
		msg.Header.Set(jetstream.MsgIDHeader, m.ID)
		ctx, cancel := context.WithTimeout(context.Background(), n.opts.LeaseTTL)
		_, err = n.js.PublishMsg(ctx, msg)
		cancel()
	}
	if err != nil {
		n.log.Error("cluster: publishing a message to user to the nodes failed", "msg", m.ID, "err", err)
	}
}

// OnUserMessage registers f to be called with every message to user, on
// every node: each node's callbacks and waiters see each message, in the
// order the leader sent them, from the time the node joined. A host that
// submits on one node and waits on another gets its answer, and one whose
// node dies can wait on another. f runs on the node's delivery goroutine
// and should return quickly. It returns a function that unregisters f:
// once that has returned, f is not called again. A nil f registers
// nothing.
func (n *Node) OnUserMessage(f func(as.Message)) (unregister func()) {
	if f == nil {
		return func() {}
	}
	return n.user.subscribe(f)
}

// WaitForUserMessage waits for a message to user that matches filter (nil
// matches any) and returns it, as [as.Society.WaitForUserMessage] does for
// the messages this node received: each is returned by at most one call on
// this node. It returns ctx.Err() when ctx ends first, an error with code
// as.ErrClosed when the node closes, and one with code
// as.ErrInvalidArgument when filter panics (the message it looked at goes
// on to other waiters or the inbox).
func (n *Node) WaitForUserMessage(ctx context.Context, filter func(as.Message) bool) (as.Message, error) {
	return n.user.wait(ctx, filter)
}

// endpoint is a node's side of the messages to user: its callbacks, and an
// inbox of the messages no waiter has claimed yet.
type endpoint struct {
	log *slog.Logger
	box *inbox.Box[as.Message]
}

func newEndpoint(limit int, log *slog.Logger) *endpoint {
	panicked := func(m as.Message, r any) error {
		return &as.Error{Code: as.ErrInvalidArgument, Message: fmt.Sprintf("the WaitForUserMessage filter panicked on message %s: %v", m.ID, r)}
	}
	closed := func() error { return &as.Error{Code: as.ErrClosed, Message: "the node is closed"} }
	return &endpoint{log: log, box: inbox.New(limit, panicked, closed)}
}

// deliver hands m to the callbacks, then to a waiter or the inbox.
func (u *endpoint) deliver(m as.Message) {
	u.box.Call(m, u.call)
	_, dropped, panics := u.box.Put(m)
	for _, err := range panics {
		u.filterPanicked(err)
	}
	if dropped != nil {
		u.log.Warn("cluster: the node's user inbox is full: dropped the oldest unclaimed message", "msg", dropped.ID)
	}
}

// call runs a host callback, containing its panic.
func (u *endpoint) call(f func(as.Message), m as.Message) {
	defer func() {
		if r := recover(); r != nil {
			u.log.Error("cluster: OnUserMessage callback panicked", "panic", r, "msg", m.ID)
		}
	}()
	f(m)
}

func (u *endpoint) filterPanicked(err error) {
	u.log.Error("cluster: a WaitForUserMessage filter panicked; its caller gets the error", "err", err)
}

func (u *endpoint) subscribe(f func(as.Message)) func() { return u.box.Subscribe(f) }

func (u *endpoint) wait(ctx context.Context, filter func(as.Message) bool) (as.Message, error) {
	m, fromInbox, err := u.box.Take(ctx, filter)
	if err != nil && fromInbox { // a panic on a message offered meanwhile is logged by deliver
		u.filterPanicked(err)
	}
	return m, err
}

func (u *endpoint) close() { u.box.Close() }
