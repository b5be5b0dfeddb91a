// Package cluster runs one society over several processes on NATS
// JetStream: the nodes of a cluster share a name, one of them (the leader)
// runs the society, and every node serves the model calls and host-tool
// calls of the agents placed on it and takes the host's user calls.
//
// # Why one writer
//
// A society's bookkeeping (routing, contacts, the hard constraints) runs at
// hundreds of thousands of messages a second on one core; what outgrows a
// machine is model calls and host tools. So the organisation has one
// writer, the leader, elected by a lease in the key-value bucket
// <cluster>_leases (key "leader", taken with a create, renewed with an
// update every third of Options.LeaseTTL; a node that fails a renewal
// stops leading at once). The leader opens the society on a
// [natsstore.Store] on the bucket <cluster> with [natsstore.Options.Fence]:
// a leader that was deposed and has not noticed yet cannot write, as the
// server refuses its writes. A new leader opens the society as any society
// reopens on its store: pending messages are delivered again and
// collaboration timeouts re-armed, and as only one society runs, each
// timeout fires once. The hard constraints hold by construction: they are
// checked by the one society, as in one process.
//
// # Work spreads
//
// The leader's society is built with a model and host tools that send each
// call to the node that owns the agent (rendezvous hashing of the agent id
// over the live nodes, see [Node] and docs/distributed.md), which runs it
// with its own Config.Model and [Options.Tools]. When that node dies the
// call is sent again to the agent's next node: a model call or host-tool
// call is made at least once, not exactly once.
//
// # User calls
//
// Any node takes the user calls; they are forwarded to the leader. Every
// message to user reaches the callbacks and waiters of every node (see
// [Node.OnUserMessage]).
package cluster

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	as "agentsociety"
	"agentsociety/store/natsstore"
)

// DefaultLeaseTTL is the lease time of a cluster whose Options.LeaseTTL is
// zero.
const DefaultLeaseTTL = 5 * time.Second

// ErrNoLeader is returned, wrapped, by a user call that found no leader to
// forward it to before its context ended.
var ErrNoLeader = errors.New("cluster: no leader")

// ErrUnknownOutcome is returned, wrapped, by a user call forwarded to the
// leader whose answer never came: the leader may or may not have made it.
var ErrUnknownOutcome = errors.New("cluster: the leader did not answer; the call may or may not have been made")

// ErrIncompatible is returned, wrapped, by [Join] when the node's
// configuration differs from the cluster's.
var ErrIncompatible = errors.New("cluster: incompatible configuration")

// Options configures a node.
type Options struct {
	// Cluster names the cluster: letters, digits, '-' and '_'. Its
	// society lives in the bucket of that name.
	Cluster string
	// NodeID names this node within the cluster: letters, digits, '-' and
	// '_'. Two live nodes cannot share it: Join refuses the id of a live
	// node.
	NodeID string
	// Config configures the society the leader runs. Its Store must be nil:
	// the cluster's store is the bucket. Config.Model and Options.Tools
	// run on the node that owns each call's agent; everything else of
	// Config, Config.Tools included (host tools that act on the society
	// through their *Actor), runs on the leader. Every node of a cluster
	// must have the same settings (see Join).
	Config as.Config
	// Tools are host tools that do heavy work for an agent and need
	// nothing of the society but the call: they run on the node that owns
	// the agent.
	Tools []Tool
	// LeaseTTL is how long the leader's lease and a node's heartbeat last
	// without renewal; both are renewed every third of it. A dead leader is
	// replaced, and a dead node's agents move, within about LeaseTTL. Zero
	// means DefaultLeaseTTL; at least 300ms.
	LeaseTTL time.Duration
	// Storage and Replicas configure the cluster's streams and buckets when
	// Join creates them: file storage and one replica by default.
	Storage  jetstream.StorageType
	Replicas int
}

// Tool is a host tool that runs on the node that owns the calling agent.
type Tool struct {
	// Name, Description, Parameters and Roles are as in [as.Tool].
	Name        string
	Description string
	Parameters  json.RawMessage
	Roles       []string
	// Handler runs the tool; its result is encoded as JSON for the model,
	// and an error reaches the model as [as.Tool.Handler]'s does (its code
	// kept if it is an *as.Error).
	Handler func(ctx context.Context, call ToolCall) (any, error)
}

// ToolCall is one call of a [Tool].
type ToolCall struct {
	Agent string          // the calling agent
	Task  string          // its task
	Args  json.RawMessage // the arguments as the model wrote them
}

