package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	as "agentsociety"
)

// callReq is a user call forwarded to the leader.
type callReq struct {
	Op     string
	Text   string     `json:",omitempty"`
	Agent  string     `json:",omitempty"`
	Task   string     `json:",omitempty"`
	Ref    string     `json:",omitempty"`
	From   uint64     `json:",omitempty"` // the first event wanted
	Max    int        `json:",omitempty"` // how many events at most
	Budget *as.Budget `json:",omitempty"`
	Trace  string     `json:",omitempty"` // the caller's trace context (see as.WithTrace)
}

// callResp is the leader's answer.
type callResp struct {
	Task     string                `json:",omitempty"`
	Message  *as.Message           `json:",omitempty"`
	Agents   []as.Agent            `json:",omitempty"`
	Roles    []as.Role             `json:",omitempty"`
	Contacts []as.Contact          `json:",omitempty"`
	Artifact *as.Artifact          `json:",omitempty"`
	Data     []byte                `json:",omitempty"`
	Tasks    []as.TaskInfo         `json:",omitempty"`
	Usage    *as.Usage             `json:",omitempty"`
	Found    bool                  `json:",omitempty"` // Usage's ok
	Events   []as.Event            `json:",omitempty"`
	Missed   *as.MissedEventsError `json:",omitempty"`
	Err      *wireError            `json:",omitempty"`
}

// The user calls a node forwards.
const (
	opSubmit      = "submit"
	opSubmitSetUp = "submit_set_up" // a submit with options: a leader that cannot set them up refuses it
	opSend        = "send"
	opAgents      = "agents"
	opRoles       = "roles"
	opContacts    = "contacts"
	opArtifact    = "artifact"
	opTasks       = "tasks"
	opUsage       = "usage"
	opAgentUse    = "agent_usage"
	opBudget      = "budget"
	opShare       = "agent_budget"
	opEnd         = "terminate"
	opEvents      = "events"
)

// MaxEvents is the most events one [Node.Events] call returns.
const MaxEvents = 1000

// forward sends req to the leader and returns its answer. While there is
// no leader it tries again until ctx ends, and then fails with an error
// wrapping ErrNoLeader; a call the leader took and never answered fails
// with one wrapping ErrUnknownOutcome, and is not sent again.
func (n *Node) forward(ctx context.Context, req callReq) (callResp, error) {
	if n.isClosed() {
		return callResp{}, &as.Error{Code: as.ErrClosed, Message: "the node is closed"}
	}
	req.Trace = as.TraceFromContext(ctx)
	data, err := json.Marshal(req)
	if err != nil {
		return callResp{}, err
	}
	for {
		m, lost, err := n.request(ctx, data)
		switch {
		case err != nil && n.ctx.Err() != nil:
			return callResp{}, &as.Error{Code: as.ErrClosed, Message: "the node is closed", Err: ErrUnknownOutcome}
		case err != nil && lost:
			return callResp{}, fmt.Errorf("%w (%s): another node leads", ErrUnknownOutcome, req.Op)
		case err == nil:
			var resp callResp
			if err := json.Unmarshal(m.Data, &resp); err != nil {
				return callResp{}, fmt.Errorf("cluster: the leader answered %q: %w", m.Data, err)
			}
			if resp.Err != nil {
				return resp, resp.Err.err()
			}
			return resp, nil
		case errors.Is(err, nats.ErrNoResponders):
			select {
			case <-ctx.Done():
				return callResp{}, fmt.Errorf("%w for %s: %w", ErrNoLeader, req.Op, ctx.Err())
			case <-n.ctx.Done():
				return callResp{}, &as.Error{Code: as.ErrClosed, Message: "the node is closed"}
			case <-time.After(min(100*time.Millisecond, n.opts.LeaseTTL/6)):
			}
		case ctx.Err() != nil:
			return callResp{}, fmt.Errorf("%w (%s): %w", ErrUnknownOutcome, req.Op, ctx.Err())
		default:
			return callResp{}, fmt.Errorf("cluster: forwarding %s to the leader: %w", req.Op, err)
		}
	}
}

