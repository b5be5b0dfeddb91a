package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	as "agentsociety"
	"agentsociety/llm"
)

// router sends the leader's model and host-tool calls to the nodes that
// own their agents. Placement is rendezvous hashing of the agent id over
// the live nodes: no write per agent, every node would compute the same
// owner, an agent moves only when its node leaves (or a node joins and
// outranks it), and nothing has to move with it, since an agent's state
// is the society's, not the node's.
type router struct {
	n *Node

	mu      sync.Mutex
	seen    map[string]time.Time // node -> when its last heartbeat was seen
	suspect map[string]time.Time // node -> when a call found it gone
}

func newRouter(n *Node) *router {
	return &router{n: n, seen: make(map[string]time.Time), suspect: make(map[string]time.Time)}
}

// watch follows the nodes' heartbeats until the node closes.
func (r *router) watch() error {
	w, err := r.n.leases.Watch(r.n.ctx, "node.*")
	if err != nil {
		return err
	}
	r.n.wg.Add(1)
	go func() {
		defer r.n.wg.Done()
		defer w.Stop()
		for {
			select {
			case <-r.n.ctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if e == nil {
					continue
				}
				id := strings.TrimPrefix(e.Key(), "node.")
				r.mu.Lock()
				if e.Operation() == jetstream.KeyValuePut {
					r.seen[id] = time.Now()
				} else {
					delete(r.seen, id)
				}
				r.mu.Unlock()
			}
		}
	}()
	return nil
}

// alive reports whether node sent a heartbeat within the lease time and
// no call found it gone since.
func (r *router) alive(node string, now time.Time) bool {
	ttl := r.n.opts.LeaseTTL
	seen, ok := r.seen[node]
	if !ok || now.Sub(seen) > ttl {
		return false
	}
	if t, ok := r.suspect[node]; ok {
		if now.Sub(t) < ttl && !seen.After(t) {
			return false
		}
		delete(r.suspect, node)
	}
	return true
}

// owner returns the live node that owns agent: the one whose hash with
// the agent's id ranks first. It returns "" when no node is alive.
func (r *router) owner(agent string) string {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	best, bestScore := "", uint64(0)
	for node := range r.seen {
		if !r.alive(node, now) {
			continue
		}
		if score := rank(agent, node); best == "" || score > bestScore || score == bestScore && node < best {
			best, bestScore = node, score
		}
	}
	return best
}

// rank is node's score for agent: the node that scores highest owns it.
// It is FNV-1a of the two, then mixed (MurmurHash3's finaliser): FNV-1a's
// last bytes change only the low bits of its hash, which alone would give
// one of three nodes named alike (n0, n1, n2) half of the agents.
func rank(agent, node string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(agent))
	h.Write([]byte{0})
	h.Write([]byte(node))
	s := h.Sum64()
	s ^= s >> 33
	s *= 0xff51afd7ed558ccd
	s ^= s >> 33
	s *= 0xc4ceb9fe1a85ec53
	s ^= s >> 33
	return s
}

func (r *router) isAlive(node string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.alive(node, time.Now())
}

func (r *router) gone(node string) {
	r.mu.Lock()
	r.suspect[node] = time.Now()
	r.mu.Unlock()
}

// workReq is a call sent to the node that owns its agent.
type workReq struct {
	Model *llm.Request `json:",omitempty"`
	Tool  string       `json:",omitempty"`
	Call  *ToolCall    `json:",omitempty"`
	// Timeout is what was left of the caller's deadline, if it had one.
	Timeout time.Duration `json:",omitempty"`
}

// workResp is its answer.
type workResp struct {
	Model  *llm.Response   `json:",omitempty"`
	Result json.RawMessage `json:",omitempty"`
	Err    *wireError      `json:",omitempty"`
}

// generate is the leader's model: it sends the call to the node that owns
// req.Agent.
func (r *router) generate(ctx context.Context, req *llm.Request) (*llm.Response, error) {
	resp, err := r.send(ctx, req.Agent, workReq{Model: req})
	if err != nil {
		return nil, err
	}
	if resp.Model == nil {
		return nil, fmt.Errorf("%w: node answered a model call without a response", llm.ErrServer)
	}
	return resp.Model, nil
}

