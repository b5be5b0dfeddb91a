package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	as "agentsociety"
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
// and should return quickly. It returns a function that unregisters f.
func (n *Node) OnUserMessage(f func(as.Message)) (unregister func()) {
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
	log   *slog.Logger
	limit int

	mu      sync.Mutex
	subs    []*func(as.Message)
	inbox   []as.Message
	waiters []*userWaiter
	done    chan struct{}
	closed  bool
}

type userWaiter struct {
	filter func(as.Message) bool
	ch     chan claim // buffered(1): the message it claimed, or its filter's panic
}

// claim is what a waiter gets: a message its filter matched, or the error
// its filter's panic became.
type claim struct {
	m   as.Message
	err error
}

// match runs a host's filter on m; a nil filter matches any message. A
// panic in the filter is returned as an error with code
// as.ErrInvalidArgument, for the call whose filter it is: the endpoint,
// whose lock is held, goes on.
func match(filter func(as.Message) bool, m as.Message) (ok bool, err error) {
	if filter == nil {
		return true, nil
	}
	defer func() {
		if r := recover(); r != nil {
			err = &as.Error{Code: as.ErrInvalidArgument, Message: fmt.Sprintf("the WaitForUserMessage filter panicked on message %s: %v", m.ID, r)}
		}
	}()
	return filter(m), nil
}

func newEndpoint(limit int, log *slog.Logger) *endpoint {
	return &endpoint{log: log, limit: limit, done: make(chan struct{})}
}

func (u *endpoint) deliver(m as.Message) {
	u.mu.Lock()
	subs := slices.Clone(u.subs)
	u.mu.Unlock()
	for _, f := range subs {
		u.call(*f, m)
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	for i := 0; i < len(u.waiters); {
		w := u.waiters[i]
		ok, err := match(w.filter, m)
		switch {
		case err != nil: // the waiter gets its filter's panic; m goes on
			u.log.Error("cluster: a WaitForUserMessage filter panicked; its caller gets the error", "err", err)
			w.ch <- claim{err: err}
			u.waiters = slices.Delete(u.waiters, i, i+1)
			continue
		case ok:
			w.ch <- claim{m: m}
			u.waiters = slices.Delete(u.waiters, i, i+1)
			return
		}
		i++
	}
	if len(u.inbox) >= u.limit {
		u.log.Warn("cluster: the node's user inbox is full: dropped the oldest unclaimed message", "msg", u.inbox[0].ID)
		u.inbox = u.inbox[1:]
	}
	u.inbox = append(u.inbox, m)
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

func (u *endpoint) subscribe(f func(as.Message)) func() {
	p := &f
	u.mu.Lock()
	u.subs = append(u.subs, p)
	u.mu.Unlock()
	return func() {
		u.mu.Lock()
		defer u.mu.Unlock()
		if i := slices.Index(u.subs, p); i >= 0 {
			u.subs = slices.Delete(u.subs, i, i+1)
		}
	}
}

func (u *endpoint) wait(ctx context.Context, filter func(as.Message) bool) (as.Message, error) {
	u.mu.Lock()
	for i, m := range u.inbox {
		ok, err := match(filter, m)
		if err != nil {
			u.mu.Unlock()
			u.log.Error("cluster: a WaitForUserMessage filter panicked; its caller gets the error", "err", err)
			return as.Message{}, err
		}
		if ok {
			u.inbox = slices.Delete(u.inbox, i, i+1)
			u.mu.Unlock()
			return m, nil
		}
	}
	if u.closed {
		u.mu.Unlock()
		return as.Message{}, &as.Error{Code: as.ErrClosed, Message: "the node is closed"}
	}
	w := &userWaiter{filter: filter, ch: make(chan claim, 1)}
	u.waiters = append(u.waiters, w)
	u.mu.Unlock()

	var err error
	select {
	case c := <-w.ch:
		return c.m, c.err
	case <-ctx.Done():
		err = ctx.Err()
	case <-u.done:
		err = &as.Error{Code: as.ErrClosed, Message: "the node is closed"}
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if i := slices.Index(u.waiters, w); i >= 0 {
		u.waiters = slices.Delete(u.waiters, i, i+1)
		return as.Message{}, err
	}
	c := <-w.ch // handed a message, or its filter's panic, just as it gave up
	return c.m, c.err
}

func (u *endpoint) close() {
	u.mu.Lock()
	defer u.mu.Unlock()
	if !u.closed {
		u.closed = true
		close(u.done)
	}
}
