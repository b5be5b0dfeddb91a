package agentsociety

import (
	"encoding/json"
	"fmt"

	"agentsociety/llm"
	"agentsociety/store"
)

// This file holds every mapping between the society's types and the store's
// records, both ways.

func roleRecord(r *Role) store.Role {
	return store.Role{ID: r.ID, Name: r.Name, Prompt: r.Prompt, InterfaceSpec: marshalSpec(r.InterfaceSpec), CreatedBy: r.CreatedBy, CreatedAt: r.CreatedAt}
}

func roleFromRecord(r store.Role) (*Role, error) {
	spec, err := unmarshalSpec(r.InterfaceSpec)
	if err != nil {
		return nil, fmt.Errorf("role %s: %w", r.ID, err)
	}
	return &Role{ID: r.ID, Name: r.Name, Prompt: r.Prompt, InterfaceSpec: spec, CreatedBy: r.CreatedBy, CreatedAt: r.CreatedAt}, nil
}

// agentRecord returns a's store record with the given status. The record
// carries a's brief itself: neither side modifies it (see store.Store).
func agentRecord(a *agent, status AgentStatus) store.Agent {
	i := &a.info
	return store.Agent{ID: i.ID, RoleID: i.RoleID, ParentID: i.ParentID, TaskID: i.TaskID, Brief: a.brief, Status: string(status), CreatedAt: i.CreatedAt, SpawnKey: a.spawnKey}
}

// agentFromRecord returns the agent r records, as a child of parent on role.
// The agent keeps r's brief, once it is known to decode.
func agentFromRecord(r store.Agent, role *Role, parent *agent) (*agent, error) {
	var brief TaskBrief
	if err := json.Unmarshal(r.Brief, &brief); err != nil {
		return nil, fmt.Errorf("agent %s: brief: %w", r.ID, err)
	}
	depth := 1 // a terminated agent's forgotten parent is taken for root
	if parent != nil {
		depth = parent.depth + 1
	}
	return &agent{
		info:     Agent{ID: r.ID, RoleID: r.RoleID, ParentID: r.ParentID, TaskID: r.TaskID, Status: AgentStatus(r.Status), CreatedAt: r.CreatedAt},
		brief:    r.Brief,
		role:     role,
		depth:    depth,
		spawnKey: r.SpawnKey,
	}, nil
}

// contactRole returns the role that owner's contact record c shows: its
// agent's, if c shows that role's name and interface spec, for the entry to
// share, else one of c's own.
func contactRole(owner string, c store.Contact, agents map[string]*agent) (*Role, error) {
	spec, err := unmarshalSpec(c.InterfaceSpec)
	if err != nil {
		return nil, fmt.Errorf("contact %s of %s: %w", c.ID, owner, err)
	}
	if a := agents[c.ID]; a != nil && a.roleName() == c.Role && a.spec().equal(spec) {
		return a.role, nil
	}
	return &Role{Name: c.Role, InterfaceSpec: spec}, nil
}

func (r *request) record() store.Request {
	return store.Request{ID: r.id, From: r.from, To: r.to, TaskID: r.taskID, Status: string(r.status), CreatedAt: r.createdAt, Deadline: r.deadline}
}

func requestFromRecord(r store.Request) *request {
	return &request{id: r.ID, from: r.From, to: r.To, taskID: r.TaskID, status: RequestStatus(r.Status), createdAt: r.CreatedAt, deadline: r.Deadline}
}

func messageRecord(m *Message) store.Message {
	return store.Message{ID: m.ID, Seq: m.Seq, From: m.From, To: m.To, TaskID: m.TaskID, Type: string(m.Type), Payload: m.Payload, SentAt: m.SentAt}
}

func messageFromRecord(r store.Message) Message {
	return Message{ID: r.ID, Seq: r.Seq, From: r.From, To: r.To, TaskID: r.TaskID, Type: MessageType(r.Type), Payload: r.Payload, SentAt: r.SentAt}
}

func stateRecord(k stateKey, v StateValue) store.StateEntry {
	return store.StateEntry{Scope: k.scope, Key: k.key, Value: v.Value, Writer: v.Writer, UpdatedAt: v.UpdatedAt}
}

func stateFromRecord(e store.StateEntry) (stateKey, StateValue) {
	return stateKey{e.Scope, e.Key}, StateValue{Value: e.Value, Writer: e.Writer, UpdatedAt: e.UpdatedAt}
}

// savedMessage is an llm.Message as a history is stored. Tool arguments are
// kept as a string: a model may have written arguments that are not JSON.
type savedMessage struct {
	Role       llm.Role    `json:"role"`
	Content    string      `json:"content,omitempty"`
	ToolCalls  []savedCall `json:"tool_calls,omitempty"`
	ToolCallID string      `json:"tool_call_id,omitempty"`
}

type savedCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// record returns what the history gained since it was last recorded, as
// an append for the store, or false if it did not change: the messages
// added, each encoded once, and, if turns were trimmed, how many recorded
// messages were dropped and the summary. Once the store has the append,
// the caller calls recorded. A nil mind has nothing to record.
func (mem *mind) record(agentID string) (store.HistoryAppend, bool) {
	if mem == nil || (mem.saved == len(mem.msgs) && mem.drop == 0 && !mem.newSummary) {
		return store.HistoryAppend{}, false
	}
	h := store.HistoryAppend{AgentID: agentID, Drop: mem.drop, SetSummary: mem.newSummary, Messages: encodeMessages(mem.msgs[mem.saved:])}
	if mem.newSummary {
		h.Summary = mem.summary
	}
	return h, true
}

// recorded notes that the store holds the append record returned last,
// which the mind has not changed since (only the agent's drainer changes
// it).
func (mem *mind) recorded() {
	mem.saved, mem.drop, mem.newSummary = len(mem.msgs), 0, false
}

// encodeMessages returns each of msgs as stored, all in one buffer: the
// JSON of its savedMessage, as json.Encoder writes it with SetEscapeHTML
// (false), written without reflection and without copying the arguments
// of tool calls into strings first. Every turn of every model-driven agent
// records its messages, and a turn of many tool calls (a fan-out) is on
// the critical path of its children.
func encodeMessages(msgs []llm.Message) []json.RawMessage {
	b := make([]byte, 0, encodedSize(msgs))
	ends := make([]int, len(msgs))
	for i := range msgs {
		b = appendSavedMessage(b, &msgs[i])
		ends[i] = len(b)
	}
	out := make([]json.RawMessage, len(msgs))
	start := 0
	for i, end := range ends {
		out[i] = b[start:end:end]
		start = end
	}
	return out
}

// appendSavedMessage appends m's savedMessage as JSON, field for field,
// empty fields left out as omitempty leaves them.
func appendSavedMessage(b []byte, m *llm.Message) []byte {
	b = appendQuoted(append(b, `{"role":`...), string(m.Role), false)
	if m.Content != "" {
		b = appendQuoted(append(b, `,"content":`...), m.Content, false)
	}
	if len(m.ToolCalls) > 0 {
		b = append(b, `,"tool_calls":[`...)
		for i := range m.ToolCalls {
			c := &m.ToolCalls[i]
			if i > 0 {
				b = append(b, ',')
			}
			b = appendQuoted(append(b, `{"id":`...), c.ID, false)
			b = appendQuoted(append(b, `,"name":`...), c.Name, false)
			b = appendQuoted(append(b, `,"arguments":`...), c.Arguments, false)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	if m.ToolCallID != "" {
		b = appendQuoted(append(b, `,"tool_call_id":`...), m.ToolCallID, false)
	}
	return append(b, '}')
}

// encodedSize is about the size of msgs encoded, so that encodeMessages
// need not grow its buffer: the texts, with room for their keys and a few
// escapes.
func encodedSize(msgs []llm.Message) int {
	n := 0
	for _, m := range msgs {
		n += 64 + len(m.Content) + len(m.ToolCallID)
		for _, c := range m.ToolCalls {
			n += 64 + len(c.ID) + len(c.Name) + len(c.Arguments)
		}
	}
	return n + n/8
}

// restoreMind rebuilds a mind from its store record.
func restoreMind(h store.History) (*mind, error) {
	mem := &mind{summary: h.Summary, msgs: make([]llm.Message, len(h.Messages)), saved: len(h.Messages), dropped: h.Dropped}
	for i, raw := range h.Messages {
		var m savedMessage
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, fmt.Errorf("message %d: %w", i, err)
		}
		mem.msgs[i] = llm.Message{Role: m.Role, Content: m.Content, ToolCallID: m.ToolCallID}
		for _, c := range m.ToolCalls {
			mem.msgs[i].ToolCalls = append(mem.msgs[i].ToolCalls, llm.ToolCall{ID: c.ID, Name: c.Name, Arguments: json.RawMessage(c.Arguments)})
		}
	}
	return mem, nil
}

func marshalSpec(spec *InterfaceSpec) json.RawMessage {
	if spec == nil {
		return nil
	}
	b, _ := json.Marshal(spec) // strings only: always encodes
	return b
}

func unmarshalSpec(raw json.RawMessage) (*InterfaceSpec, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	var spec InterfaceSpec
	if err := json.Unmarshal(raw, &spec); err != nil {
		return nil, fmt.Errorf("interface spec: %w", err)
	}
	return &spec, nil
}