// tool is the leader's handler of host tool name: it sends the call to
// the node that owns the calling agent.
func (r *router) tool(ctx context.Context, name string, call ToolCall) (any, error) {
	resp, err := r.send(ctx, call.Agent, workReq{Tool: name, Call: &call})
	if err != nil {
		return nil, err
	}
	return resp.Result, nil
}

// send sends req to the node that owns agent and returns its answer. A
// node that has no subscriber any more, or whose heartbeat stops while the
// call is in flight, is given up, and the call is sent to the agent's next
// node: the call may then run twice.
func (r *router) send(ctx context.Context, agent string, req workReq) (workResp, error) {
	if d, ok := ctx.Deadline(); ok {
		req.Timeout = time.Until(d)
	}
	data, err := json.Marshal(req)
	if err != nil {
		return workResp{}, fmt.Errorf("cluster: encoding a call: %w", err)
	}
	ttl := r.n.opts.LeaseTTL
	for {
		owner := r.owner(agent)
		if owner == "" {
			select {
			case <-ctx.Done():
				return workResp{}, fmt.Errorf("cluster: no live node to call for %s: %w", agent, ctx.Err())
			case <-time.After(ttl / 6):
				continue
			}
		}
		resp, err := r.sendTo(ctx, owner, data)
		switch {
		case err == nil:
			var out workResp
			if err := json.Unmarshal(resp, &out); err != nil {
				return workResp{}, fmt.Errorf("%w: cluster: node %s answered %q: %v", llm.ErrServer, owner, resp, err)
			}
			if out.Err != nil {
				return workResp{}, out.Err.err()
			}
			return out, nil
		case ctx.Err() != nil:
			return workResp{}, fmt.Errorf("cluster: calling node %s for %s: %w", owner, agent, ctx.Err())
		case errors.Is(err, nats.ErrMaxPayload):
			return workResp{}, fmt.Errorf("%w: cluster: the call does not fit a NATS message: %v", llm.ErrBadRequest, err)
		case errors.Is(err, errNodeGone), errors.Is(err, nats.ErrNoResponders):
			r.gone(owner)
			r.n.log.Warn("cluster: a node is gone: its agent moves to another node, and the call is made again there", "gone", owner, "agent", agent)
		default:
			// The connection is down: wait for it, or for ctx.
			r.n.log.Warn("cluster: calling a node", "to", owner, "agent", agent, "err", err)
			select {
			case <-ctx.Done():
				return workResp{}, fmt.Errorf("cluster: calling node %s for %s: %w", owner, agent, ctx.Err())
			case <-time.After(ttl / 6):
			}
		}
	}
}

var errNodeGone = errors.New("cluster: the node stopped sending heartbeats")

// sendTo sends data to node and waits for the answer, giving up with
// errNodeGone if the node's heartbeat stops meanwhile, and with
// nats.ErrNoResponders if nothing serves the node's calls.
func (r *router) sendTo(ctx context.Context, node string, data []byte) ([]byte, error) {
	nc := r.n.nc
	inbox := nc.NewInbox()
	answer := make(chan *nats.Msg, 1)
	sub, err := nc.ChanSubscribe(inbox, answer)
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest(r.n.names.work+"."+node, inbox, data); err != nil {
		return nil, err
	}
	answered := false
	defer func() {
		if !answered {
			// The node stops a call its caller gave up, as it would stop
			// in one process.
			cancel := nats.NewMsg(r.n.names.work + "." + node)
			cancel.Header.Set(cancelHeader, inbox)
			nc.PublishMsg(cancel)
		}
	}()
	t := time.NewTicker(r.n.opts.LeaseTTL / 3)
	defer t.Stop()
	for {
		select {
		case m := <-answer:
			answered = true
			if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
				return nil, nats.ErrNoResponders
			}
			return m.Data, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
			if !r.isAlive(node) {
				return nil, errNodeGone
			}
		}
	}
}

// cancelHeader, on a message without data on a node's work subject,
// names the reply subject of a call its caller gave up.
const cancelHeader = "Agentsociety-Cancel"