// answerGrace is how long a call whose context ended still waits for an
// answer already on its way.
const answerGrace = 50 * time.Millisecond

// request sends a user call to the leader and waits for its answer, until
// ctx ends, the node closes, or another node has led for a lease time
// (lost): the leader that took the call is gone, and its answer with it.
// It waits in the caller's goroutine, so that nothing of the call outlives
// Close. An answer that no node serves calls (the server's, or a leader's
// that is stepping down) is nats.ErrNoResponders.
func (n *Node) request(ctx context.Context, data []byte) (m *nats.Msg, lost bool, err error) {
	if err := ctx.Err(); err != nil {
		return nil, false, err // not sent
	}
	was := n.Leader()
	inbox := n.nc.NewInbox()
	answer := make(chan *nats.Msg, 1)
	sub, err := n.nc.ChanSubscribe(inbox, answer)
	if err != nil {
		return nil, false, err
	}
	defer sub.Unsubscribe()
	if err := n.nc.PublishRequest(n.names.call, inbox, data); err != nil {
		return nil, false, err
	}
	t := time.NewTicker(n.opts.LeaseTTL / 3)
	defer t.Stop()
	var since time.Time
	for {
		select {
		case m := <-answer:
			return answered(m)
		case <-ctx.Done():
			// The server says at once when no node serves calls: an
			// answer on its way is worth a moment, so that a call that
			// found no leader says so rather than an unknown outcome.
			select {
			case m := <-answer:
				return answered(m)
			case <-time.After(answerGrace):
			}
			return nil, false, ctx.Err()
		case <-n.ctx.Done():
			return nil, false, n.ctx.Err()
		case <-t.C:
			// With no leader seen when the call was sent, the call went
			// to whoever led: the first leader seen since, or one before
			// it, which is gone once that one is.
			l := n.Leader()
			if was == "" {
				was = l
			}
			if l == "" || l == was {
				since = time.Time{}
			} else if since.IsZero() {
				since = time.Now()
			} else if time.Since(since) >= n.opts.LeaseTTL {
				return nil, true, errors.New("another node leads")
			}
		}
	}
}

// answered returns m, the answer to a call, or nats.ErrNoResponders if it
// is the server's word that no node serves calls.
func answered(m *nats.Msg) (*nats.Msg, bool, error) {
	if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
		return nil, false, nats.ErrNoResponders
	}
	return m, false, nil
}

func (n *Node) isClosed() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.closed
}