// Node is one process's member of a cluster. It is safe for concurrent
// use. Make one with [Join] and end it with [Node.Close].
type Node struct {
	opts  Options
	nc    *nats.Conn
	js    jetstream.JetStream
	log   *slog.Logger
	names names

	leases jetstream.KeyValue
	router *router
	user   *endpoint
	follow *follower // reads the messages to user into user

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // the node's goroutines and the calls it serves

	subs    []*nats.Subscription // work and the user stream's delivery
	wake    chan struct{}        // poked when the leader's lease is given up
	workSub *nats.Subscription   // the node's work, also in subs

	// The heartbeat, written by Join and then by the lease loop only.
	beatValue string // the node's id and this node's token of its own
	beatRev   uint64 // the revision this node last wrote
	lostID    bool   // another node took the id: this one no longer beats
	// closeErr is the error of closing the society the node led as it
	// closed; written by the lease loop as it ends, read by Close.
	closeErr error

	mu      sync.Mutex
	leader  string // the leader as last seen, "" when none
	society *as.Society
	offline bool                          // the last heartbeat failed
	running map[string]context.CancelFunc // the calls this node serves, by reply subject
	closed  bool
}

// names are the subjects, buckets and streams of a cluster.
type names struct {
	work     string // + "." + node id: the calls a node serves
	call     string // user calls, served by the leader
	user     string // messages to user, published by the leader
	userStrm string
	leases   string
	cfg      string
	bucket   string
}

func namesOf(cluster string) names {
	p := "agentsociety." + cluster + "."
	return names{
		work: p + "work", call: p + "call", user: p + "user",
		userStrm: cluster + "_user", leases: cluster + "_leases", cfg: cluster + "_cfg", bucket: cluster,
	}
}

// Join makes this process a node of the cluster opts.Cluster on nc,
// creating the cluster's buckets and streams if they do not exist. A node
// whose settings differ from those the cluster was started with (see
// docs/distributed.md for the list), or whose NodeID is a live node's, is
// refused with an error wrapping [ErrIncompatible] that names the first
// that differs. The id of a node that stopped without [Node.Close] is free
// once its last heartbeat expires, a lease time after it was sent: Join
// waits for that within ctx. A connection that is not connected, or a
// server that does not answer within ctx (or, if ctx has no deadline,
// within 10 seconds or two lease times, whichever is longer: a node
// restarted under its id waits up to a lease time for its old heartbeat),
// is an error, not a hang. ctx bounds the joining only.
func Join(ctx context.Context, nc *nats.Conn, opts Options) (*Node, error) {
	if opts.LeaseTTL == 0 {
		opts.LeaseTTL = DefaultLeaseTTL
	}
	if opts.Storage == 0 {
		opts.Storage = jetstream.FileStorage
	}
	if opts.Replicas == 0 {
		opts.Replicas = 1
	}
	switch {
	case !validName(opts.Cluster):
		return nil, fmt.Errorf("cluster: Options.Cluster %q must be letters, digits, '-' or '_'", opts.Cluster)
	case !validName(opts.NodeID):
		return nil, fmt.Errorf("cluster: Options.NodeID %q must be letters, digits, '-' or '_'", opts.NodeID)
	case opts.Config.Store != nil:
		return nil, errors.New("cluster: Options.Config.Store must be nil: the cluster's store is its bucket")
	case opts.Config.OnUserMessage != nil:
		return nil, errors.New("cluster: Options.Config.OnUserMessage must be nil: register callbacks with Node.OnUserMessage")
	case opts.LeaseTTL < 300*time.Millisecond:
		return nil, fmt.Errorf("cluster: Options.LeaseTTL %v is below 300ms", opts.LeaseTTL)
	case nc == nil || !nc.IsConnected():
		return nil, errors.New("cluster: the NATS connection is not connected")
	}
	for i, t := range opts.Tools {
		if t.Handler == nil {
			return nil, fmt.Errorf("cluster: Options.Tools[%d] %q has no Handler", i, t.Name)
		}
	}
	log := opts.Config.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With(slog.String("cluster", opts.Cluster), slog.String("node", opts.NodeID))
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, max(10*time.Second, 2*opts.LeaseTTL))
		defer cancel()
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	n := &Node{opts: opts, nc: nc, js: js, log: log, names: namesOf(opts.Cluster)}
	n.beatValue = opts.NodeID + " " + rand.Text()
	limit := opts.Config.UserInbox
	if limit <= 0 {
		limit = as.DefaultUserInbox
	}
	n.user = newEndpoint(limit, log)
	if err := n.checkConfig(ctx); err != nil {
		return nil, err
	}
	n.leases, err = keyValue(ctx, js, jetstream.KeyValueConfig{
		Bucket: n.names.leases, TTL: opts.LeaseTTL, History: 1, Storage: opts.Storage, Replicas: opts.Replicas,
		Description: "agentsociety: the leader's lease and the nodes' heartbeats of cluster " + opts.Cluster,
	})
	if err != nil {
		return nil, fmt.Errorf("cluster: the leases bucket: %w", err)
	}
	if err := n.claimID(ctx); err != nil {
		return nil, err
	}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.router = newRouter(n)
	if err := n.start(ctx); err != nil {
		n.cancel()
		n.unsubscribe()
		n.wg.Wait()
		// The id is free again at once, not a lease time later.
		dctx, cancel := context.WithTimeout(context.Background(), opts.LeaseTTL)
		n.leases.Delete(dctx, n.nodeKey())
		cancel()
		return nil, err
	}
	return n, nil
}

