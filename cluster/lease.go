package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	as "agentsociety"
	"agentsociety/llm"
	"agentsociety/store/natsstore"
)

// leaderKey is the key of the leader's lease in the leases bucket; its
// value is the leader's node id.
const leaderKey = "leader"

// nodeKey is the key of this node's heartbeat in the leases bucket.
func (n *Node) nodeKey() string { return "node." + n.opts.NodeID }

// claimID makes the node's id its own in the cluster, refusing an id that
// a live node has: it creates the node's heartbeat key. A key that is
// there already is a live node's if it is renewed (every third of the
// lease time), and that of a node that stopped without leaving if it
// expires (a lease time after its last renewal); claimID waits to tell
// which, within ctx.
func (n *Node) claimID(ctx context.Context) error {
	key := n.nodeKey()
	for {
		rev, err := n.leases.Create(ctx, key, []byte(n.beatValue))
		if err == nil {
			n.beatRev = rev
			return nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return fmt.Errorf("cluster: announcing the node: %w", err)
		}
		e, err := n.leases.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // gone meanwhile
		}
		if err != nil {
			return fmt.Errorf("cluster: announcing the node: %w", err)
		}
		for seen := e.Revision(); ; {
			select {
			case <-ctx.Done():
				return fmt.Errorf("cluster: Options.NodeID %q: a node of this id has a heartbeat in cluster %s that did not expire while joining (a node that stopped without leaving keeps it a lease time): %w",
					n.opts.NodeID, n.opts.Cluster, ctx.Err())
			case <-time.After(n.opts.LeaseTTL / 6):
			}
			e, err := n.leases.Get(ctx, key)
			if errors.Is(err, jetstream.ErrKeyNotFound) {
				break // expired: the id is free
			}
			if err != nil {
				return fmt.Errorf("cluster: announcing the node: %w", err)
			}
			if e.Revision() != seen {
				return fmt.Errorf("%w: Options.NodeID %q is the id of a live node of cluster %s: give each node an id of its own",
					ErrIncompatible, n.opts.NodeID, n.opts.Cluster)
			}
		}
	}
}

// heartbeat renews the node's heartbeat, expecting it at the revision
// the node last wrote. It reports lost when another node has the id: the
// heartbeat expired (the node was cut off for a lease time) and a node
// joined with its id meanwhile. A heartbeat that expired with no node
// taking the id is created again.
func (n *Node) heartbeat(ctx context.Context) (lost bool, err error) {
	key, value := n.nodeKey(), []byte(n.beatValue)
	rev, err := n.leases.Update(ctx, key, value, n.beatRev)
	if err == nil {
		n.beatRev = rev
		return false, nil
	}
	if !isRevisionMismatch(err) {
		return false, err
	}
	// Not at the revision last written: expired, written by this node
	// in a renewal whose answer was lost, or another node's.
	e, err := n.leases.Get(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		rev, err = n.leases.Create(ctx, key, value)
	case err != nil:
		return false, err
	case string(e.Value()) != n.beatValue:
		return true, nil
	default:
		rev, err = n.leases.Update(ctx, key, value, e.Revision())
	}
	if isRevisionMismatch(err) {
		return true, nil // taken meanwhile
	}
	if err != nil {
		return false, err
	}
	n.beatRev = rev
	return false, nil
}

// isRevisionMismatch reports whether err is a key-value write refused
// because the key was not at the revision the write expected.
func isRevisionMismatch(err error) bool {
	return errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch)
}

// step bounds one call of the lease loop to the NATS server.
func (n *Node) step() (context.Context, context.CancelFunc) {
	return context.WithTimeout(n.ctx, n.opts.LeaseTTL/3)
}