// serveCall makes a forwarded user call on the leader's society s.
func (n *Node) serveCall(ctx context.Context, s *as.Society, m *nats.Msg) {
	var req callReq
	var resp callResp
	var err error
	if hook := testHookServe.Load(); hook != nil {
		(*hook)(ctx)
	}
	if err = json.Unmarshal(m.Data, &req); err == nil {
		if req.Trace != "" {
			ctx = as.WithTrace(ctx, req.Trace)
		}
		switch req.Op {
		case opSubmit, opSubmitSetUp:
			var opts []as.RequirementOption
			if req.Budget != nil {
				opts = append(opts, as.WithBudget(*req.Budget))
			}
			resp.Task, err = s.SubmitRequirement(ctx, req.Text, opts...)
		case opSend:
			var msg as.Message
			msg, err = s.SendTextToAgent(ctx, req.Agent, req.Text, req.Task)
			resp.Message = &msg
		case opAgents:
			resp.Agents = s.Agents()
		case opRoles:
			resp.Roles = s.Roles()
		case opContacts:
			resp.Contacts, err = s.Contacts(req.Agent)
		case opArtifact:
			var a as.Artifact
			a, resp.Data, err = s.GetArtifact(ctx, req.Ref)
			resp.Artifact = &a
		case opTasks:
			resp.Tasks = s.Tasks()
		case opUsage:
			var u as.Usage
			u, resp.Found = s.Usage(req.Task)
			resp.Usage = &u
		case opAgentUse:
			var u as.Usage
			u, resp.Found = s.AgentUsage(req.Agent)
			resp.Usage = &u
		case opBudget, opShare:
			if req.Budget == nil {
				err = &as.Error{Code: as.ErrInvalidArgument, Message: "no budget", MissingFields: []string{"budget"}}
			} else if req.Op == opBudget {
				err = s.SetBudget(ctx, req.Task, *req.Budget)
			} else {
				err = s.SetAgentBudget(ctx, req.Agent, *req.Budget)
			}
		case opEnd:
			err = s.Terminate(ctx, req.Agent)
		case opEvents:
			resp.Events, resp.Missed, err = eventsPage(ctx, s, req.From, req.Max)
		default:
			err = &as.Error{Code: as.ErrInvalidArgument, Message: fmt.Sprintf("unknown call %q", req.Op)}
		}
	}
	if err != nil && ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		// The leader's context, not the caller's, ended: the node stops
		// leading. The caller cannot tell how far the call went, and must
		// not read the cancellation as its own.
		err = fmt.Errorf("%w: the leader stopped leading while making %s (%v)", ErrUnknownOutcome, req.Op, err)
	}
	if err != nil {
		resp = callResp{Err: toWire(err)}
	}
	data, err := json.Marshal(resp)
	if err != nil {
		data, _ = json.Marshal(callResp{Err: toWire(err)})
	}
	if err := m.Respond(data); err != nil {
		n.log.Warn("cluster: answering a user call", "op", req.Op, "err", err)
		// An answer over the server's max_payload: the caller gets an
		// error, not silence.
		data, _ = json.Marshal(callResp{Err: toWire(fmt.Errorf("cluster: the leader's answer to %s does not fit a NATS message: %w", req.Op, err))})
		m.Respond(data)
	}
}

// SubmitRequirement submits a requirement to the cluster's society, as
// [as.Society.SubmitRequirement] does, through the leader, which sets the
// task up as opts say before it sends the requirement.
func (n *Node) SubmitRequirement(ctx context.Context, text string, opts ...SubmitOption) (taskID string, err error) {
	req := callReq{Op: opSubmit, Text: text}
	for _, opt := range opts {
		opt(&req)
		req.Op = opSubmitSetUp
	}
	resp, err := n.forward(ctx, req)
	return resp.Task, err
}

// A SubmitOption sets up a task that [Node.SubmitRequirement] submits, as
// an [as.RequirementOption] does on a Society. It is carried to the leader
// with the requirement.
type SubmitOption func(*callReq)

// WithBudget gives the task its own budget instead of Config.TaskBudget, as
// [as.WithBudget] does. A negative field is refused with
// as.ErrInvalidArgument, and nothing is sent.
func WithBudget(b as.Budget) SubmitOption {
	return func(r *callReq) { r.Budget = &b }
}

// SendTextToAgent sends text from user to agent agentID, as
// [as.Society.SendTextToAgent] does, through the leader.
func (n *Node) SendTextToAgent(ctx context.Context, agentID, text, taskID string) (as.Message, error) {
	resp, err := n.forward(ctx, callReq{Op: opSend, Agent: agentID, Text: text, Task: taskID})
	if err != nil || resp.Message == nil {
		return as.Message{}, err
	}
	return *resp.Message, nil
}

// Agents returns the society's agents, as [as.Society.Agents] does.
func (n *Node) Agents(ctx context.Context) ([]as.Agent, error) {
	resp, err := n.forward(ctx, callReq{Op: opAgents})
	return resp.Agents, err
}

// Roles returns the society's roles, as [as.Society.Roles] does.
func (n *Node) Roles(ctx context.Context) ([]as.Role, error) {
	resp, err := n.forward(ctx, callReq{Op: opRoles})
	return resp.Roles, err
}

// Contacts returns agent id's contact registry, as [as.Society.Contacts]
// does.
func (n *Node) Contacts(ctx context.Context, id string) ([]as.Contact, error) {
	resp, err := n.forward(ctx, callReq{Op: opContacts, Agent: id})
	return resp.Contacts, err
}