// start subscribes to the node's work and to the messages to user, and
// starts the membership watcher, the leader's watcher and the lease loop.
func (n *Node) start(ctx context.Context) error {
	if err := n.router.watch(); err != nil {
		return fmt.Errorf("cluster: watching the nodes: %w", err)
	}
	if err := n.serveWork(); err != nil {
		return fmt.Errorf("cluster: serving work: %w", err)
	}
	if err := n.followUser(ctx); err != nil {
		return fmt.Errorf("cluster: following the messages to user: %w", err)
	}
	if lost, err := n.heartbeat(ctx); err != nil || lost {
		if err == nil {
			err = fmt.Errorf("%w: Options.NodeID %q was taken by another node while this one joined", ErrIncompatible, n.opts.NodeID)
		}
		return fmt.Errorf("cluster: announcing the node: %w", err)
	}
	if err := n.watchLeader(ctx); err != nil {
		return fmt.Errorf("cluster: watching the leader's lease: %w", err)
	}
	n.wg.Add(1)
	go n.leaseLoop()
	return nil
}

// keyValue binds the bucket cfg names, creating it if it does not exist.
func keyValue(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, cfg.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, cfg)
		if errors.Is(err, jetstream.ErrBucketExists) { // made meanwhile by another node
			kv, err = js.KeyValue(ctx, cfg.Bucket)
		}
	}
	return kv, err
}

// Leader returns the id of the cluster's leader as this node last saw it,
// or "" when it knows of none. The node has seen the leader of the moment
// it joined once Join has returned.
func (n *Node) Leader() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.leader
}

// ID returns the node's id.
func (n *Node) ID() string { return n.opts.NodeID }

// Close leaves the cluster: the node stops serving work, and if it leads,
// closes the society and gives up its lease so that another node takes
// over at once. Calls waiting on the node return [as.ErrClosed]. If the
// society's Close failed (see [as.Society.Close]; it is given the lease
// time), its last records may not be written: Close returns that error,
// wrapped. Closing a closed node does nothing and returns nil.
func (n *Node) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	n.mu.Unlock()
	n.cancel()
	n.unsubscribe()
	n.user.close()
	n.wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), n.opts.LeaseTTL)
	defer cancel()
	// Only if it is still this node's: a node that took the id keeps it.
	if n.lostID {
		return n.closeErr
	}
	if err := n.leases.Delete(ctx, n.nodeKey(), jetstream.LastRevision(n.beatRev)); err != nil && n.nc.IsConnected() && !isRevisionMismatch(err) {
		n.log.Warn("cluster: removing the node's heartbeat", "err", err)
	}
	return n.closeErr
}

func (n *Node) unsubscribe() {
	for _, sub := range n.subs {
		sub.Unsubscribe()
	}
}

func validName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// storeOptions are the options of the leader's store.
func (n *Node) storeOptions() natsstore.Options {
	return natsstore.Options{
		Conn: n.nc, Bucket: n.names.bucket, Fence: true,
		Storage: n.opts.Storage, Replicas: n.opts.Replicas, Logger: n.log,
		// A leader does not wait on the server longer than its lease.
		Timeout: n.opts.LeaseTTL,
	}
}