// leaseLoop renews the node's heartbeat and, every third of the lease
// time, takes the leader's lease if it is free or renews it if the node
// holds it. While the node holds the lease, lead runs the society; the
// moment a renewal fails, the node stops leading.
func (n *Node) leaseLoop() {
	defer n.wg.Done()
	tick := time.NewTicker(n.opts.LeaseTTL / 3)
	defer tick.Stop()

	var (
		rev     uint64             // the lease's revision, while leading
		stop    context.CancelFunc // ends the leadership
		done    chan struct{}      // closed once lead has returned
		leadErr *error             // lead's error, once done is closed
	)
	// resign ends the leadership and returns the error of its society's
	// closing.
	resign := func(why string) error {
		stop()
		<-done
		done = nil
		ctx, cancel := context.WithTimeout(context.Background(), n.opts.LeaseTTL/3)
		defer cancel()
		// Only if it is still this node's: a lease lost meanwhile is another's.
		if err := n.leases.Delete(ctx, leaderKey, jetstream.LastRevision(rev)); err == nil {
			n.setLeader("")
		}
		n.log.Info("cluster: no longer leading", "why", why)
		return *leadErr
	}
	// stepDown ends the leadership for why, other than the node's Close:
	// an error closing the society is logged, as no caller awaits it.
	stepDown := func(why string) {
		if err := resign(why); err != nil {
			n.log.Warn("cluster: closing the society", "err", err)
		}
	}
	for {
		if n.beat() {
			// Another node has the id: this one takes no work and
			// does not lead.
			if done != nil {
				stepDown("another node took this node's id")
			}
			n.workSub.Unsubscribe()
			return
		}
		ctx, cancel := n.step()
		if done == nil {
			r, err := n.leases.Create(ctx, leaderKey, []byte(n.opts.NodeID))
			if err == nil {
				rev = r
				n.setLeader(n.opts.NodeID)
				n.log.Info("cluster: took the leader's lease")
				stop, done, leadErr = n.startLeading()
			} else if !errors.Is(err, jetstream.ErrKeyExists) && n.ctx.Err() == nil {
				n.log.Debug("cluster: taking the leader's lease", "err", err)
			}
		} else {
			r, err := n.leases.Update(ctx, leaderKey, []byte(n.opts.NodeID), rev)
			if err == nil {
				rev = r
			} else if n.ctx.Err() == nil {
				n.log.Error("cluster: renewing the leader's lease failed: this node stops leading", "err", err)
				cancel()
				stepDown("the lease was not renewed")
				continue
			}
		}
		cancel()
		select {
		case <-n.ctx.Done():
			if done != nil {
				n.closeErr = resign("the node is closing") // for Close, once it has waited for this goroutine
			}
			return
		case <-done:
			if n.ctx.Err() != nil {
				// The node is closing too: this select may pick either,
				// and Close awaits the society's error all the same.
				n.closeErr = resign("the node is closing")
				return
			}
			stepDown("the society stopped")
			// Not at once: a society that cannot open would be claimed
			// again as fast as the server answers.
			select {
			case <-n.ctx.Done():
				return
			case <-tick.C:
			}
		case <-tick.C:
		case <-n.wake:
		}
	}
}

// startLeading starts lead, and returns the function that stops it, the
// channel closed once it has returned, and where its error is then.
func (n *Node) startLeading() (stop context.CancelFunc, done chan struct{}, err *error) {
	ctx, stop := context.WithCancel(n.ctx)
	done = make(chan struct{})
	err = new(error)
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		defer close(done)
		*err = n.lead(ctx)
	}()
	return stop, done, err
}

// beat renews the node's heartbeat, and logs when the node loses its
// connection to NATS (it then takes no work: the leader sees no
// heartbeat) and when it is back. It reports lostID when another node has
// taken the node's id.
func (n *Node) beat() (lostID bool) {
	ctx, cancel := n.step()
	lost, err := n.heartbeat(ctx)
	cancel()
	if lost {
		n.lostID = true
		n.log.Error("cluster: another node took this node's id while its heartbeat had expired (it was cut off from NATS for a lease time): this node takes no work and does not lead from now on; close it, and restart it if it should serve",
			"node", n.opts.NodeID)
		return true
	}
	n.mu.Lock()
	was := n.offline
	n.offline = err != nil
	n.mu.Unlock()
	switch {
	case err != nil && !was && n.ctx.Err() == nil:
		n.log.Error("cluster: the node lost its connection to NATS: it takes no work until it is back", "err", err)
	case err == nil && was:
		n.log.Info("cluster: the node is back: it takes work again")
		n.follow.restart()
	}
	return false
}

func (n *Node) setLeader(id string) {
	n.mu.Lock()
	n.leader = id
	n.mu.Unlock()
}

// watchLeader follows the leader's key: it keeps n.leader current, and
// pokes n.wake when the key is deleted, so that a follower tries at once
// to take a lease its holder gave up. It returns once n.leader is the
// leader the bucket holds, so that a node knows its leader when Join
// returns: a user call sent then is known to go to that leader (see
// request).
func (n *Node) watchLeader(ctx context.Context) error {
	n.wake = make(chan struct{}, 1)
	w, err := n.leases.Watch(n.ctx, leaderKey)
	if err != nil {
		return err
	}
	// The current value, if any, and then nil: the watch has caught up.
	for caughtUp := false; !caughtUp; {
		select {
		case e := <-w.Updates():
			if e == nil {
				caughtUp = true
			} else {
				n.seeLeader(e)
			}
		case <-ctx.Done():
			w.Stop()
			return ctx.Err()
		}
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		defer w.Stop()
		for e := range w.Updates() {
			if e != nil {
				n.seeLeader(e)
			}
		}
	}()
	return nil
}