// GetArtifact returns an artifact, as [as.Society.GetArtifact] does.
func (n *Node) GetArtifact(ctx context.Context, ref string) (as.Artifact, []byte, error) {
	resp, err := n.forward(ctx, callReq{Op: opArtifact, Ref: ref})
	if err != nil || resp.Artifact == nil {
		return as.Artifact{}, nil, err
	}
	return *resp.Artifact, resp.Data, nil
}

// eventsPage returns at most limit (1 to MaxEvents) of the events s keeps
// from from on, and the events missed before them if any.
func eventsPage(ctx context.Context, s *as.Society, from uint64, limit int) ([]as.Event, *as.MissedEventsError, error) {
	limit = min(max(limit, 1), MaxEvents)
	var out []as.Event
	var missed *as.MissedEventsError
	for e, err := range s.Events(ctx, from) {
		if err != nil {
			if errors.As(err, &missed) {
				continue // the iteration goes on from the oldest kept
			}
			return nil, nil, err
		}
		if out = append(out, e); len(out) == limit {
			break
		}
	}
	return out, missed, nil
}

// Tasks returns the society's tasks, as [as.Society.Tasks] does.
func (n *Node) Tasks(ctx context.Context) ([]as.TaskInfo, error) {
	resp, err := n.forward(ctx, callReq{Op: opTasks})
	return resp.Tasks, err
}

// Usage returns what task spent, as [as.Society.Usage] does; ok is false
// for a task the society does not know.
func (n *Node) Usage(ctx context.Context, task string) (u as.Usage, ok bool, err error) {
	resp, err := n.forward(ctx, callReq{Op: opUsage, Task: task})
	if err != nil || resp.Usage == nil {
		return as.Usage{}, false, err
	}
	return *resp.Usage, resp.Found, nil
}

// AgentUsage returns what agent id and its descendants spent, as
// [as.Society.AgentUsage] does.
func (n *Node) AgentUsage(ctx context.Context, id string) (u as.Usage, ok bool, err error) {
	resp, err := n.forward(ctx, callReq{Op: opAgentUse, Agent: id})
	if err != nil || resp.Usage == nil {
		return as.Usage{}, false, err
	}
	return *resp.Usage, resp.Found, nil
}

// SetBudget sets task's budget, as [as.Society.SetBudget] does.
func (n *Node) SetBudget(ctx context.Context, task string, b as.Budget) error {
	_, err := n.forward(ctx, callReq{Op: opBudget, Task: task, Budget: &b})
	return err
}

// SetAgentBudget sets agent id's share, as [as.Society.SetAgentBudget]
// does.
func (n *Node) SetAgentBudget(ctx context.Context, id string, b as.Budget) error {
	_, err := n.forward(ctx, callReq{Op: opShare, Agent: id, Budget: &b})
	return err
}

// Terminate terminates agent id and its descendants, as
// [as.Society.Terminate] does.
func (n *Node) Terminate(ctx context.Context, id string) error {
	_, err := n.forward(ctx, callReq{Op: opEnd, Agent: id})
	return err
}

// Events returns at most limit (up to MaxEvents) of the events the society
// keeps from sequence number from on, oldest first, as [as.Society.Events]
// yields them: a node reads the leader's log a page at a time. When the
// events from from on are no longer kept, it returns those from the oldest
// kept with a *as.MissedEventsError that says so, as io.Reader returns
// data with an error. The numbering goes on across leaders: the log is in
// the cluster's store. On a cluster whose society keeps no events
// (Config.EventRetention below zero) it returns an error with code
// as.ErrEventsOff.
func (n *Node) Events(ctx context.Context, from uint64, limit int) ([]as.Event, error) {
	resp, err := n.forward(ctx, callReq{Op: opEvents, From: from, Max: limit})
	if err != nil {
		return nil, err
	}
	if resp.Missed != nil {
		return resp.Events, resp.Missed
	}
	return resp.Events, nil
}
