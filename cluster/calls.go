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
	Op    string
	Text  string `json:",omitempty"`
	Agent string `json:",omitempty"`
	Task  string `json:",omitempty"`
	Ref   string `json:",omitempty"`
}

// callResp is the leader's answer.
type callResp struct {
	Task     string       `json:",omitempty"`
	Message  *as.Message  `json:",omitempty"`
	Agents   []as.Agent   `json:",omitempty"`
	Roles    []as.Role    `json:",omitempty"`
	Contacts []as.Contact `json:",omitempty"`
	Artifact *as.Artifact `json:",omitempty"`
	Data     []byte       `json:",omitempty"`
	Err      *wireError   `json:",omitempty"`
}

// The user calls a node forwards.
const (
	opSubmit   = "submit"
	opSend     = "send"
	opAgents   = "agents"
	opRoles    = "roles"
	opContacts = "contacts"
	opArtifact = "artifact"
)

// forward sends req to the leader and returns its answer. While there is
// no leader it tries again until ctx ends, and then fails with an error
// wrapping ErrNoLeader; a call the leader took and never answered fails
// with one wrapping ErrUnknownOutcome, and is not sent again.
func (n *Node) forward(ctx context.Context, req callReq) (callResp, error) {
	if n.isClosed() {
		return callResp{}, &as.Error{Code: as.ErrClosed, Message: "the node is closed"}
	}
	data, err := json.Marshal(req)
	if err != nil {
		return callResp{}, err
	}
	for {
		m, err := n.nc.RequestWithContext(ctx, n.names.call, data)
		switch {
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
	if err = json.Unmarshal(m.Data, &req); err == nil {
		switch req.Op {
		case opSubmit:
			resp.Task, err = s.SubmitRequirement(ctx, req.Text)
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
		default:
			err = &as.Error{Code: as.ErrInvalidArgument, Message: fmt.Sprintf("unknown call %q", req.Op)}
		}
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
	}
}

// SubmitRequirement submits a requirement to the cluster's society, as
// [as.Society.SubmitRequirement] does, through the leader.
func (n *Node) SubmitRequirement(ctx context.Context, text string) (taskID string, err error) {
	resp, err := n.forward(ctx, callReq{Op: opSubmit, Text: text})
	return resp.Task, err
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