// serveWork subscribes to the calls sent to this node.
func (n *Node) serveWork() error {
	sub, err := n.nc.Subscribe(n.names.work+"."+n.opts.NodeID, func(m *nats.Msg) {
		n.mu.Lock()
		if id := m.Header.Get(cancelHeader); id != "" {
			if stop := n.running[id]; stop != nil {
				stop()
			}
			n.mu.Unlock()
			return
		}
		if n.closed || m.Reply == "" { // closed, or a call nobody could be answered on
			n.mu.Unlock()
			return
		}
		n.wg.Add(1)
		ctx, stop := context.WithCancel(n.ctx)
		if n.running == nil {
			n.running = make(map[string]context.CancelFunc)
		}
		n.running[m.Reply] = stop
		n.mu.Unlock()
		go func() {
			defer n.wg.Done()
			defer func() {
				n.mu.Lock()
				delete(n.running, m.Reply)
				n.mu.Unlock()
				stop()
			}()
			resp := n.work(ctx, m.Data)
			if resp.Err != nil && resp.Err.Kind == "canceled" && n.ctx.Err() != nil {
				// The node is leaving and cut the call short: the leader
				// makes it again on the agent's next node, as when a node
				// dies (sendTo reads this as no responders). A call that
				// failed on its own is answered with its failure, leaving
				// or not: it ran, and must not run again.
				gone := nats.NewMsg(m.Reply)
				gone.Header.Set("Status", "503")
				n.nc.PublishMsg(gone)
				return
			}
			data, err := json.Marshal(resp)
			if err != nil {
				data, _ = json.Marshal(workResp{Err: toWire(fmt.Errorf("cluster: encoding the answer: %w", err))})
			}
			if err := m.Respond(data); err != nil {
				n.log.Warn("cluster: answering a call", "err", err)
				// An answer over the server's max_payload: the leader gets
				// an error, not silence.
				data, _ = json.Marshal(workResp{Err: toWire(fmt.Errorf("cluster: node %s's answer does not fit a NATS message: %w", n.opts.NodeID, err))})
				m.Respond(data)
			}
		}()
	})
	if err != nil {
		return err
	}
	n.workSub = sub
	n.subs = append(n.subs, sub)
	return nil
}

// work runs one call with the node's own model or host tool.
func (n *Node) work(ctx context.Context, data []byte) (resp workResp) {
	defer func() {
		// A model that panics fails its call, as it fails its turn in one
		// process: the node's process goes on.
		if p := recover(); p != nil {
			resp = workResp{Err: toWire(fmt.Errorf("cluster: the call panicked on node %s: %v", n.opts.NodeID, p))}
		}
	}()
	var req workReq
	if err := json.Unmarshal(data, &req); err != nil {
		return workResp{Err: toWire(fmt.Errorf("%w: cluster: decoding a call: %v", llm.ErrBadRequest, err))}
	}
	if req.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, req.Timeout)
		defer cancel()
	}
	switch {
	case req.Model != nil:
		if n.opts.Config.Model == nil {
			return workResp{Err: toWire(fmt.Errorf("%w: cluster: node %s has no model", llm.ErrBadRequest, n.opts.NodeID))}
		}
		resp, err := n.opts.Config.Model.Generate(ctx, req.Model)
		if err != nil {
			return workResp{Err: toWire(err)}
		}
		return workResp{Model: resp}
	case req.Call != nil:
		for _, t := range n.opts.Tools {
			if t.Name == req.Tool {
				res, err := callTool(ctx, t, *req.Call)
				if err != nil {
					return workResp{Err: toWire(err)}
				}
				return workResp{Result: res}
			}
		}
		return workResp{Err: toWire(&as.Error{Code: as.ErrUnknownTool, Message: fmt.Sprintf("node %s has no tool %q", n.opts.NodeID, req.Tool)})}
	}
	return workResp{Err: toWire(fmt.Errorf("%w: cluster: an empty call", llm.ErrBadRequest))}
}

// callTool runs t and encodes its result; a panic in it is returned as an
// error, as the society does for its own tools.
func callTool(ctx context.Context, t Tool, call ToolCall) (res json.RawMessage, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &as.Error{Code: as.ErrToolFailed, Message: fmt.Sprintf("tool %s panicked: %v", t.Name, p)}
		}
	}()
	v, err := t.Handler(ctx, call)
	if err != nil {
		return nil, err
	}
	return json.Marshal(v)
}