// seeLeader takes in a change to the leader's key.
func (n *Node) seeLeader(e jetstream.KeyValueEntry) {
	if e.Operation() == jetstream.KeyValuePut {
		n.setLeader(string(e.Value()))
		return // a lease taken or renewed: nothing to do
	}
	n.setLeader("")
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

// testHookCall, when set (by tests), runs as the leader receives a user
// call, before it takes the call up.
var testHookCall atomic.Pointer[func()]

// testHookServe, when set (by tests), runs as the leader starts making a
// user call it took up, with the leader's context.
var testHookServe atomic.Pointer[func(context.Context)]

// lead runs the society while ctx lasts: it opens the store on the
// cluster's bucket, claiming it (which fences the previous leader), opens
// the society on it (which delivers again the pending messages and re-arms
// the timeouts), and serves the forwarded user calls. It returns when ctx
// ends or the store is fenced, with the error of closing the society, if
// any: then the society's last records may not be written. A society that
// could not be opened is logged, not returned: it has nothing to close.
func (n *Node) lead(ctx context.Context) error {
	st, err := natsstore.New(ctx, n.storeOptions())
	if err != nil {
		n.log.Error("cluster: opening the cluster's store to lead", "err", err)
		return nil
	}
	defer st.Close()
	cfg := n.societyConfig()
	cfg.Store = st
	// Registered before the society restores the store, so that messages
	// to user left pending by the last leader are published too.
	cfg.OnUserMessage = n.publishUser
	s, err := as.New(ctx, cfg)
	if err != nil {
		n.log.Error("cluster: opening the society to lead", "err", err)
		return nil
	}
	var (
		calls   sync.WaitGroup
		callsMu sync.Mutex
		stopped bool // set before calls.Wait: no call is counted after
	)
	// A call that reaches the leader as it steps down is answered as by a
	// cluster with no leader, so that its node sends it again, to the
	// next leader: nothing of it was done.
	stepping := func() bool {
		select {
		case <-st.Fenced():
			return true
		default:
			return stopped || ctx.Err() != nil
		}
	}
	sub, err := n.nc.QueueSubscribe(n.names.call, "leader", func(m *nats.Msg) {
		if hook := testHookCall.Load(); hook != nil {
			(*hook)()
		}
		callsMu.Lock()
		defer callsMu.Unlock()
		if stepping() {
			n.notLeading(m)
			return
		}
		calls.Add(1)
		go func() {
			defer calls.Done()
			n.serveCall(ctx, s, m)
		}()
	})
	if err != nil {
		n.log.Error("cluster: serving the user calls", "err", err)
	} else {
		n.log.Info("cluster: leading")
		select {
		case <-ctx.Done():
		case <-st.Fenced():
			n.log.Error("cluster: another node claimed the society's store: this node stops leading")
		}
	}
	callsMu.Lock()
	stopped = true
	callsMu.Unlock()
	var drained <-chan nats.SubStatus
	switch {
	case sub == nil:
	case n.nc.IsConnected():
		// Drained rather than unsubscribed: the calls the connection
		// holds for it are delivered, and answered as above, where
		// unsubscribing would drop them unanswered.
		drained = sub.StatusChanged(nats.SubscriptionClosed)
		if err := sub.Drain(); err != nil {
			sub.Unsubscribe()
			drained = nil
		}
	default:
		// Not drained while the connection is down: nats.go subscribes
		// a subscription being drained again when it reconnects, and
		// then removes it without unsubscribing, which would leave the
		// server sending calls that nothing answers.
		sub.Unsubscribe()
	}
	calls.Wait()
	cctx, cancel := context.WithTimeout(context.Background(), n.opts.LeaseTTL)
	defer cancel()
	var closeErr error
	if err := s.Close(cctx); err != nil {
		closeErr = fmt.Errorf("cluster: closing the society: %w", err)
	}
	if drained != nil {
		select {
		case <-drained:
		case <-cctx.Done():
			sub.Unsubscribe() // a connection that went down meanwhile
		}
	}
	return closeErr
}

// notLeading answers the user call m as the server answers a request that
// nothing serves (503, no responders): the caller's node sends it again
// until a node leads.
func (n *Node) notLeading(m *nats.Msg) {
	if m.Reply == "" {
		return
	}
	resp := nats.NewMsg(m.Reply)
	resp.Header.Set("Status", "503")
	if err := n.nc.PublishMsg(resp); err != nil {
		n.log.Warn("cluster: answering a user call as not leading", "err", err)
	}
}

// societyConfig is the configuration of the society the leader runs: the
// node's, with a model and host tools that send each call to the node
// that owns its agent.
func (n *Node) societyConfig() as.Config {
	cfg := n.opts.Config
	cfg.Logger = n.log
	if cfg.Model != nil {
		cfg.Model = llm.ModelFunc(n.router.generate)
	}
	cfg.Tools = slices.Clone(cfg.Tools)
	for _, t := range n.opts.Tools {
		cfg.Tools = append(cfg.Tools, as.Tool{
			Name: t.Name, Description: t.Description, Parameters: t.Parameters, Roles: t.Roles,
			Handler: func(ctx context.Context, self *as.Actor, args json.RawMessage) (any, error) {
				return n.router.tool(ctx, t.Name, ToolCall{Agent: self.ID(), Task: self.TaskID(), Args: args})
			},
		})
	}
	return cfg
}
